"""The process detail screen (Enter on a process): its history of GPU memory, SM %, CPU % and host
memory, its command line, user, start time and devices, its memory trend, the PyTorch probe's view
(memory breakdown, per-step chart, allocator figures, last OOM) and the analysis (leak verdict,
growing allocation sites, advice). A probed process that NVML does not list shows its probe's view only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from gputui import units
from gputui.analysis.history import History
from gputui.analysis.process import ProcessAnalysis, analyse, judged_analysis
from gputui.analysis.vocabulary import command_line
from gputui.model import EndedProcess, GpuProcess, HostProcess, LeakVerdict, ProbeReport, Snapshot
from gputui.model.judgement import Judgements, ProcessJudgement
from gputui.model.verdicts import TREND_GROWING, ProcessTrend
from gputui.plain.report import oom_when
from gputui.sample.judge import advice_basis
from gputui.ui import bindings
from gputui.ui import format as fmt
from gputui.ui.actions.attaching import ProbeTarget
from gputui.ui.actions.signals import Target
from gputui.ui.requests import RecordSites
from gputui.ui.table.cells import GROWTH_STATES, probe_device_text, trend_text
from gputui.ui.widgets.analysis_panel import AnalysisPanel, headline, trend_words
from gputui.ui.widgets.charts import Chart
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.probe_panel import ProbePanel

# (metric, title, how to word a value, top of its scale: 100 for percentages, None: its largest value)
PROCESS_CHARTS = (
    ("gpu_memory", "GPU MEM", lambda v: units.size_short(v), None),
    ("sm_util", "SM", units.percent, 100.0),
    ("cpu_percent", "CPU", units.percent, 100.0),
    ("host_memory", "HOST MEM", lambda v: units.size_short(v), None),
)

class ProcessDetail(Screen):
    """Everything known about one process: one pid on one device, or (device None) a probed
    process NVML does not list."""

    DEFAULT_CSS = """
    ProcessDetail #detail-headline { height: auto; }
    ProcessDetail .detail-section { text-style: bold; border-top: solid $primary 40%; margin: 1 0 0 0; }
    ProcessDetail.-ascii .detail-section { border-top: ascii $primary 40%; }
    """

    BINDINGS = bindings.PROCESS_DETAIL

    def __init__(self, pid: int, device_index: int | None, *, ascii: bool = False,
                 host: str | None = None) -> None:
        """``host``: the many-host view's host of the process (None: this machine)."""
        super().__init__()
        self.pid, self.device_index, self.ascii, self.host = pid, device_index, ascii, host
        if ascii:
            self.add_class("-ascii")
        self.report: ProbeReport | None = None
        self.ended: EndedProcess | None = None  # an OOM ended it
        self.last_seen: float | None = None  # the time of the last sample the process was in
        self.exited = False  # it and its probe went away (no OOM seen): its probe's last report is history
        self.analysis: ProcessAnalysis | None = None
        self.process: GpuProcess | None = None  # NVML's entry, as last sampled
        self.probed: HostProcess | None = None  # /proc's view of a probed process NVML does not list

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.pid, self.device_index)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-body"):
            yield Static(id="detail-title")
            yield Static(id="detail-headline")
            yield Static(id="detail-info")
            with Grid(id="detail-charts"):
                for metric, title, words, top in PROCESS_CHARTS:
                    yield Chart(title, words, top=top, ascii=self.ascii, id=f"pchart-{metric}")
            yield Static(id="detail-trend")
            yield Static("PyTorch probe", classes="detail-section")
            yield ProbePanel(ascii=self.ascii, id="detail-probe")
            yield Static("Analysis", classes="detail-section")
            yield AnalysisPanel(id="detail-analysis")
        yield KeyBar()

    def on_resize(self) -> None:
        # One chart per row in a narrow pane (an inline style: it must win over the app's sheet).
        self.query_one("#detail-charts").styles.grid_size_columns = 1 if self.size.width < 70 else 2

    def show(self, snapshot: Snapshot, history: History, trends: Mapping | None = None,
             leaks: Mapping | None = None, judgements: Judgements | None = None) -> None:
        """Render from the latest snapshot; a process that exited keeps its last known details.

        ``trends`` holds NVML memory trends by (pid, device index), ``leaks`` leak verdicts by pid,
        ``judgements`` the sampling pipeline's, made with these trends and verdicts (None: none made).
        """
        mine = [p for p in snapshot.processes if p.pid == self.pid]
        proc = next((p for p in mine if p.device_index == self.device_index), None)
        local = proc.own_pid if proc is not None else self.pid
        report = next((r for r in snapshot.probes if r.pid == local), None)
        if proc is not None or report is not None:
            self.last_seen = snapshot.taken_at
        self.ended = next((e for e in snapshot.ended if e.pid == local), None) if report is None else None
        # A probe goes away with its process (discovery drops the sockets of dead pids): with the
        # process gone from NVML's list too, it has ended, and its probe's last report is history.
        # (Not before it was last seen: a replay seeks back in time.)
        self.exited = (self.ended is None and report is None and not mine and self.report is not None
                       and self.last_seen is not None and snapshot.taken_at > self.last_seen)
        if self.ended is not None:
            report = self.ended.report  # an OOM ended it: the report it left
        elif self.exited:
            report = self.report  # the last report is all there is
        self.report = report
        self.process = proc
        self.probed = next((p for p in snapshot.probed if p.pid == local), None)
        device = None
        if proc is not None:
            device = next((d for d in snapshot.devices if d.index == proc.device_index), None)
        trend = (trends or {}).get(self.key) if self.device_index is not None else None
        leak = (leaks or {}).get(local)
        over = self.ended is not None or self.exited  # nothing the probe said is current any more

        self.query_one("#detail-title", Static).update(self._title(proc, report))
        if self.ended is not None:
            self.query_one("#detail-info", Static).update(ended_info(self.ended))
        elif proc is not None:
            self.query_one("#detail-info", Static).update(info_text(proc, mine, snapshot))
        elif self.device_index is None and report is not None:
            self.query_one("#detail-info", Static).update(probe_only_info(report))
        charts = self.query_one("#detail-charts")
        charts.display = self.device_index is not None
        if self.device_index is not None:
            key = (self.pid, self.device_index)
            for metric, *_ in PROCESS_CHARTS:
                self.query_one(f"#pchart-{metric}", Chart).show(history.process(key, metric))
        trend_line = self.query_one("#detail-trend", Static)
        trend_line.display = self.device_index is not None
        if self.device_index is not None:
            _, style = trend_text(trend, ascii=self.ascii)
            trend_line.update(Content.assemble(("GPU memory trend (NVML): ", "bold"),
                                               (trend_words(trend, probe_forecast=forecasts_oom(leak)),
                                                style or "$text-muted")))
        self.query_one(ProbePanel).show(report, nvml=proc.gpu_memory if proc else None, device=device, ended=over)
        # An ended process's last report is no longer in the sample: the pipeline did not judge it.
        judged = None if over else judged_here(snapshot, judgements, local, proc, trend, leak, trends or {})
        self.analysis = (analyse(snapshot, proc, report, trend=trend, leak=leak) if judged is None else
                         judged_analysis(snapshot, report, judged, trend=trend))
        if over:  # no forecast and no room to grow for a process that has ended
            self.analysis = dataclasses.replace(
                self.analysis, headroom=(), advice=tuple(a for a in self.analysis.advice if a.kind != "oom-soon"))
        self.query_one(AnalysisPanel).show(self.analysis, ended=over)
        if self.ended is not None:
            top = ended_headline(self.ended, self.analysis)
        else:  # the leak verdict of an exited process's last report is not news for the top line
            top = headline(dataclasses.replace(self.analysis, leak=None) if self.exited else self.analysis)
        self.query_one("#detail-headline", Static).display = bool(top)
        self.query_one("#detail-headline", Static).update(top)

    def _title(self, proc: GpuProcess | None, report: ProbeReport | None) -> Content:
        title = self._title_here(proc, report)
        return title if self.host is None else Content.assemble((self.host, "bold $accent"), "  ", title)

    def _title_here(self, proc: GpuProcess | None, report: ProbeReport | None) -> Content:
        if self.ended is not None:
            return ended_title(self.ended)
        seen = f"last seen at {units.clock_time(self.last_seen, date=True)}"
        if self.exited:
            where = "" if self.device_index is None else f" on GPU {self.device_index}"
            return Content.styled(f"Process {self.pid}{where} has ended: {seen}", "bold $warning")
        if self.device_index is None:
            where = "not listed by NVML" if report is None else f"on {probe_device_text(report)}, not listed by NVML"
            command = command_line(report.command) if report else ""
            return Content.assemble((f"Process {self.pid}", "bold"), f"  {where}  ",
                                    (command[:60], "$text-muted"))
        if proc is None:
            return Content.styled(f"Process {self.pid} on GPU {self.device_index} is no longer on the "
                                  f"GPU: {seen} (showing its last history)", "bold $warning")
        return Content.assemble((f"Process {proc.pid}", "bold"), f"  on {fmt.gpu_words(proc)}  ",
                                (command_line(proc.command, proc.name)[:60], "$text-muted"))

    def probe_target(self) -> ProbeTarget | None:
        """Whom the probe keys would attach to or detach from: this process, as last sampled."""
        if self.ended is not None or self.exited:
            return None
        proc, report = self.process, self.report
        if proc is not None:
            command = " ".join(proc.command) or proc.name or "?"
            target = Target(proc.pid, proc.local_pid, f"{command}  (user {proc.user or '?'})", proc.started_at)
            return ProbeTarget(target, probed=report is not None,
                               uses_torch=True if report is not None else proc.uses_torch)
        if report is not None:  # a probed process NVML does not list: its pid is a local one
            started = self.probed.started_at if self.probed is not None else None
            command = " ".join(report.command) or f"probed process {report.pid}"
            return ProbeTarget(Target(report.pid, report.pid, command, started), probed=True, uses_torch=True)
        return None

    def action_close(self) -> None:
        self.app.pop_screen()

    def action_record_sites(self) -> None:
        if self.ended is not None or self.exited:
            self.notify(f"Process {self.pid} has ended: there is no probe left to record.", severity="warning")
            return
        if self.report is None:
            self.notify("No PyTorch probe in this process: nothing can record its allocation sites.",
                        severity="warning")
            return
        on = not self.report.recording
        self.post_message(RecordSites(self.report.pid, on=on, steps=bindings.RECORD_STEPS))


