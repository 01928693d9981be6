"""The job detail screen (Enter on a job's line in the job view): its ranks side by side (NVML's GPU
memory of each rank on each GPU, and the probe's breakdown bar for probed ranks, their utilisation and
step time, their memory trend), what is unusual with its figures, and the advice that fits.

It renders the sampling pipeline's findings on the job in --once's words (gputui.plain.jobs) (a replay's as
recorded, each host's by its own Judge); only where there are none is the job judged for it
(job_rows.job_analysis).
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from gputui import units
from gputui.analysis.breakdown import explain
from gputui.analysis.history import History
from gputui.analysis.jobs import who
from gputui.model import Breakdown, Job, Snapshot
from gputui.model.job_verdicts import JobAnalysis, Slot
from gputui.model.judgement import Judgements
from gputui.plain.jobs import findings, job_summary, model_line
from gputui.ui import bindings
from gputui.ui.table.cells import trend_text
from gputui.ui.table.job_rows import job_analysis
from gputui.ui.widgets.analysis_panel import AdviceList
from gputui.ui.widgets.bars import meter
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.memory_bar import STYLES, bar, swatch
from gputui.ui.widgets.probe_panel import probe_device

# Cells of a rank's line besides its memory bar: who, GPU, the figures, SM %, step time, trend.
WHO, GPU, FIGURES, BUSY, STEP, TREND = 9, 4, 12, 5, 7, 6
BAR_MAX = 40


class JobDetail(Screen):
    """Everything known about one job (by Job.key; ``host``: the many-host view's host of it)."""

    DEFAULT_CSS = """
    JobDetail .detail-section { text-style: bold; border-top: solid $primary 40%; margin: 1 0 0 0; }
    JobDetail.-ascii .detail-section { border-top: ascii $primary 40%; }
    JobDetail #job-advice { border-top: solid $primary 40%; margin: 1 0 0 0; }
    JobDetail.-ascii #job-advice { border-top: ascii $primary 40%; }
    """

    BINDINGS = bindings.JOB_DETAIL

    def __init__(self, key: str, *, ascii: bool = False, host: str | None = None) -> None:
        super().__init__()
        self.key, self.ascii, self.host = key, ascii, host
        if ascii:
            self.add_class("-ascii")
        self.analysis: JobAnalysis | None = None
        self.snapshot: Snapshot | None = None
        self.trends: Mapping = {}
        self.ended = False  # the job is gone: its last figures stay

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="job-body"):
            yield Static(id="job-title")
            yield Static("What is unusual", classes="detail-section")
            yield Static(id="job-findings")
            yield Static("Ranks side by side", classes="detail-section")
            yield Static(id="job-ranks")
            yield AdviceList("nothing to suggest: its ranks look alike", id="job-advice")
        yield KeyBar()

    def show(self, snapshot: Snapshot, history: History | None = None, trends: Mapping | None = None,
             leaks: Mapping | None = None, judgements: Judgements | None = None) -> None:
        """Render from the latest snapshot (the process detail screen's arguments: the app updates
        both alike); a job that ended keeps its last figures."""
        job = next((j for j in snapshot.jobs if j.key == self.key), None)
        self.ended = job is None
        if job is not None:
            self.snapshot, self.trends = snapshot, trends or {}
            self.analysis = job_analysis(job, snapshot, self.trends, judgements)
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        a, snapshot = self.analysis, self.snapshot
        if a is None or snapshot is None:
            self.query_one("#job-title", Static).update(Content.styled(f"No job {self.key} here.", "bold $warning"))
            return
        self.query_one("#job-title", Static).update(self._title(a.job))
        said = findings(a, advice=False)
        found = Content("\n").join(Content.styled(f"! {line}", "$warning") for line in said) if said \
            else Content.styled("nothing: its ranks look alike", "$text-muted")
        if a.model is not None:  # a sharded job: its ranks' shards make the model
            found = Content("\n").join([Content.styled(model_line(a.model), "$text-muted"), found])
        self.query_one("#job-findings", Static).update(found)
        width = self.size.width or 80
        self.query_one("#job-ranks", Static).update(ranks_text(a, snapshot, self.trends, width, ascii=self.ascii))
        self.query_one(AdviceList).show(a.advice)

    def _title(self, job: Job) -> Content:
        lines = [Content.assemble(("Job ", "bold"), (job.name, "bold $accent"), "  ",
                                  (job_summary(job), "$text-muted"))]
        if self.host is not None:
            lines[0] = Content.assemble((self.host, "bold $accent"), "  ", lines[0])
        if self.ended:
            lines.append(Content.styled("This job has ended: these are its last figures.", "bold $warning"))
        lines += [Content.styled(note, "$warning") for note in job.notes]
        return Content("\n").join(lines)

    def action_close(self) -> None:
        self.app.pop_screen()


