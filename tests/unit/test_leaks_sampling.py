"""Leak verdicts do not depend on how often a busy machine let the probe read (issue 45).

Each job's memory is a function of the step; the probe's evidence is that figure at the steps it could
read (every step on an idle machine; every few, at random gaps with a long tail, on a busy one), a
measured step now and then, and what its board keeps (the first measured steps, 128 more, the last 600
steps). A monitor polls at random steps and judges what the report holds then. Whatever the readings,
a leaking job is called within its bound and never uncalled after; a clean one is never called a leak;
a warm-up plateau is not called once it has been flat for the verdict's take-back.
"""

from __future__ import annotations

import random

import pytest

from gputui.analysis.leaks import CONFIRM_READINGS, FLAT_STEPS, leak_verdict
from gputui.model import FIRST_STEPS_KEPT, MemoryCategories, ProbeReport, StepRecord

KIB, MIB = 1 << 10, 1 << 20
RECENT, MEASURED_KEPT = 600, 128  # the board's windows (probe/board.py, probe/stepping.py)


def step_leak(s: int) -> float:
    """1 MiB kept every 20 steps over 160 MiB of heap (examples/leak_corpus.py's slow_leak)."""
    return 160 * MIB + (s // 20) * MIB


def smooth_leak(s: int) -> float:
    """A dict of tensors that grows by 392 KiB every step (the corpus's detached_cache)."""
    return 120 * MIB + s * 392 * KIB


def plateau(s: int) -> float:
    """A cache filled 256 KiB a step for 120 steps, then read (the corpus's warmup_plateau, longer)."""
    return 120 * MIB + min(s, 120) * 256 * KIB


def variable(s: int) -> float:
    """Memory follows a random sequence length up and down (the corpus's variable_length)."""
    return 130 * MIB + random.Random(s).randrange(-2 * MIB, 2 * MIB)


def zero3_rank(s: int) -> float:
    """A ZeRO-3 rank's heap: 15 KiB a step for its first 200 steps (communication buffers, caches), then
    flat (issue 45: called a leak at step 390 over the last 366 steps)."""
    return 200 * MIB + min(s, 200) * 15 * KIB


JOBS = {  # name: (memory, leaks, the step it must be called by, the step from which it is flat)
    "step_leak": (step_leak, True, 300, None),
    "smooth_leak": (smooth_leak, True, 100, None),
    "plateau": (plateau, False, None, 120),
    "variable": (variable, False, None, 0),
    "zero3_rank": (zero3_rank, False, None, 200),
}


def readings(schedule: str, steps: int, seed: int) -> set[int]:
    """The steps whose figure the probe read: ``idle`` every step; ``every N``; ``busy``: gaps of 1 to 60
    steps, most short, a long tail (another process's turns, the budget waiting)."""
    if schedule == "idle":
        return set(range(1, steps + 1))
    if schedule.startswith("every "):
        return set(range(1, steps + 1, int(schedule.split()[1])))
    rng, read, at = random.Random(seed), set(), 1
    while at <= steps:
        read.add(at)
        at += min(60, max(1, int(rng.paretovariate(1.2) * 3)))
    return read


def measured_steps(steps: int, seed: int) -> set[int]:
    """The first two steps, then one every 40 to 250 steps (the budget's own, and the evidence's)."""
    rng, measured, at = random.Random(seed + 1), {1, 2}, 2
    while at <= steps:
        at += rng.randrange(40, 250)
        measured.add(at)
    return measured


def report_at(memory, now: int, read: set[int], measured: set[int]) -> ProbeReport:
    """What the board holds at step ``now``, as the report carries it."""
    categories = MemoryCategories(parameters=4 * MIB, gradients=4 * MIB, optimizer_state=8 * MIB,
                                  activations=0, other=0, buffers=0)

    def record(s: int) -> StepRecord:
        is_measured = s in measured
        return StepRecord(step=s, ended_at=1000.0 + 0.01 * s, duration=0.01, device="cpu",
                          allocated=16 * MIB if is_measured else None,
                          host_allocated=int(memory(s)) if s in read or is_measured else None,
                          categories=categories if is_measured else None, activations_kept=0 if is_measured else None)

    recent = range(max(1, now - RECENT + 1), now + 1)
    older_measured = sorted(s for s in measured if s < recent[0])
    first = older_measured[:FIRST_STEPS_KEPT]
    kept = sorted(set(first) | set(older_measured[-MEASURED_KEPT:]))
    return ProbeReport(pid=1, taken_at=1000.0 + 0.01 * now, steps=tuple(record(s) for s in [*kept, *recent]))


SCHEDULES = ["idle", "every 5", "every 21", "busy"]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("job", sorted(JOBS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_verdict_holds_however_often_the_probe_could_read(job, schedule, seed):
    memory, leaks, called_by, flat_from = JOBS[job]
    steps = 900
    read, measured = readings(schedule, steps, seed), measured_steps(steps, seed)
    polls = sorted(random.Random(seed + 2).sample(range(10, steps + 1), 120))
    verdicts = {now: leak_verdict(report_at(memory, now, read, measured)) for now in polls}
    states = {now: v.state for now, v in verdicts.items()}
    called = [now for now, state in states.items() if state == "leak"]
    if leaks:
        # Within its bound, or once the probe has read the figure CONFIRM_READINGS times, where it reads
        # so seldom (every 21 steps) that the bound passes first.
        called_by = max(called_by, sorted(read | measured)[CONFIRM_READINGS])
        assert called and called[0] <= called_by, (called[:1], states)
        uncalled = {now: state for now, state in states.items() if now > called[0] and state != "leak"}
        assert uncalled == {}, uncalled  # no flip once called
    else:
        # The take-back: FLAT_STEPS flat steps (FLAT_PERIODS of a leak that grows in steps: none here does),
        # as the evidence has them: from the first reading of the flat figure to the latest (a poll between
        # two readings looks at the same evidence as the last).
        flat_read = min(s for s in read | measured if s >= flat_from)
        false = [now for now in called if verdicts[now].last_step >= flat_read + FLAT_STEPS]
        assert false == [], (false, states)


def test_the_window_is_steps_not_readings_and_does_not_jump_between_polls():
    # Issue 45 item 5: "over the last 1047 / 1122 / 1187 / 1461 / 1327 ... steps" on one job's polls.
    read, measured = readings("busy", 1500, 7), measured_steps(1500, 7)
    windows = [leak_verdict(report_at(smooth_leak, now, read, measured)).window_steps for now in range(700, 1500, 37)]
    assert max(windows) <= 200 and min(windows) >= 30, windows