def judged_here(snapshot: Snapshot, judgements: Judgements | None, pid: int, proc: GpuProcess | None,
                trend: ProcessTrend | None, leak: LeakVerdict | None, trends: Mapping) -> ProcessJudgement | None:
    """The pipeline's judgement of process ``pid`` where it worked the advice out from what this screen
    shows (its row ``proc``, its growing ``trend``, the snapshot's report and its ``leak`` verdict); None
    where the screen asks for its advice itself: a process neither probed nor growing (a probe to attach),
    or one on several GPUs seen on another than its first."""
    judged = judgements.of(pid) if judgements is not None else None
    report = next((r for r in snapshot.probes if r.pid == pid), None)
    basis = advice_basis([p for p in snapshot.processes if p.own_pid == pid], report, trends)
    if judged is None or basis is None or (report is None and leak is not None):
        return None
    growing = trend if trend is not None and trend.verdict == TREND_GROWING else None
    return judged if basis[0] is proc and basis[1] is growing else None


def ended_title(ended: EndedProcess) -> Content:
    """The title of a process an OOM ended: when, and where its report is."""
    oom = ended.report.last_oom
    when = units.clock_time(oom.at if oom is not None else ended.ended_at, date=True)
    parts: list = [(f"Process {ended.pid} ended: out of memory at {when}", "bold $error")]
    if ended.report_file:
        parts += ["  ", (f"gputui oom {ended.report_file}", "$text-muted")]
    return Content.assemble(*parts)


