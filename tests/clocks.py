"""A clock for the code's injectable ``clock=`` parameters. A test that needs seconds to pass says so
with ``advance`` rather than sleeping, so its outcome does not hang on how busy the machine is."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


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


class JobClock:
    """The probe's clock in a training job whose costs the test sets, so that which steps the budget
    measures follows the test alone, not how busy the machine is: time stands still but for ``step``
    seconds of the job's own work at each optimizer step, ``reading`` seconds for each phase reading of
    a measured step, and ``light`` for each unmeasured step's light reading (``slow``: step counts at
    which that light reading takes ``slow_light`` instead, as when the machine takes the CPU away)."""

    def __init__(self, step: float = 0.005, reading: float = 50e-6, light: float = 5e-6,
                 slow: frozenset[int] = frozenset(), slow_light: float = 0.0) -> None:
        self.now = 0.0
        self.step, self.reading, self.light = step, reading, light
        self.slow, self.slow_light = slow, slow_light
        self.steps = 0

    def __call__(self) -> float:
        return self.now

    @contextlib.contextmanager
    def charging(self, monkeypatch) -> Iterator["JobClock"]:
        """Within the block, charge the readings' costs (the step machine's own reading functions) and each
        optimizer step's work (a global optimizer pre-hook)."""
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from gputui.probe import stepping

        read, light_reading = stepping.Stepping._read, stepping.Stepping._light_reading

        def timed_read(tracker, with_tally):
            self.now += self.reading
            return read(tracker, with_tally)

        def timed_light(tracker):
            self.now += self.slow_light if tracker.step_count in self.slow else self.light
            return light_reading(tracker)

        def step_work(optimizer, args, kwargs):
            self.steps += 1
            self.now += self.step

        monkeypatch.setattr(stepping.Stepping, "_read", timed_read)
        monkeypatch.setattr(stepping.Stepping, "_light_reading", timed_light)
        handle = register_optimizer_step_pre_hook(step_work)
        try:
            yield self
        finally:
            handle.remove()