def ranks_text(a: JobAnalysis, snapshot: Snapshot, trends: Mapping, width: int, *,
               ascii: bool = False) -> Content:
    """A line per rank and GPU: NVML's memory as a bar of the GPU and in figures, SM %, step time and
    memory trend; under a probed rank, where its memory goes (the probe's breakdown, as a bar of the
    same width). The slot an imbalance, a straggler or the first OOM names is marked."""
    bar_width = max(8, min(BAR_MAX, width - (WHO + GPU + FIGURES + BUSY + STEP + TREND + 10)))
    nvml_pid: dict[tuple[int, int | None], int] = {(p.own_pid, p.device_index): p.pid for p in snapshot.processes}
    devices = {d.index: d for d in snapshot.devices}
    reports = {r.pid: r for r in snapshot.probes}
    lines = [Content.styled(
        f"{'':{WHO}} {'GPU':>{GPU}} {'GPU memory (NVML)':<{bar_width + 2}} {'':>{FIGURES}} {'SM%':>{BUSY}} "
        f"{'STEP':>{STEP}} {'TREND':<{TREND}}", "bold $text-muted")]
    parts_seen: list[Breakdown] = []
    for slot in a.slots:
        trend = trends.get((nvml_pid.get((slot.pid, slot.device), slot.pid), slot.device))
        mark, mark_style = trend_text(trend, ascii=ascii, short=True)
        fill = slot.gpu_memory / slot.memory_total if slot.gpu_memory is not None and slot.memory_total else None
        label = who(slot.rank, slot.pid, slot.device if slot.rank is None else None) + ("*" if slot.probed else "")
        lines.append(Content.assemble(
            (f"{label:<{WHO}}", _flag(a, slot)), " ",
            f"{'-' if slot.device is None else slot.device:>{GPU}} ",
            Content.assemble(*meter(fill, bar_width, ascii=ascii)), " ",
            f"{units.size_pair_short(slot.gpu_memory, slot.memory_total):>{FIGURES}} ",
            f"{units.percent(slot.utilisation):>{BUSY}} ",
            f"{units.step_time(slot.step_time) if slot.step_time is not None else '-':>{STEP}} ",
            (f"{mark:<{TREND}}", mark_style)))
        report = reports.get(slot.pid)
        if report is not None and slot.device is not None:
            breakdown = explain(report.pid, probe_device(report, devices.get(slot.device)), slot.gpu_memory)
            if breakdown is not None and breakdown.total:
                parts_seen.append(breakdown)
                # Under the NVML bar's fill, as long: the same memory, split into its parts.
                lines.append(Content.assemble(f"{'probe':>{WHO + GPU + 1}}  ",
                                              bar(breakdown, max(1, round(bar_width * (fill or 1))), ascii=ascii)))
    if parts_seen:
        keys = dict.fromkeys(item.key for b in parts_seen for item in b.items)
        labels = {item.key: item.label for b in parts_seen for item in b.items}
        legend = Content(" ").join(Content.assemble((swatch(key, ascii), STYLES[key][0]), f" {labels[key]} ")
                                   for key in keys)
        lines += [Content(""), Content.assemble(("* probed; its breakdown: ", "$text-muted"), legend)]
    return Content("\n").join(lines)


def _flag(a: JobAnalysis, slot: Slot) -> str:
    """The style of a slot's name: the first to run out of memory, or the one far above or behind the others."""
    oom = a.first_oom
    if oom is not None and (oom.pid, oom.device) == (slot.pid, slot.device):
        return "bold $error"
    i = a.imbalance
    if i is not None and (i.pid, i.device) == (slot.pid, slot.device):
        return "bold $warning"
    if any(s.pid == slot.pid for s in a.stragglers):
        return "bold $warning"
    return "bold"