def ended_headline(ended: EndedProcess, analysis: ProcessAnalysis) -> Content:
    """Where the OOM came, then the first advice: "in the forward pass of step 499; at model.py:41"."""
    oom = ended.report.last_oom
    parts = [Content.styled(oom_when(dataclasses.replace(oom, report_file=None)) or "out of memory", "$error")
             ] if oom is not None else []
    if analysis.advice:
        parts.append(Content.assemble(("advice 1: ", "$text-muted"), (analysis.advice[0].title, "bold")))
    return Content("  ·  ").join(parts)


def ended_info(ended: EndedProcess) -> Content:
    """What is known of a process an OOM ended: its command, where it was, its report."""
    where = ", ".join(f"GPU {i}" for i in ended.devices) or ", ".join(d.device for d in ended.report.devices)
    held = f", holding {units.size_short(ended.gpu_memory)}" if ended.gpu_memory is not None else ""
    return _rows([
        ("command", " ".join(ended.report.command) or units.NA),
        ("devices", f"{where or units.NA}{held} when last seen"),
        ("report", f"gputui oom {ended.report_file}" if ended.report_file else
                   "none written: these figures are its probe's last report"),
    ])


def forecasts_oom(leak: LeakVerdict | None) -> bool:
    """Whether the probe's leak verdict says when the process runs out of memory."""
    return leak is not None and leak.state in GROWTH_STATES and leak.oom_step is not None


