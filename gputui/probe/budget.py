"""The readings budget: how much of the training thread's time the probe's readings may take.

Every reading the probe takes on the training thread is charged here; a step is measured (read at
its phase boundaries) only while what was charged stays inside the budget's share of the step time
seen so far. Plain numbers only: this module reads no torch object.
"""

from __future__ import annotations

import time

DEFAULT_BUDGET = 0.004  # share of step time the probe's readings may take
BASELINE_EVERY = 8  # measured steps in a row before one without readings (budgets below 1)


class ReadingsBudget:
    """Seconds the probe spent on the training thread against the share of step time it may take.

    ``share`` may be changed at any time (tests do). ``hook_seconds`` is what the readings timed
    themselves; ``charged`` adds the measured steps' untimed cost, estimated from their excess over a
    typical unmeasured step.
    """

    def __init__(self, share: float = DEFAULT_BUDGET, clock=time.perf_counter):
        self.share = share
        self.clock = clock
        self.hook_seconds = 0.0  # time spent in readings on the training thread
        self.elapsed = 0.0  # total step time seen
        self._since = clock()  # when the running step started (or the hooks were installed)
        self._excess = 0.0  # measured steps' untimed cost, estimated (see end_step)
        self._light_spent = 0.0  # seconds the readings of unmeasured steps have cost
        self._typical: float | None = None  # smoothed duration of unmeasured steps
        self._at_step_start = 0.0  # hook_seconds when the running step started
        self._in_a_row = 0  # measured steps in a row

    @property
    def charged(self) -> float:
        """Seconds charged to the readings budget: timed readings plus their estimated untimed cost."""
        return self.hook_seconds + self._excess

    def charge(self, seconds: float) -> None:
        self.hook_seconds += seconds

    def restart(self, now: float) -> None:
        """The hooks were (re)installed at ``now``: time without them is no step of ours."""
        self._since = now

    def may_spend(self) -> bool:
        """Whether a reading now keeps the probe inside its share of the time seen so far.

        The running step counts, so a job stuck in a long step, or one that never steps, earns its
        readings as time passes.
        """
        now = self.clock()
        return self.hook_seconds + self._excess <= self.share * (self.elapsed + now - self._since)

    def start_step(self, now: float, first: bool) -> bool:
        """A step starts at ``now``: whether to measure it (the ``first`` step always is)."""
        self._since = now
        self._at_step_start = self.hook_seconds
        # Readings cost time on the training thread: take them only while the probe's share of
        # step time stays inside its budget (every step when steps are long or readings cheap).
        measuring = self.hook_seconds + self._excess <= self.share * self.elapsed or first
        if measuring and self._in_a_row >= BASELINE_EVERY and self.share < 1.0:
            measuring = False  # now and then a step without readings, to know what one costs
        return measuring

    def end_step(self, duration: float | None, measured: bool) -> None:
        """A step ended, its readings taken and charged."""
        self._in_a_row = self._in_a_row + 1 if measured else 0
        if duration is None:
            return
        typical = self._typical
        if not measured:
            # Smoothed duration of unmeasured steps; a long step (evaluation, a stall) moves it
            # only a little.
            self._typical = duration if typical is None else (
                typical + 0.05 * (min(duration, 2 * typical) - typical))
        elif typical is not None:
            # What the readings cost beyond what they timed themselves: module hooks sending the
            # model through nn.Module's slow path, calls from C++ into Python, hooks armed and
            # removed. Estimated from the measured steps' excess over a typical step, summed with
            # its sign so that noise cancels (clamping each step at zero would charge noise), and
            # never below zero, so a slow spell of the machine before cannot hide a real cost later.
            extra = duration - typical - (self.hook_seconds - self._at_step_start)
            self._excess = max(0.0, self._excess + max(-0.5 * duration, min(extra, 0.5 * duration)))
        self.elapsed += duration

    def light_allowed(self) -> bool:
        """Whether an unmeasured step's light reading fits: those take at most half the budget, so
        measured steps keep the rest."""
        return self._light_spent <= 0.5 * self.share * self.elapsed

    def charge_light(self, seconds: float) -> None:
        self._light_spent += seconds
        self.hook_seconds += seconds
