"""A clock for the code's injectable ``clock=`` parameters. A test that needs seconds to pass says so
with ``advance`` rather than sleeping, so its outcome does not hang on how busy the machine is."""

from __future__ import annotations

import time


class MovableClock:
    """Real time plus what the test moved it forward by; ``running=False``: time stands still
    between the test's moves (a server's deadlines and rates then follow the test alone)."""

    def __init__(self, running: bool = True) -> None:
        self.running = running
        self.moved = 0.0

    def __call__(self) -> float:
        return (time.perf_counter() if self.running else 0.0) + self.moved

    def advance(self, seconds: float) -> None:
        self.moved += seconds
