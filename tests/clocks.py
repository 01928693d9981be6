"""A clock for the code's injectable ``clock=`` parameters: real time, plus whatever the test moved it
forward by. A test that needs seconds to pass says so with ``advance`` rather than sleeping, so its
outcome does not hang on how busy the machine is."""

from __future__ import annotations

import time


class MovableClock:
    def __init__(self) -> None:
        self.moved = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.moved

    def advance(self, seconds: float) -> None:
        self.moved += seconds
