"""The top lines: host, driver and CUDA versions, the snapshot's time, refresh interval and state,
gputui's own cost (where the line has room; the help screen always says it), and the host's CPU,
memory and swap as bars, its load and uptime.
"""

from __future__ import annotations

from textual.events import Resize

from gputui import units
from gputui.model import Snapshot
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import Words, join, label, meter, plain, styled
from gputui.ui.widgets.line import StyledLines


class HostHeader(StyledLines):
    """Renders from the last Snapshot plus the monitor's own state (interval, paused)."""

    DEFAULT_CSS = "HostHeader { height: auto; }"

    def __init__(self, *, ascii: bool = False, as_root: bool = False, id: str | None = None) -> None:
        """``as_root``: gputui runs as root, said on the first line (its signals reach every user)."""
        super().__init__(id=id)
        self.ascii = ascii
        self.as_root = as_root
        self.snapshot: Snapshot | None = None
        self.interval = 1.0
        self.paused = False
        self.compact = False
        self.problem: str | None = None
        self.position: str | None = None
        self.width_used = 0

    def show(self, snapshot: Snapshot | None, *, interval: float, paused: bool, compact: bool,
             problem: str | None = None, position: str | None = None) -> None:
        """``position``: where a replay is in its recording, said instead of the sampling interval."""
        state = (snapshot, interval, paused, compact, problem, position)
        if state != (self.snapshot, self.interval, self.paused, self.compact, self.problem, self.position):
            self.snapshot, self.interval, self.paused, self.compact, self.problem, self.position = state
            self._draw()

    def on_resize(self, event: Resize) -> None:
        if self.size.width != self.width_used:  # the bars stretch with the width
            self._draw()

    def _draw(self) -> None:
        # show_lines repaints only what changed and lays out only when the line count changes.
        width = self.width_used = self.size.width or self.app.size.width
        self.show_lines(("", words) for words in self.words(width))

    def words(self, width: int) -> tuple[Words, ...]:
        """The header's lines for a widget this wide."""
        snap = self.snapshot
        if snap is None:
            # A failure before the first sample is all there is to see: say it under the wait.
            return self._with_problem((styled("gputui · waiting for the first sample…", "$text-muted"),))
        host, driver = snap.host, snap.driver
        every = f"{self.interval:g}s"
        state = styled(" PAUSED ", "reverse $warning") if self.paused else styled(
            f"every {every}", "$text-muted")
        if self.position is not None:
            state = join([state, styled(self.position, "$accent")]) if self.paused else styled(
                self.position, "$accent")
        demo = styled(f"demo:{snap.source[4:]}", "$accent") if snap.source.startswith("sim:") else ""
        # Next to the host name, where even a narrow pane keeps it: as root, signals reach everyone.
        root = styled("as root", "bold $warning") if self.as_root else ""
        cpu_f = None if host.cpu_percent is None else host.cpu_percent / 100
        mem_f = fmt.fraction(host.memory_used, host.memory_total)
        swap_f = fmt.fraction(host.swap_used, host.swap_total)
        if self.compact:
            name = join([styled(host.hostname or "?", "bold"), root])
            first = self._compact(width, name, units.clock_time(snap.taken_at),
                                  join([label("CPU"), units.percent(host.cpu_percent), label("MEM"),
                                        units.percent(None if mem_f is None else mem_f * 100), state]))
            return self._with_problem((first,))
        first = join([
            styled(host.hostname or "?", "bold"), root,
            join([label("driver"), driver.driver_version or units.NA]),
            join([label("CUDA"), driver.cuda_driver_version or units.NA]),
            styled(units.clock_time(snap.taken_at), "bold"), state, demo,
        ], "  ")
        cost = fmt.monitor_cost(snap.monitor)
        if cost and len(plain(first)) + 2 + len(cost) <= width:
            first = join([first, styled(cost, "$text-muted")], "  ")
        uptime = None if not host.boot_time else join([label("up"), units.elapsed(snap.taken_at - host.boot_time)])
        bar_width = max(4, min(20, (width - 70 - (0 if uptime is None else len(plain(uptime)) + 2)) // 3))
        second = join([
            join([label("CPU"), meter(cpu_f, bar_width, ascii=self.ascii),
                  f"{units.percent(host.cpu_percent):>4}"]),
            join([label("MEM"), meter(mem_f, bar_width, ascii=self.ascii),
                  units.size_pair_short(host.memory_used, host.memory_total)]),
            join([label("SWP"), meter(swap_f, bar_width, ascii=self.ascii),
                  units.size_pair_short(host.swap_used, host.swap_total)]),
            join([label("load"), " ".join(f"{v:.2f}" for v in host.load_average)])
            if host.load_average else "",
        ], "  ")
        if uptime is not None and len(plain(second)) + 2 + len(plain(uptime)) <= width:  # else the first to go
            second = join([second, uptime], "  ")
        return self._with_problem((first, second))

    @staticmethod
    def _compact(width: int, host: Words, time: str, rest: Words) -> Words:
        """The narrow pane's one line; a long host name drops the time rather than have the edge cut
        the state (PAUSED) off: the time is the one thing a glance does not need there."""
        line = join([host, time, rest])
        return line if len(plain(line)) <= width else join([host, rest])

    def _with_problem(self, lines: tuple[Words, ...]) -> tuple[Words, ...]:
        if not self.problem:
            return lines
        return (*lines, styled(self.problem, "$error"))
