"""The detail screen's place for the PyTorch probe's view of a process.

Until the probe work fills it with the memory breakdown and per-step chart, it says whether a probe is
attached and, when none is, how to attach one.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from gputui.model import ProbeReport
from gputui.ui import format as fmt

HOW_TO_ATTACH = (
    "No PyTorch probe is attached to this process, so gputui sees only what the driver reports.\n"
    "To see where its GPU memory goes (parameters, gradients, optimizer state, activations, cache),\n"
    "start the job with one of:\n"
    "  gputui run -- python train.py          (no code change)\n"
    "  GPUTUI_PROBE=1 python train.py         (no code change)\n"
    "  import gputui.probe; gputui.probe.start()   (in the training script)"
)


class ProbePanel(Static):
    """Shows the probe report for one process, or how to attach a probe."""

    DEFAULT_CSS = "ProbePanel { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(Content(HOW_TO_ATTACH), id=id)
        self.report: ProbeReport | None = None
        self._shown = False

    def show(self, report: ProbeReport | None) -> None:
        if self._shown and report == self.report:
            return
        self.report, self._shown = report, True
        self.update(describe(report))


def describe(report: ProbeReport | None) -> Content:
    """The panel's text: a summary of the report's allocator figures, or how to attach."""
    if report is None:
        return Content.styled(HOW_TO_ATTACH, "$text-muted")
    lines = [Content.styled(f"Probe attached (torch {report.torch_version or fmt.NA}), report at "
                            f"{fmt.clock(report.taken_at)}", "bold $accent")]
    for dev in report.devices:
        alloc = dev.allocator
        if alloc is None:
            lines.append(Content(f"  {dev.device}: no allocator figures"))
            continue
        lines.append(Content(
            f"  {dev.device}: allocated {fmt.size(alloc.allocated)}  reserved {fmt.size(alloc.reserved)}"
            f"  cache {fmt.size(alloc.reserved - alloc.allocated)}"
            f"  peak {fmt.size(alloc.allocated_peak)}"
        ))
    if report.steps:
        last = report.steps[-1]
        lines.append(Content(f"  step {last.step}: allocated {fmt.size(last.allocated)}"
                             f"  took {'n/a' if last.duration is None else f'{last.duration:.3f}s'}"))
    if report.last_oom is not None:
        lines.append(Content.styled(f"  last OOM at {fmt.clock(report.last_oom.at)}: "
                                    f"{report.last_oom.message}", "$error"))
    return Content("\n").join(lines)
