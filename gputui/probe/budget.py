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
# Steps after a reading whose time still holds its cost (see Aftermath): after a measured step (on 1.6 ms
# CPU steps: +140 us, then +30, +40, +25 us, fading by the fifth) and after a light reading (+20 us).
AFTER_MEASURED = 4
AFTER_LIGHT = 1
# An aftermath is counted only where it stands this many standard errors of its median above zero.
SIGNIFICANCE = 2.0


def median_error(ordered: list[float], middle: float) -> float:
    """The standard error of the median of ``ordered`` (sorted samples), from their median absolute
    deviation: robust to the few steps another process stalled outright."""
    deviations = sorted(abs(x - middle) for x in ordered)
    sigma = 1.4826 * deviations[len(deviations) // 2]  # (the MAD of a normal scatter, as its sigma)
    return 1.2533 * sigma / len(ordered) ** 0.5


class Calibrated:
    """What one kind of step end costs the hook: timed at the first CALIBRATION_STEPS of them (a clock read
    more each), then their median counted for every one. The median: a step end where the machine took
    the CPU away mid-hook (another process's turn) is not the hook's cost, and timed each time on a
    loaded machine the account would hold the other processes' turns."""

    __slots__ = ("per_step", "steps", "_samples", "_differences")

    def __init__(self, differences: bool = False):
        """``differences``: the samples are differences between two noisy step times (Aftermath), not
        times the hook took itself: only what stands clear of their scatter is counted."""
        self.per_step: float | None = None  # seconds one such step end costs, once calibrated
        self.steps = 0  # such step ends since the probe started (counted by the Tracker)
        self._samples: list[float] = []
        self._differences = differences

    def sample(self, seconds: float) -> None:
        """One such step end took ``seconds`` of the hook's own time (what was charged inside left out)."""
        samples = self._samples
        samples.append(seconds)
        if len(samples) >= CALIBRATION_STEPS:
            ordered = sorted(samples)
            middle = ordered[len(ordered) // 2]
            if self._differences:
                middle -= SIGNIFICANCE * median_error(ordered, middle)
            self.per_step = middle

    @property
    def seconds(self) -> float:
        """Seconds these step ends have cost so far: as calibrated, or as timed while calibrating."""
        if self.per_step is None:
            return sum(self._samples)
        return self.per_step * self.steps


class HookCost:
    """The step hook's own cost, beside the readings budget: at the step ends that take the lean path
    (``lean``), the probe's step end at those of them where the board wants it or its now-and-then work
    is due (``due``, one in 32: beside ``lean``, where the median would drop it), at the other unmeasured
    ones (``unmeasured``: what their readings were charged left out), each calibrated; and the probe's
    step-end work at measured steps (or ones that armed or removed the hooks), timed (``add``). Kept apart
    from the readings budget: charged there, this cost of every step would use up the budget and starve
    the measured steps.
    """

    __slots__ = ("lean", "due", "unmeasured", "_timed")

    def __init__(self):
        self.lean = Calibrated()
        self.due = Calibrated()
        self.unmeasured = Calibrated()
        self._timed = 0.0  # seconds of step-end work timed at measured steps

    def add(self, seconds: float) -> None:
        """Step-end work at a measured step (or one that armed or removed the hooks) took ``seconds``."""
        self._timed += seconds

    @property
    def seconds(self) -> float:
        """Seconds the step hook has cost so far."""
        return self.lean.seconds + self.due.seconds + self.unmeasured.seconds + self._timed

    @property
    def lean_end(self) -> float | None:
        """Seconds a lean step end costs on average, once calibrated: its own, and the probe's step end
        at the share of them that run it (``due``: one in 32, or every one while a monitor keeps asking),
        as a typical step holds them."""
        lean = self.lean.per_step
        if lean is None or not self.due.steps:
            return lean
        return lean + self.due.seconds / max(self.lean.steps, self.due.steps)

    @property
    def beyond_lean(self) -> float:
        """Seconds an unmeasured step end that is not lean (a light reading's: the budget, the evidence
        and the probe's step end looked at) costs beyond a lean one, once it is calibrated. Until the
        lean step ends are (where light readings come at every step, none is lean), all of it: the
        readings then leave room for lean step ends, which calibrate."""
        unmeasured = self.unmeasured.per_step
        return 0.0 if unmeasured is None else max(0.0, unmeasured - (self.lean_end or 0.0))


class Aftermath:
    """What one kind of reading costs the steps after it beyond its own timing: the job's data pushed out
    of the CPU's caches, the C allocator's lists walked or rearranged. No timer of the probe's sees it,
    an outside A/B does. Sampled as the excess of the ``steps`` steps after such a reading over the
    step just before it (less what was charged or is in the account in them), at the first
    CALIBRATION_STEPS of them, then their median (``cost.per_step``) counted for each: a step the
    machine stalled (another process's turn, a checkpoint) is no reading's cost."""

    __slots__ = ("steps", "cost")

    def __init__(self, steps: int):
        self.steps = steps
        # (its ``steps``: the readings counted at the calibrated cost). Each sample is the difference of
        # two step times: on a busy machine their scatter (other processes' turns: tens of milliseconds)
        # dwarfs what a reading costs the next steps (tens of microseconds), and a median of 31 such
        # differences lands anywhere within it. Counted whole, that noise was charged as the readings'
        # cost (7 ms a light reading on a loaded machine, seen): the readings stopped for hundreds of
        # steps. Only the part that stands clear of the scatter is the readings' (Calibrated(differences)).
        self.cost = Calibrated(differences=True)


class ReadingsBudget:
    """Seconds the probe spent on the training thread against the share of step time it may take.

    ``share`` may be changed at any time (tests do). ``hook_seconds`` is what the readings timed
    themselves; ``charged`` adds the measured steps' untimed cost, estimated from their excess over a
    typical unmeasured step, and what readings cost the steps after them (``after_measured``,
    ``after_light``: Aftermath).
    """

    # The step-end path (next_step) runs at every step, after the step's own work has pushed the probe
    # out of the CPU's caches: one function body, and slots (the fields in the object itself), so that
    # it touches as few cache lines as it can.
    __slots__ = ("_share", "clock", "hook_seconds", "elapsed", "light_ok", "measure_from", "light_from", "_since",
                 "_excess", "_light_spent", "_typical", "_at_step_start", "_in_a_row", "_answered", "_light_typical",
                 "_held", "_after", "_window", "_base", "_in_account", "_last_clean", "after_measured",
                 "after_light", "_diagnosed")

    def __init__(self, share: float = DEFAULT_BUDGET, clock=time.perf_counter):
        self.clock = clock
        self.hook_seconds = 0.0  # time spent in readings on the training thread
        self.elapsed = 0.0  # total step time seen
        self._since = clock()  # when the running step started (or the hooks were installed)
        self._excess = 0.0  # measured steps' untimed cost, estimated (see next_step)
        self._light_spent = 0.0  # seconds the readings of unmeasured steps have cost
        self._light_typical: float | None = None  # smoothed seconds of one such reading
        self._answered = 0.0  # seconds the readings monitors asked for have cost
        self._diagnosed = 0.0  # seconds charged for diagnostics (charge_diagnostic): not readings
        self._typical: float | None = None  # smoothed duration of unmeasured steps
        self._at_step_start = 0.0  # hook_seconds when the step end that started the running step began
        self.after_measured = Aftermath(AFTER_MEASURED)
        self.after_light = Aftermath(AFTER_LIGHT)
        # Steps from the running one on whose time holds the aftermath of a reading (_after's kind):
        # never a typical step's; their excess summed in _window while that kind is calibrated.
        self._held = 0
        self._after = self.after_light
        self._window = 0.0
        self._in_account = 0.0  # seconds of the running step the account holds beside its charges
        # The step that ended last, less what was charged in it, where it held no reading's cost (else
        # None): what the steps after a reading are compared with (a reading's aftermath is sampled only
        # after such a step, so that where readings come at nearly every step, typical steps go on).
        self._last_clean: float | None = None
        self._base = 0.0  # the _last_clean that the running aftermath is compared with
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
        readings = self.hook_seconds - self._diagnosed + self._excess
        self.measure_from = self._since + readings / (2 * half) - self.elapsed
        self.light_from = self._since + self._light_spent / half - self.elapsed

    @property
    def charged(self) -> float:
        """Seconds charged to the readings budget: timed readings plus their estimated untimed cost."""
        return self.hook_seconds + self._excess

    def charge(self, seconds: float) -> None:
        self.hook_seconds += seconds
        self._judge_due()

    def charge_diagnostic(self, seconds: float) -> None:
        """A diagnostic took ``seconds`` on the training thread: a leak check, or the search for the line
        that keeps a leak. Charged (the account holds it, and it is timed like a reading), but not against
        the readings' share: diagnostics have bounds of their own (runtime's LEAK_CHECK_SHARE and
        AUTO_COOLDOWN), and one keeper search (tens of milliseconds) charged there stopped the measured
        steps a leak's category rests on for thousands of steps."""
        self.hook_seconds += seconds
        self._diagnosed += seconds

    def restart(self, now: float) -> None:
        """The hooks were (re)installed at ``now``: time without them is no step of ours."""
        self._since = now
        self._judge_due()

    def seen_until(self, now: float) -> float:
        """Step time seen up to ``now``, where the steps since the latest next_step were skipped."""
        return self.elapsed + now - self._since

    def lean_step(self, duration: float, charged: float) -> None:
        """An unmeasured step of ``duration`` ended before measure_from (the Tracker's lean path), when
        ``charged`` (hook_seconds) had been charged: its part of the smoothed step duration, now, while
        the figure is at hand (read back from the board later, the entries would be out of the CPU's
        caches: 0.5 us each), or where it holds a reading's cost, that cost estimated."""
        if self._held:
            self._held_step(duration, charged)
            self._judge_due()
            self._last_clean = None
        else:
            self._last_clean = clean = duration - (charged - self._at_step_start)
            self._typical = _smoothed(self._typical, clean)
        self._at_step_start = charged
        self._in_account = 0.0

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
        readings = self.hook_seconds - self._diagnosed + self._excess
        return readings <= self._share * (self.elapsed + now - self._since)

    def may_answer(self) -> bool:
        """Whether a reading a monitor asked for may be taken now: inside its own ANSWER_SHARE of the
        budget, or inside the whole budget. Its own share keeps the figures a monitor shows fresh
        where measured steps were charged ahead of their time (a long step that was measured)."""
        now = self.clock()
        seen = self.elapsed + now - self._since
        return (self._answered < ANSWER_SHARE * self._share * seen
                or self.hook_seconds - self._diagnosed + self._excess <= self._share * seen)

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
        self._held, self._in_account, self._last_clean = 0, 0.0, None
        self._judge_due()
        return self._measure_next(first)

    def _measure_next(self, first: bool) -> bool:
        # Readings cost time on the training thread: take them only while the probe's share of
        # step time stays inside its budget (every step when steps are long or readings cheap).
        measuring = self.hook_seconds - self._diagnosed + self._excess <= self._share * self.elapsed or first
        if measuring and self._in_a_row >= BASELINE_EVERY and self._share < 1.0:
            measuring = False  # now and then a step without readings, to know what one costs
        return measuring

    def next_step(self, duration: float | None, measured: bool, now: float, light: float = 0.0,
                  carried: float = 0.0, light_path: float = 0.0, charged: float | None = None) -> bool:
        """A step ended (``measured`` or not, its readings charged; ``light``: seconds its light
        reading took) and the next starts at ``now``: whether to measure it. ``carried``: seconds
        that count as the new step's readings. ``light_path``: what the step end a light reading asks
        for costs beyond a lean one (HookCost.beyond_lean; in the account already, not charged here),
        counted against the light readings' half of the budget with the reading itself. ``charged``:
        hook_seconds when this step end began (before what it charged itself), by default now."""
        charged = self.hook_seconds if charged is None else charged
        clean = not (measured or self._held) and duration is not None
        last_clean, self._last_clean = self._last_clean, None
        if duration is not None:
            if clean:  # (less what was charged in it: a monitor's request taken up)
                self._last_clean = duration - (charged - self._at_step_start)
                self._typical = _smoothed(self._typical, self._last_clean)
            elif measured:  # (``carried``: its saved tensors' hook calls, charged from here on)
                self._excess = max(0.0, self._excess + self._extra(duration, charged + carried))
            else:
                self._held_step(duration, charged)
            self.elapsed += duration
        left_out = 0.0  # of the light reading: the machine's, not the reading's (see below)
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
                left_out = max(0.0, light - 4 * typical)
                light -= left_out
            self._light_spent += light + light_path
            self.hook_seconds += light
            # (Its aftermath compared with the step that ended here, where that held no reading's cost;
            # counted at every light reading once calibrated.)
            self._begin_after(self.after_light, self._last_clean)
        if measured:
            self._in_a_row += 1
            self._begin_after(self.after_measured, last_clean)  # (compared with the step before it)
        else:
            self._in_a_row = 0
        self.hook_seconds += carried
        self._since = now
        self._at_step_start = charged + carried
        self._in_account = left_out  # (in the next step's time, no aftermath of the reading)
        self._judge_light()
        measuring = self.hook_seconds - self._diagnosed + self._excess <= self._share * self.elapsed
        if measuring and self._in_a_row >= BASELINE_EVERY and self._share < 1.0:
            measuring = False  # (as in _measure_next, inline)
        return measuring

    def in_account(self, seconds: float) -> None:
        """The running step holds ``seconds`` of the probe's own that its account holds beside what was
        charged (the step hook's, HookCost): left out of what is estimated of the step."""
        self._in_account += seconds

    def _extra(self, duration: float, charged: float) -> float:
        # What the probe cost in a step that held readings (measured) or their aftermath, beyond what
        # was timed and charged in it or is in the account (module hooks sending the model through
        # nn.Module's slow path, calls from C++ into Python, hooks armed and removed, the job's data
        # pushed out of the CPU's caches), estimated from its excess over a typical step. Summed with
        # its sign, so that noise cancels (clamping each step at zero would charge noise); at most one
        # typical step: more is the machine or the job stalling (a checkpoint, another process), not
        # the hooks, and charged whole it would stop the readings for minutes.
        typical = self._typical
        if typical is None:
            return 0.0
        extra = duration - typical - (charged - self._at_step_start) - self._in_account
        return max(-0.5 * duration, min(extra, typical))

    def _begin_after(self, after: Aftermath, base: float | None) -> None:
        """A reading of ``after``'s kind ended: where a typical step of ``base`` seconds came just before
        it, the next steps hold its aftermath (no typical steps; sampled against ``base`` while that
        kind is calibrated). Once it is, its cost is charged now, where the next reading is judged."""
        if base is not None:
            self._after, self._held, self._window, self._base = after, after.steps, 0.0, base
        cost = after.cost.per_step
        if cost is not None:
            after.cost.steps += 1
            self._charge_after(after, max(0.0, cost))

    def _held_step(self, duration: float, charged: float) -> None:
        """A step that holds a reading's aftermath ended: sampled while its kind is calibrated."""
        self._held -= 1
        after = self._after
        if after.cost.per_step is not None:
            return
        base = self._base
        # (Against the one step before the reading, not the smoothed typical: the job's own step time
        # may drift, and the typical follows it slowly. The median over the calibration takes the noise.)
        self._window += duration - base - (charged - self._at_step_start) - self._in_account
        if not self._held:
            cost = after.cost
            cost.sample(self._window)
            if cost.per_step is not None:
                # Calibrated: the readings sampled are counted at their median too, now (each as it was
                # sampled, a stall would be charged; their part below zero, noise, would have moved the
                # next measured step earlier than the step end that took the lean path judged it).
                self._charge_after(after, max(0.0, cost.per_step) * CALIBRATION_STEPS)

    def _charge_after(self, after: Aftermath, seconds: float) -> None:
        # Estimated, as the measured steps' excess; a light reading's counted against its half too.
        self._excess = max(0.0, self._excess + seconds)
        if after is self.after_light:
            self._light_spent = max(0.0, self._light_spent + seconds)


def _smoothed(typical: float | None, duration: float) -> float:
    """The smoothed duration of unmeasured steps after one of ``duration``: a long step (evaluation, a
    stall) moves it only a little."""
    return duration if typical is None else typical + 0.05 * (min(duration, 2 * typical) - typical)
