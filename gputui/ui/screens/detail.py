"""The process detail screen (Enter on a process): its history of GPU memory, SM %, CPU % and host
memory, its command line, user, start time and devices, its memory trend, and the probe's view.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputui.analysis.history import History
from gputui.model import GpuProcess, Snapshot
from gputui.ui import format as fmt
from gputui.model.verdicts import ProcessTrend
from gputui.ui.rows import trend_text
from gputui.ui.widgets.charts import Chart
from gputui.ui.widgets.probe_panel import ProbePanel

PROCESS_CHARTS = (
    ("gpu_memory", "GPU MEM", lambda v: fmt.size(v, short=True)),
    ("sm_util", "SM", fmt.percent),
    ("cpu_percent", "CPU", fmt.percent),
    ("host_memory", "HOST MEM", lambda v: fmt.size(v, short=True)),
)


class ProcessDetail(Screen):
    """Everything known about one GPU process (one pid on one device)."""

    BINDINGS = [Binding("escape,backspace", "close", "Back", tooltip="Back to the process list", id="detail.back")]

    def __init__(self, pid: int, device_index: int, *, ascii: bool = False) -> None:
        super().__init__()
        self.pid, self.device_index, self.ascii = pid, device_index, ascii

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.device_index)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-body"):
            yield Static(id="detail-title")
            yield Static(id="detail-info")
            with Grid(id="detail-charts"):
                for metric, title, words in PROCESS_CHARTS:
                    yield Chart(title, words, ascii=self.ascii, id=f"pchart-{metric}")
            yield Static(id="detail-trend")  # the analysis verdict goes here
            yield Static(Content.styled("PyTorch probe", "bold"), classes="section-title")
            yield ProbePanel(id="detail-probe")
        yield Footer()

    def show(self, snapshot: Snapshot, history: History, trend: ProcessTrend | None = None) -> None:
        """Render from the latest snapshot; a process that exited keeps its last known details."""
        mine = [p for p in snapshot.processes if p.pid == self.pid]
        proc = next((p for p in mine if p.device_index == self.device_index), None)
        title = self.query_one("#detail-title", Static)
        if proc is None:
            title.update(Content.styled(f"Process {self.pid} on GPU {self.device_index} is no longer "
                                        "on the GPU (showing its last history)", "bold $warning"))
        else:
            title.update(Content.assemble((f"Process {proc.pid}", "bold"),
                                          f"  on GPU {proc.device_index}  ",
                                          (fmt.command_line(proc.command, proc.name)[:60], "$text-muted")))
            self.query_one("#detail-info", Static).update(info_text(proc, mine, snapshot))
        for metric, _, _ in PROCESS_CHARTS:
            self.query_one(f"#pchart-{metric}", Chart).show(history.process(self.key, metric))
        text, style = trend_text(trend, ascii=self.ascii)
        trend_line = Content.assemble(("GPU memory trend: ", "bold"),
                                      (describe_trend(trend), style or "$text-muted"))
        self.query_one("#detail-trend", Static).update(trend_line)
        report = next((r for r in snapshot.probes if r.pid == self.pid), None)
        self.query_one(ProbePanel).show(report)

    def action_close(self) -> None:
        self.app.pop_screen()


def info_text(proc: GpuProcess, same_pid: list[GpuProcess], snapshot: Snapshot) -> Content:
    """Command line, user, start time, devices and state of a process."""
    devices = {d.index: d for d in snapshot.devices}
    used = []
    for p in sorted(same_pid, key=lambda p: p.device_index):
        d = devices.get(p.device_index)
        cuda = "" if d is None or d.cuda_index is None else f", cuda:{d.cuda_index} here"
        name = fmt.short_gpu_name(d.name) if d else "?"
        used.append(f"GPU {p.device_index} ({name}{cuda}) {fmt.size(p.gpu_memory, short=True)}")
    started = fmt.date_time(proc.started_at)
    age = "" if proc.started_at is None else f" ({fmt.elapsed(snapshot.taken_at - proc.started_at)} ago)"
    rows = [
        ("command", " ".join(proc.command) if proc.command else (proc.name or fmt.NA)),
        ("user", proc.user or fmt.NA),
        ("started", started + age),
        ("parent", fmt.NA if proc.ppid is None else str(proc.ppid)),
        ("devices", "; ".join(used)),
        ("type", proc.kind + ("" if proc.gpu_instance_id is None
                              else f", MIG GI {proc.gpu_instance_id} CI {proc.compute_instance_id}")),
    ]
    if proc.state != "ok":
        rows.append(("state", f"{proc.state}" + (f": {proc.note}" if proc.note else "")))
    return Content("\n").join(
        Content.assemble((f"{name:>8}  ", "bold $text-muted"), value) for name, value in rows
    )


def describe_trend(trend: ProcessTrend | None) -> str:
    if trend is None:
        return "not enough history yet"
    words = {"steady": "steady", "warming_up": "warming up (allocator cache filling, then flat)",
             "sawtooth": "sawtooth (grows and is released)", "growing": "growing",
             "unknown": "not enough history yet"}.get(trend.verdict, trend.verdict)
    if trend.verdict == "growing" and trend.rate is not None:
        words += f" at {fmt.size(trend.rate * 60)}/min"
        if trend.time_to_oom is not None:
            words += f"; the GPU runs out of memory in about {fmt.elapsed(trend.time_to_oom)}"
    return words
