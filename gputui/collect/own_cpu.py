"""What the monitor itself costs: its own CPU time over the time between two samples."""

from __future__ import annotations

from typing import Callable


class OwnCpu:
    """This process's CPU share (all its threads) since the previous reading, percent of one core."""

    def __init__(self, cpu_clock: Callable[[], float], timer: Callable[[], float]) -> None:
        self.cpu_clock, self.timer = cpu_clock, timer
        self._last: tuple[float, float] | None = None  # (timer, cpu seconds) at the last reading

    def read(self) -> tuple[float, float | None]:
        """The timer now, and the share since the last reading (None at the first)."""
        ended, cpu = self.timer(), self.cpu_clock()
        last, self._last = self._last, (ended, cpu)
        if last is None or ended <= last[0]:
            return ended, None
        return ended, round(100 * (cpu - last[1]) / (ended - last[0]), 2)
