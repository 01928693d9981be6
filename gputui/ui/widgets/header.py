"""The top lines: host, driver and CUDA versions, the snapshot's time, refresh interval and state,
and the host's CPU, memory and swap as bars.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from gputui.model import Snapshot
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import join, label, meter


class HostHeader(Widget):
    """Renders from the last Snapshot plus the monitor's own state (interval, paused)."""

    DEFAULT_CSS = "HostHeader { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }"

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii
        self.snapshot: Snapshot | None = None
        self.interval = 1.0
        self.paused = False
        self.compact = False
        self.problem: str | None = None

    def show(self, snapshot: Snapshot | None, *, interval: float, paused: bool, compact: bool,
             problem: str | None = None) -> None:
        state = (snapshot, interval, paused, compact, problem)
        if state != (self.snapshot, self.interval, self.paused, self.compact, self.problem):
            # Only a change in the number of lines needs a new layout; new readings just repaint.
            resized = ((compact, problem is None, snapshot is None)
                       != (self.compact, self.problem is None, self.snapshot is None))
            self.snapshot, self.interval, self.paused, self.compact, self.problem = state
            self.refresh(layout=resized)

    def render(self) -> Content:
        snap = self.snapshot
        width = self.size.width or 80
        if snap is None:
            return Content.styled("gputui · waiting for the first sample…", "$text-muted")
        host, driver = snap.host, snap.driver
        every = f"{self.interval:g}s"
        state = Content.styled(" PAUSED ", "reverse $warning") if self.paused else Content.styled(
            f"every {every}", "$text-muted")
        demo = Content.styled(f"demo:{snap.source[4:]}", "$accent") if snap.source.startswith("sim:") else ""
        cpu_f = None if host.cpu_percent is None else host.cpu_percent / 100
        mem_f = fmt.fraction(host.memory_used, host.memory_total)
        swap_f = fmt.fraction(host.swap_used, host.swap_total)
        if self.compact:
            first = join([Content.styled(host.hostname or "?", "bold"), fmt.clock(snap.taken_at),
                          label("CPU"), fmt.percent(host.cpu_percent), label("MEM"),
                          fmt.percent(None if mem_f is None else mem_f * 100), state])
            return self._with_problem(first)
        first = join([
            Content.styled(host.hostname or "?", "bold"),
            join([label("driver"), driver.driver_version or fmt.NA]),
            join([label("CUDA"), driver.cuda_driver_version or fmt.NA]),
            Content.styled(fmt.clock(snap.taken_at), "bold"), state, demo,
        ], "  ")
        bar_width = max(4, min(20, (width - 70) // 3))
        second = join([
            join([label("CPU"), meter(cpu_f, bar_width, ascii=self.ascii),
                  f"{fmt.percent(host.cpu_percent):>4}"]),
            join([label("MEM"), meter(mem_f, bar_width, ascii=self.ascii),
                  f"{fmt.size(host.memory_used, short=True)}/{fmt.size(host.memory_total, short=True)}"]),
            join([label("SWP"), meter(swap_f, bar_width, ascii=self.ascii),
                  f"{fmt.size(host.swap_used, short=True)}/{fmt.size(host.swap_total, short=True)}"]),
            join([label("load"), " ".join(f"{v:.2f}" for v in host.load_average)])
            if host.load_average else "",
        ], "  ")
        return self._with_problem(Content("\n").join([first, second]))

    def _with_problem(self, content: Content) -> Content:
        if not self.problem:
            return content
        return Content("\n").join([content, Content.styled(self.problem, "$error")])
