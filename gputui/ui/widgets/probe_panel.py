"""The detail screen's PyTorch probe view: where the process's GPU memory goes (stacked bar), the
per-step chart, the caching allocator's figures and the last OOM; or, with no probe, how to attach one.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from gputui import units
from gputui.analysis.breakdown import explain
from gputui.analysis.text import figures_age, probe_history
from gputui.model import AllocatorStats, Device, OomRecord, ProbeDevice, ProbeReport
from gputui.ui.widgets.memory_bar import MemoryBreakdown
from gputui.ui.widgets.step_chart import StepChart, step_series

HOW_TO_ATTACH = (
    "No PyTorch probe is attached to this process, so gputui sees only what the driver reports.\n"
    "To see where its GPU memory goes (parameters, gradients, optimizer state, activations, cache),\n"
    "start the job with one of:\n"
    "  gputui run -- python train.py          (no code change)\n"
    "  GPUTUI_PROBE=1 python train.py         (no code change)\n"
    "  import gputui.probe; gputui.probe.start()   (in the training script)\n"
    "Or press A to attach one to this running process now (`gputui attach PID`)."
)


def probe_device(report: ProbeReport, device: Device | None) -> ProbeDevice | None:
    """The probe's view of the NVML device (joined by UUID), else its busiest device."""
    if not report.devices:
        return None
    if device is not None and device.uuid:
        for pd in report.devices:
            if pd.uuid == device.uuid:
                return pd
    return max(report.devices, key=lambda pd: pd.allocator.reserved if pd.allocator else -1)


class ProbePanel(Vertical):
    """Shows one process's probe report, or how to attach a probe."""

    DEFAULT_CSS = """
    ProbePanel { height: auto; }
    ProbePanel > Static { height: auto; }
    ProbePanel > MemoryBreakdown, ProbePanel > StepChart, ProbePanel > #probe-allocator { margin: 1 0 0 0; }
    """

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii
        self._state: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static(Content.styled(HOW_TO_ATTACH, "$text-muted"), id="probe-summary")
        yield MemoryBreakdown(ascii=self.ascii, id="probe-breakdown")
        yield StepChart(ascii=self.ascii, id="probe-steps")
        yield Static(id="probe-allocator")
        yield Static(id="probe-oom")

    def show(self, report: ProbeReport | None, *, nvml: int | None = None,
             device: Device | None = None, ended: bool = False) -> None:
        """``nvml`` is the driver's figure for this process on ``device`` (None when unlisted);
        ``ended``: the process has ended, and ``report`` is the last it left."""
        state = (report, nvml, device.uuid if device else None, ended)
        if state == self._state:
            return
        self._state = state
        attached = report is not None
        for part in ("#probe-breakdown", "#probe-steps", "#probe-allocator", "#probe-oom"):
            self.query_one(part).display = attached
        summary = self.query_one("#probe-summary", Static)
        if report is None:
            summary.update(Content.styled(HOW_TO_ATTACH, "$text-muted"))
            return
        pd = probe_device(report, device)
        summary.update(headline(report, pd, ended=ended))
        self.query_one(MemoryBreakdown).show(explain(report.pid, pd, nvml))
        self.query_one(StepChart).show(step_series(report.steps, pd.device if pd else None))
        alloc = pd.allocator if pd else None
        self.query_one("#probe-allocator", Static).update(allocator_text(alloc))
        oom = self.query_one("#probe-oom", Static)
        oom.display = report.last_oom is not None
        if report.last_oom is not None:
            oom.update(oom_text(report.last_oom))


def headline(report: ProbeReport, pd: ProbeDevice | None, *, ended: bool = False) -> Content:
    where = pd.device if pd else "no device in use yet"
    cpu = "" if report.probe_cpu_seconds is None else f", the probe used {report.probe_cpu_seconds:.2f} s CPU"
    lines = [Content.assemble(("The probe's last report" if ended else "Probe attached", "bold $accent"),
                              f" (torch {report.torch_version or units.NA}) on {where}, report at "
                              f"{units.clock_time(report.taken_at)}{cpu}"),
             Content.styled("no device figures were read before it ended" if ended and report.read_at is None
                            else figures_age(report.read_at, report.read_at_step, report.taken_at), "$text-muted"),
             Content.styled(probe_history(report), "$text-muted")]
    for problem in report.problems:
        lines.append(Content.styled(f"probe trouble: {problem}", "$warning"))
    for limit in report.limits:
        lines.append(Content.styled(f"not seen: {limit}", "$text-muted"))
    return Content("\n").join(lines)


def _with_peak(now: int | None, peak: int | None) -> str:
    text = units.size(now)
    return text if peak is None else f"{text} (peak {units.size(peak)})"


def allocator_text(alloc: AllocatorStats | None) -> Content:
    """The caching allocator's figures, as torch.cuda.memory_stats() names them."""
    if alloc is None:
        return Content.styled("No CUDA allocator figures (a CPU-only job, or CUDA not used yet).",
                              "$text-muted")
    rows = [
        ("allocated", _with_peak(alloc.allocated, alloc.allocated_peak)),
        ("reserved", _with_peak(alloc.reserved, alloc.reserved_peak)),
        ("active", _with_peak(alloc.active, alloc.active_peak)),
        ("inactive split", _with_peak(alloc.inactive_split, alloc.inactive_split_peak)),
        ("requested", _with_peak(alloc.requested, alloc.requested_peak)),
        ("segments", units.NA if alloc.segments is None else str(alloc.segments)),
        ("largest free block", units.size(alloc.largest_free_block)),
        ("alloc retries", units.NA if alloc.alloc_retries is None else str(alloc.alloc_retries)),
        ("OOMs", units.NA if alloc.ooms is None else str(alloc.ooms)),
        ("settings", _settings(alloc)),
    ]
    lines = [Content.styled("Caching allocator", "bold")]
    for name, value in rows:
        style = "$error" if name in ("alloc retries", "OOMs") and value not in ("0", units.NA) else ""
        lines.append(Content.assemble((f"{name:>18}  ", "$text-muted"), (value, style)))
    return Content("\n").join(lines)


def _settings(alloc: AllocatorStats) -> str:
    words = []
    if alloc.settings:
        words.append(f"PYTORCH_CUDA_ALLOC_CONF={alloc.settings}")
    if alloc.expandable_segments is not None:
        words.append(f"expandable_segments={'on' if alloc.expandable_segments else 'off'}")
    return ", ".join(words) or "defaults"


def oom_text(oom: OomRecord) -> Content:
    """The last out-of-memory error: what was asked, what was free, where in the code."""
    where = f" on {oom.device}" if oom.device else ""
    lines = [Content.styled(f"Last OOM at {units.clock_time(oom.at, date=True)}{where}", "bold $error")]
    figures = [f"asked for {units.size(oom.requested)}", f"free {units.size(oom.free)}",
               f"allocated {units.size(oom.allocated)}", f"reserved {units.size(oom.reserved)}"]
    lines.append(Content("  " + ", ".join(figures)))
    if oom.line:
        lines.append(Content.styled(f"  in your code at {oom.line}", "bold"))
    for frame in reversed(oom.where):  # innermost first: the line that asked
        lines.append(Content.styled(f"  at {frame}", "$text-muted"))
    if oom.message:
        lines.append(Content.styled("  " + oom.message, "$text-muted"))
    return Content("\n").join(lines)
