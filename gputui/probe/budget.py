"""The probe's time on the training thread: the readings budget, and the steps' own cost beside it.

Every reading the probe takes on the training thread is charged to the ReadingsBudget; a step is
measured (read at its phase boundaries) only while what was charged stays inside the budget's share
of the step time seen so far. What the step hook costs at every other step is the HookCost's: part of
the probe's account of itself, never of the budget that decides which steps are measured. Plain
numbers only: this module reads no torch object.
"""

from __future__ import annotations

import time

DEFAULT_BUDGET = 0.004  # share of step time the probe's readings may take
BASELINE_EVERY = 8  # measured steps in a row before one without readings (budgets below 1)
# Readings a monitor asked for (at most about one a second: the desk asks only for figures older than
# that) may take this share of the budget by themselves, whatever the measured steps were charged.
ANSWER_SHARE = 0.25
CALIBRATION_STEPS = 31  # steps without readings timed at the start, their median the cost of each


class Calibrated:
    """What one kind of step end costs the hook: timed at the first CALIBRATION_STEPS of them (a clock read
    more each), then their median counted for every one. The median: a step end where the machine took
    the CPU away mid-hook (another process's turn) is not the hook's cost, and timed each time on a
    loaded machine the account would hold the other processes' turns."""

    __slots__ = ("per_step", "steps", "_samples")

    def __init__(self):
        self.per_step: float | None = None  # seconds one such step end costs, once calibrated
        self.steps = 0  # such step ends since the probe started (counted by the Tracker)
        self._samples: list[float] = []

    def sample(self, seconds: float) -> None:
        """One such step end took ``seconds`` of the hook's own time (what was charged inside left out)."""
        samples = self._samples
        samples.append(seconds)
        if len(samples) >= CALIBRATION_STEPS:
            self.per_step = sorted(samples)[len(samples) // 2]

    @property
    def seconds(self) -> float:
        """Seconds these step ends have cost so far: as calibrated, or as timed while calibrating."""
        if self.per_step is None:
            return sum(self._samples)
        return self.per_step * self.steps


class HookCost:
    """The step hook's own cost, beside the readings budget: at the step ends that take the lean path
    (``lean``), at the other unmeasured ones (``unmeasured``: what their readings were charged left out),
    each calibrated; and the probe's step-end work at measured steps (or ones that armed or removed the
    hooks), timed (``add``). Kept apart from the readings budget: charged there, this cost of every
    step would use up the budget and starve the measured steps.
    """

    __slots__ = ("lean", "unmeasured", "_timed")

    def __init__(self):
        self.lean = Calibrated()
        self.unmeasured = Calibrated()
        self._timed = 0.0  # seconds of step-end work timed at measured steps

    def add(self, seconds: float) -> None:
        """Step-end work at a measured step (or one that armed or removed the hooks) took ``seconds``."""
        self._timed += seconds

    @property
    def seconds(self) -> float:
        """Seconds the step hook has cost so far."""
        return self.lean.seconds + self.unmeasured.seconds + self._timed

    @property
    def beyond_lean(self) -> float:
        """Seconds an unmeasured step end that is not lean (a light reading's: the budget, the evidence
        and the probe's step end looked at) costs beyond a lean one, once it is calibrated. Until the
        lean step ends are (where light readings come at every step, none is lean), all of it: the
        readings then leave room for lean step ends, which calibrate."""
        unmeasured = self.unmeasured.per_step
        return 0.0 if unmeasured is None else max(0.0, unmeasured - (self.lean.per_step or 0.0))


class ReadingsBudget:
    """Seconds the probe spent on the training thread against the share of step time it may take.

    ``share`` may be changed at any time (tests do). ``hook_seconds`` is what the readings timed
    themselves; ``charged`` adds the measured steps' untimed cost, estimated from their excess over a
    typical unmeasured step.
    """

    # The step-end path (next_step) runs at every step, after the step's own work has pushed the probe
    # out of the CPU's caches: one function body, and slots (the fields in the object itself), so that
    # it touches as few cache lines as it can.
    __slots__ = ("_share", "clock", "hook_seconds", "elapsed", "light_ok", "measure_from", "light_from", "_since",
                 "_excess", "_light_spent", "_typical", "_at_step_start", "_in_a_row", "_answered", "_light_typical")

    def __init__(self, share: float = DEFAULT_BUDGET, clock=time.perf_counter):
        self.clock = clock
        self.hook_seconds = 0.0  # time spent in readings on the training thread
        self.elapsed = 0.0  # total step time seen
        self._since = clock()  # when the running step started (or the hooks were installed)
        self._excess = 0.0  # measured steps' untimed cost, estimated (see next_step)
        self._light_spent = 0.0  # seconds the readings of unmeasured steps have cost
        self._light_typical: float | None = None  # smoothed seconds of one such reading
        self._answered = 0.0  # seconds the readings monitors asked for have cost
        self._typical: float | None = None  # smoothed duration of unmeasured steps
        self._at_step_start = 0.0  # hook_seconds when the running step started
        self._in_a_row = 0  # measured steps in a row
        # The clock time from which a step end finds the next step may be measured: where step time
        # goes on without readings, the time at which the share of it earns what was charged. Worked
        # out when what it depends on changes, so that a step end that reads nothing compares one
        # number (see skipped: the steps that did so are added up later).
        self.measure_from = float("-inf")
        self.light_from = float("-inf")  # the same for an unmeasured step's light reading (light_ok)
        self.share = share

    @property
    def share(self) -> float:
        """The share of step time the readings may take (may be changed at any time)."""
        return self._share

    @share.setter
    def share(self, share: float) -> None:
        self._share = share
        self._judge_light()

    def _judge_light(self) -> None:
        # An unmeasured step's light reading takes at most half the budget, so measured steps keep
        # the rest. (Judged when what it depends on changes, so the step end only reads a flag.)
        self.light_ok = self._light_spent <= 0.5 * self._share * self.elapsed
        self._judge_due()

    def _judge_due(self) -> None:
        # The conditions of _measure_next and _judge_light, solved for the time: where step time goes on
        # without readings, elapsed + now - since is the step time seen, whether or not the steps since
        # were given to the budget yet (skipped).
        half = 0.5 * self._share
        if half <= 0:
            self.measure_from = self.light_from = float("inf")
            return
        self.measure_from = self._since + (self.hook_seconds + self._excess) / (2 * half) - self.elapsed
        self.light_from = self._since + self._light_spent / half - self.elapsed

    @property
    def charged(self) -> float:
        """Seconds charged to the readings budget: timed readings plus their estimated untimed cost."""
        return self.hook_seconds + self._excess

    def charge(self, seconds: float) -> None:
        self.hook_seconds += seconds
        self._judge_due()

    def restart(self, now: float) -> None:
        """The hooks were (re)installed at ``now``: time without them is no step of ours."""
        self._since = now
        self._judge_due()

    def seen_until(self, now: float) -> float:
        """Step time seen up to ``now``, where the steps since the latest next_step were skipped."""
        return self.elapsed + now - self._since

    def lean_step(self, duration: float) -> None:
        """An unmeasured step of ``duration`` ended before measure_from (the Tracker's lean path): its
        part of the smoothed step duration, now, while the figure is at hand (read back from the board
        later, the entries would be out of the CPU's caches: 0.5 us each)."""
        self._typical = _smoothed(self._typical, duration)

    def skipped(self, now: float) -> None:
        """The lean steps since the latest next_step ended, the last at ``now``: their time counted as
        next_step would have. (The next_step that follows works out measure_from and light_from again.)"""
        self.elapsed += now - self._since
        self._since = now
        self.light_ok = self._light_spent <= 0.5 * self._share * self.elapsed

    def may_spend(self) -> bool:
        """Whether a reading now keeps the probe inside its share of the time seen so far.

        The running step counts, so a job stuck in a long step, or one that never steps, earns its
        readings as time passes.
        """
        now = self.clock()
        return self.hook_seconds + self._excess <= self._share * (self.elapsed + now - self._since)

    def may_answer(self) -> bool:
        """Whether a reading a monitor asked for may be taken now: inside its own ANSWER_SHARE of the
        budget, or inside the whole budget. Its own share keeps the figures a monitor shows fresh
        where measured steps were charged ahead of their time (a long step that was measured)."""
        now = self.clock()
        seen = self.elapsed + now - self._since
        return (self._answered < ANSWER_SHARE * self._share * seen
                or self.hook_seconds + self._excess <= self._share * seen)

    def charge_answer(self, seconds: float) -> None:
        """A reading a monitor asked for took ``seconds``: charged to the budget and to its own share."""
        self._answered += seconds
        self.hook_seconds += seconds
        self._judge_due()

    def start_step(self, now: float, first: bool) -> bool:
        """A step starts at ``now`` where none was running: whether to measure it (the ``first`` step
        always is). At a step end, next_step() starts the next one."""
        self._since = now
        self._at_step_start = self.hook_seconds
        self._judge_due()
        return self._measure_next(first)

    def _measure_next(self, first: bool) -> bool:
        # Readings cost time on the training thread: take them only while the probe's share of
        # step time stays inside its budget (every step when steps are long or readings cheap).
        measuring = self.hook_seconds + self._excess <= self._share * self.elapsed or first
        if measuring and self._in_a_row >= BASELINE_EVERY and self._share < 1.0:
            measuring = False  # now and then a step without readings, to know what one costs
        return measuring

    def next_step(self, duration: float | None, measured: bool, now: float, light: float = 0.0,
                  carried: float = 0.0, light_path: float = 0.0) -> bool:
        """A step ended (``measured`` or not, its readings charged; ``light``: seconds its light
        reading took) and the next starts at ``now``: whether to measure it. ``carried``: seconds
        that count as the new step's readings. ``light_path``: what the step end a light reading asks
        for costs beyond a lean one (HookCost.beyond_lean; in the account already, not charged here),
        counted against the light readings' half of the budget with the reading itself."""
        if light:
            typical = self._light_typical
            if typical is None or light < typical:
                self._light_typical = light  # (down at once: a slow first reading is no typical one)
            else:
                # A reading many times its usual cost is the machine taking the CPU away mid-reading
                # (another process, the job's own data loaders), not the reading: charged whole, one
                # 20 ms pause would stop the light readings for thousands of steps. Charged at most
                # four typical readings; the typical follows a real rise, doubling at most at a time.
                self._light_typical = typical + 0.05 * (min(light, 2 * typical) - typical)
                light = min(light, 4 * typical)
            self._light_spent += light + light_path
            self.hook_seconds += light
        if measured:
            self._in_a_row += 1
            typical = self._typical
            if duration is not None and typical is not None:
                # What the readings cost beyond what they timed themselves: module hooks sending
                # the model through nn.Module's slow path, calls from C++ into Python, hooks armed
                # and removed. Estimated from the measured steps' excess over a typical step, summed
                # with its sign so that noise cancels (clamping each step at zero would charge
                # noise), and never below zero, so a slow spell of the machine before cannot hide a
                # real cost later. A measured step is charged at most one typical step beyond its
                # readings: more is the machine or the job stalling (a checkpoint, another process),
                # not the hooks, and charged whole it would stop the readings for minutes.
                extra = duration - typical - (self.hook_seconds - self._at_step_start)
                self._excess = max(0.0, self._excess + max(-0.5 * duration, min(extra, typical)))
        else:
            self._in_a_row = 0
            if duration is not None:
                self._typical = _smoothed(self._typical, duration)
        if duration is not None:
            self.elapsed += duration
        self.hook_seconds += carried
        self._since = now
        self._at_step_start = self.hook_seconds
        self._judge_light()
        measuring = self.hook_seconds + self._excess <= self._share * self.elapsed
        if measuring and self._in_a_row >= BASELINE_EVERY and self._share < 1.0:
            measuring = False  # (as in _measure_next, inline)
        return measuring


def _smoothed(typical: float | None, duration: float) -> float:
    """The smoothed duration of unmeasured steps after one of ``duration``: a long step (evaluation, a
    stall) moves it only a little."""
    return duration if typical is None else typical + 0.05 * (min(duration, 2 * typical) - typical)