def info_text(proc: GpuProcess, same_pid: list[GpuProcess], snapshot: Snapshot) -> Content:
    """Command line, user, start time, devices and state of a process."""
    devices = {d.index: d for d in snapshot.devices}
    used = []
    for p in sorted(same_pid, key=lambda p: p.device_index):
        d = devices.get(p.device_index)
        mig = None if d is None else next((m for m in d.mig_instances if m.gpu_instance_id is not None
                                           and m.gpu_instance_id == p.gpu_instance_id), None)
        cuda_index = mig.cuda_index if mig is not None else d.cuda_index if d is not None else None
        cuda = "" if cuda_index is None else f", cuda:{cuda_index} here"
        name = fmt.short_gpu_name(d.name) if d else "?"
        profile = f", {mig.profile}" if mig is not None and mig.profile else ""
        used.append(f"{fmt.gpu_words(p)} ({name}{profile}{cuda}) {units.size_short(p.gpu_memory)}")
    started = units.clock_time(proc.started_at, date=True)
    age = "" if proc.started_at is None else f" ({units.elapsed(snapshot.taken_at - proc.started_at)} ago)"
    rows = [
        ("command", " ".join(proc.command) if proc.command else (proc.name or units.NA)),
        ("user", proc.user or units.NA),
        ("started", started + age),
        ("parent", units.NA if proc.ppid is None else str(proc.ppid)),
        ("devices", "; ".join(used)),
        ("type", proc.kind + ("" if proc.gpu_instance_id is None else f", {fmt.gpu_words(proc)}: GI "
                              f"{proc.gpu_instance_id} CI {_or_na(proc.compute_instance_id)}")),
    ]
    if proc.owner is not None and (proc.owner.key[0] != "user" or proc.owner.note):  # else "user" says it
        rows.insert(2, ("owner", proc.owner.describe()))
    if proc.state != "ok":
        rows.append(("state", f"{proc.state}" + (f": {proc.note}" if proc.note else "")))
    return _rows(rows)


def probe_only_info(report: ProbeReport) -> Content:
    """What the probe says of a process the driver does not list."""
    devices = ", ".join(d.device for d in report.devices) or "none in use yet"
    return _rows([
        ("command", " ".join(report.command) or units.NA),
        ("devices", devices),
        ("NVML", "does not list this process (a CPU-only job, or no NVIDIA driver here): "
                 "these figures come from its probe"),
    ])


def _or_na(value: int | None) -> str:
    return units.NA if value is None else str(value)


def _rows(rows: list[tuple[str, str]]) -> Content:
    return Content("\n").join(
        Content.assemble((f"{name:>8}  ", "bold $text-muted"), value) for name, value in rows)
