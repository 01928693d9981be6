"""Leak verdicts for probed training jobs, judged per step at the same point of every step.

Allocated memory that grows step after step is a leak; reserved memory that grows over flat allocated
memory is the allocator's cache; growing free bytes stuck in split blocks with retries is
fragmentation. A CPU-only job has no allocator: there, what the process's resident memory holds
beyond the tracked tensors is the "other" category, judged with a coarser noise floor (the C library
keeps freed memory, and the interpreter grows in arena-sized jumps). Forecasts the step, and the time,
at which the job runs out of device memory.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence, TypedDict

from gputui.analysis.robust import median, releases, settled_count, spread, theil_sen, trend_z
from gputui.model import TENSOR_CATEGORIES, Device, ProbeReport, Snapshot, StepRecord
from gputui.model.record import Record
from gputui.model.verdicts import (
    LEAK_CACHE_GROWTH,
    LEAK_CLEAN,
    LEAK_COLLECTING,
    LEAK_FRAGMENTATION,
    LEAK_LEAK,
    LEAK_WARMING_UP,
    CategoryGrowth,
    LeakVerdict,
)
from gputui.units import size

KIB = 1 << 10

MIN_STEPS = 8  # steps needed before any verdict
CONFIRM_STEPS = 24  # growth must be seen over this many steps before it is called a leak
CONFIRM_READINGS = 12  # ... in at least this many readings (the probe may read every few steps only)
CLEAR_MARGIN = 4.0  # ... or in CLEAR_READINGS, where it grows this many times over what noise explains
CLEAR_READINGS = 6
# The window a verdict is judged on is a span of steps, not a count of readings: the last WINDOW_STEPS
# steps, or four of the leak's own periods where it grows in steps (PERIODS), extended back to the latest
# CONFIRM_READINGS readings where the probe read fewer within it (a busy machine, or very short steps).
# So the window is the same whether the probe could read every step or every twentieth.
WINDOW_STEPS = 64
PERIODS = 4
MAX_PERIOD = 150  # steps: a leak's period judged on at most this (four of them fill the probe's 600 steps)
SETTLE_STEPS = 16  # after growth, flat for this many steps before it is called clean
# A leak, once confirmed, stays one until the figure has grown less than noise over FLAT_STEPS steps, or
# three of its own periods where that is longer, and growth that has been flat that long is no leak.
FLAT_STEPS = 64
FLAT_PERIODS = 3
# A measured step taken while the figure grows tells what grows; one this many steps old still does where
# the figure has grown steadily since (the probe measures a step at least every EVIDENCE_MAX steps while
# the figure grows: probe/steps.py).
KNOWN_WITHIN = 512
MIN_GROWTH = 64 * KIB  # growth over the window below this is noise
REL_GROWTH = 0.001  # ... and so is growth below this fraction of the level
NOISE_FACTOR = 3.0  # growth must also stand this many noise spreads above the scatter
# ... and its readings must rise this surely (robust.trend_z: Mann and Kendall's z): a dozen readings of a
# figure that goes up and down (a random sequence length each step) can fit a slope past the noise floor.
TREND_Z = 3.0
DECELERATION = 0.5  # the latest half growing slower than this fraction of the window: flattening
MIN_RETRIES = 2  # alloc retries within the window that make fragmentation worth a verdict
CACHE_WARMUP_STEPS = 100  # the cache may grow until this step before growing cache is a verdict
# Host memory beyond the tracked tensors (CPU-only jobs) must grow at least this much over the window:
# the C allocator's bytes in use are exact but also hold the interpreter's and libraries' buffers.
HOST_MIN_GROWTH = 1 << 20
# Resident memory moves in page, arena and huge-page jumps that malloc may or may not give back: where
# it is all there is, growth must pass a higher floor, over more steps.
RSS_MIN_GROWTH = 2 << 20
RSS_CONFIRM_STEPS = 48



class _Figures(TypedDict, total=False):
    """The LeakVerdict fields every verdict on the same steps shares."""

    device: str | None
    steps_seen: int
    first_step: int | None
    last_step: int | None
    allocated: int | None
    reserved: int | None
    step_time: float | None
    host_memory: int | None
    window_steps: int | None
    period_steps: int | None
    allocated_per_step: float | None
    reserved_per_step: float | None
    inactive_split_per_step: float | None
    retries_added: int | None
    growth: tuple[CategoryGrowth, ...]
    host_other_per_step: float | None
    untracked_growth: int | None
    untracked_since: int | None


class _Forecast(TypedDict, total=False):
    """The LeakVerdict fields of an OOM forecast."""

    oom_step: int
    oom_in: float
    oom_at: float


def leak_verdict(
    report: ProbeReport,
    *,
    device_total: int | None = None,
    device_free: int | None = None,
    device: str | None = None,
    min_steps: int = MIN_STEPS,
) -> LeakVerdict:
    """Judge the probed process's recent training steps.

    Whether memory leaks is judged on one figure the probe reads cheaply at (nearly) every step end:
    the allocator's allocated bytes on CUDA, the C heap in use (else resident memory) on CPU. What
    leaks is judged on the measured steps, which carry the categories: parameters, gradients and
    optimizer state by their slopes, activations by what each measured step saved for backward and
    still held at its end (a kept graph; the live total undercounts, since the graphs of unmeasured
    steps are never seen), and "other" as the rest of the growth.

    ``device_total`` / ``device_free`` (from NVML) make the OOM forecast possible: with the free
    memory, the allocator's own cache counts as headroom too; with only the total, the job is
    assumed alone on the device. ``device`` picks one of several devices ("cuda:1"); by default the
    one the latest step names.
    """
    steps, figure = _judged_steps(report, device)
    if not steps:
        return LeakVerdict(LEAK_COLLECTING, reason="no training step seen yet (no optimizer.step() call)",
                           steps_needed=min_steps)
    base = _step_figures(steps, figure)
    if len(steps) < min_steps:
        return LeakVerdict(LEAK_COLLECTING, reason=f"{len(steps)} of {min_steps} steps seen",
                           steps_needed=min_steps - len(steps), **base)
    measured = [s for s in steps if s.categories is not None or s.reserved is not None]
    period = _period(steps, figure)
    growth = _held(_window_growth(steps, figure, period), steps, figure, period)
    allocator = _allocator_evidence(measured)
    since, known = _what_grows_from(steps, figure, growth, measured, period)
    categories = _growth_by_category(measured, since, growth, allocator, figure)
    base.update(_growth_figures(growth, allocator, categories, figure))
    base["period_steps"] = period if period > 1 else None
    room = _Room(device_total, device_free)
    if growth.grows:
        return _growing(steps, figure, growth, allocator, known, categories, room, base)
    return _allocator_verdict(steps, allocator, room, base) or _flat(steps, figure, growth, allocator, measured, base)


class _Room(NamedTuple):
    """The device's memory from NVML, where known: what the OOM forecast measures headroom against."""

    total: int | None
    free: int | None


@dataclass(frozen=True, eq=False, repr=False)
class _WindowGrowth(Record):
    """How the judged figure grows over the latest WINDOW_STEPS steps."""

    window: list[StepRecord]
    totals: list[float]  # the figure at each step of the window
    confirm: int  # the steps growth must be seen over (the figure's, from FIGURES)
    slope: float  # bytes per step
    grows: bool  # a real, continuing growth, or a leak held
    margin: float  # how many times over the growth clears noise
    drops: list[tuple[int, int]]  # a sawtooth's releases
    held: bool = False  # a leak confirmed lately whose figure has not been flat long enough to end it

    @property
    def span(self) -> int:
        """Steps the window covers (readings may skip some)."""
        return self.window[-1].step - self.window[0].step + 1

    @property
    def confirmed(self) -> bool:
        """Whether the growth has been seen over enough steps and readings to call it a leak."""
        return _confirmed(self.span, self.totals, self.margin, self.confirm)


@dataclass(frozen=True, eq=False, repr=False)
class _AllocatorEvidence(Record):
    """The caching allocator's figures over the latest WINDOW_STEPS steps that read it (CUDA jobs)."""

    steps: list[StepRecord]
    reserved: list[float]
    reserved_slope: float | None
    reserved_grows: bool
    inactive: list[float]  # free bytes held in split blocks
    inactive_slope: float | None
    inactive_grows: bool
    retries_added: int | None


def _step_figures(steps: list[StepRecord], figure: str) -> _Figures:
    """The figures every verdict on these steps shares: the latest step's, and the untracked growth."""
    last = steps[-1]
    base = _Figures(
        device=last.device, steps_seen=len(steps), first_step=steps[0].step, last_step=last.step,
        allocated=int(getattr(last, figure)), reserved=last.reserved, step_time=_step_time(steps),
        host_memory=_latest(steps, "host_memory") if figure != "allocated" or _on_cpu(last) else None,
    )
    if figure != "allocated":
        base["untracked_growth"], base["untracked_since"] = _untracked(steps, figure) or (None, None)
    return base


def _window_growth(steps: list[StepRecord], figure: str, period: int = 1) -> _WindowGrowth:
    """Whether the judged figure grows over the window of the latest steps, and how fast."""
    window = _window(steps, len(steps), period)
    totals = [float(getattr(s, figure)) for s in window]
    floor, confirm = FIGURES[figure]
    slope, grows, margin, drops = _growth([float(s.step) for s in window], totals, floor, period)
    return _WindowGrowth(window, totals, confirm, slope, grows, margin, drops)


def _window(steps: list[StepRecord], end: int, period: int) -> list[StepRecord]:
    """The readings a verdict on ``steps[:end]`` judges: those of its last WINDOW_STEPS steps (or PERIODS of
    the leak's own period), and at least its last CONFIRM_READINGS."""
    span = max(WINDOW_STEPS, PERIODS * period)
    start = bisect.bisect_right(steps, steps[end - 1].step - span, hi=end, key=_step_of)
    return steps[max(0, min(start, end - CONFIRM_READINGS)):end]


def _step_of(step: StepRecord) -> int:
    return step.step


def _period(steps: list[StepRecord], figure: str) -> int:
    """The leak's own period, in steps, where the judged figure grows in steps (a tensor kept every 20
    steps): the median distance between its rises, the readings that rose a good part of the noise floor
    beyond what its steady rate explains over the steps since the one before. 1 where it grows a little
    every step, where it does not rise at all, or where the readings are too far apart to tell."""
    floor = FIGURES[figure][0]
    recent = steps[bisect.bisect_right(steps, steps[-1].step - PERIODS * MAX_PERIOD, key=_step_of):]
    pairs = [(a.step, b.step, getattr(b, figure) - getattr(a, figure)) for a, b in zip(recent, recent[1:])]
    if len(pairs) < 4:
        return 1
    steady = max(0.0, median(rise / (b - a) for a, b, rise in pairs))
    gap = median(b - a for a, b, _ in pairs)
    least = _floor(getattr(recent[-1], figure), floor) / 4
    # (A rise after a long unread stretch says nothing of steps: steady growth piles up over it too.)
    rises = [b for a, b, rise in pairs if rise - steady * (b - a) >= least and b - a <= 2 * gap]
    if len(rises) < 3:
        return 1
    period = median(b - a for a, b in zip(rises, rises[1:]))
    if period < 2 * gap:
        return 1  # (a rise at most readings: as far as they tell, it grows every step)
    return min(MAX_PERIOD, int(period))


def _held(growth: _WindowGrowth, steps: list[StepRecord], figure: str, period: int = 1) -> _WindowGrowth:
    """Hysteresis, from the evidence alone: a leak confirmed at any step of the last FLAT_STEPS (or
    FLAT_PERIODS of its period) stays a leak until memory has been flat over that many steps, and no growth
    is a leak once it has."""
    flat = max(FLAT_STEPS, FLAT_PERIODS * period)
    recent_growth = _recent_growth(steps, figure, flat)
    if recent_growth is None:
        return dataclasses.replace(growth, grows=False)
    if not (growth.grows and growth.confirmed) and _confirmed_lately(steps, figure, period, flat):
        return dataclasses.replace(growth, grows=True, held=True, slope=max(growth.slope, recent_growth))
    return growth


def _allocator_evidence(measured: list[StepRecord]) -> _AllocatorEvidence:
    """How the allocator's reservation, split blocks and retries moved over the steps that read them."""
    allocator = [s for s in measured if s.reserved is not None][-WINDOW_STEPS:]
    xs = [float(s.step) for s in allocator]
    reserved = _column(allocator, "reserved")
    reserved_slope, reserved_grows, _ = _fit(xs, reserved) if reserved else (None, False, 0.0)
    inactive = _column(allocator, "inactive_split")
    inactive_slope, inactive_grows, _ = _fit(xs, inactive, floor_of=reserved) if inactive else (None, False, 0.0)
    retries = _column(allocator, "alloc_retries")
    retries_added = int(retries[-1] - retries[0]) if retries else None
    return _AllocatorEvidence(allocator, reserved, reserved_slope, reserved_grows, inactive, inactive_slope,
                              inactive_grows, retries_added)


def _what_grows_from(steps: list[StepRecord], figure: str, growth: _WindowGrowth,
                     measured: list[StepRecord], period: int) -> tuple[int, bool]:
    """The step from which the measured steps say what grows, and whether one of them was taken while
    it grows (else no category yet, rather than one that changes when the evidence comes)."""
    categorised = [s for s in measured if s.categories is not None]
    since = growth.window[0].step
    if not categorised or categorised[-1].step > since:
        return since, True
    latest = categorised[-1].step
    if growth.grows and steps[-1].step - latest <= KNOWN_WITHIN and latest >= _growth_start(
            steps, figure, growth.slope, max(CONFIRM_STEPS, 2 * period)):
        # The latest measured step is older than the window, but it was taken while this growth lasts,
        # and still says what grows (a probe whose budget measures few steps measures one more only as
        # the growth doubles: without this, the verdict would fall back to "waiting" between them).
        return latest, True
    return since, False


def _growth_start(steps: list[StepRecord], figure: str, slope: float, flat: int) -> int:
    """The step the figure's current growth began at, as far as its readings tell: where the latest
    stretch of ``flat`` steps or more over which it rose less than a quarter of ``slope`` (bytes per step)
    ends; the first step judged where there is none."""
    xs = [s.step for s in steps]
    ys = [float(getattr(s, figure)) for s in steps]
    end = len(xs) - 1
    for start in range(len(xs) - 2, -1, -1):
        while end > start + 1 and xs[end - 1] - xs[start] >= flat:
            end -= 1  # (the first reading ``flat`` steps or more after ``start``)
        if xs[end] - xs[start] >= flat and ys[end] - ys[start] < 0.25 * slope * (xs[end] - xs[start]):
            return xs[end]
    return xs[0]


def _growth_by_category(measured: list[StepRecord], since: int, growth: _WindowGrowth,
                        allocator: _AllocatorEvidence, figure: str) -> tuple[CategoryGrowth, ...]:
    """Every category's growth per step (tensor categories from step ``since``, cache, fragmentation),
    the fastest first."""
    found = _category_growth(measured[-2 * WINDOW_STEPS:], since, growth.slope, figure)
    return tuple(sorted(found + _allocator_growth(allocator.steps), key=lambda g: -g.bytes_per_step))


def _growth_figures(growth: _WindowGrowth, allocator: _AllocatorEvidence, categories: tuple[CategoryGrowth, ...],
                    figure: str) -> _Figures:
    """The verdict's figures of growth, shared by every verdict past the first steps."""
    other = next((g.bytes_per_step for g in categories if g.name == "other"), None)
    return _Figures(
        window_steps=growth.span, allocated_per_step=growth.slope, reserved_per_step=allocator.reserved_slope,
        inactive_split_per_step=allocator.inactive_slope, retries_added=allocator.retries_added,
        growth=categories, host_other_per_step=other if figure != "allocated" else None,
    )


def _growing(steps: list[StepRecord], figure: str, growth: _WindowGrowth, allocator: _AllocatorEvidence,
             known: bool, categories: tuple[CategoryGrowth, ...], room: _Room, base: _Figures) -> LeakVerdict:
    """The verdict on a figure that grows: a leak once confirmed and ``known`` (a measured step told
    what grows), warming up until then."""
    name, slope, span = FIGURE_NAMES[figure], growth.slope, growth.span
    if not growth.held and not growth.confirmed:
        readings = CONFIRM_READINGS if growth.margin < CLEAR_MARGIN else CLEAR_READINGS
        spacing = span / len(growth.window)
        needed = max(growth.confirm - span, math.ceil((readings - len(growth.window)) * spacing), 1)
        return LeakVerdict(
            LEAK_WARMING_UP, steps_needed=needed,
            reason=f"{name} grows {size(slope)} per step over {span} steps; "
            f"{needed} more {'step' if needed == 1 else 'steps'} to confirm a leak", **base)
    if not known:
        # What grows is known only from a measured step taken while it grows: until then no
        # category, rather than one that changes when the evidence comes.
        return LeakVerdict(
            LEAK_WARMING_UP, steps_needed=None,
            reason=f"{name} grows {size(slope)} per step over {span} steps; waiting for the probe "
            f"to measure a step to tell what grows", **base)
    category = _leading(categories, TENSOR_CATEGORIES, slope)
    what = f" ({category} +{size(_slope_of(categories, category))}/step)" if category else ""
    oom = _forecast(steps, _leak_steps_left(steps, figure, growth, allocator, room))
    return LeakVerdict(
        LEAK_LEAK, category=category, reason=f"{name} grows {size(slope)} per step over the "
        f"last {span} steps{what}; now {size(growth.totals[-1])}", **oom, **base)


def _leak_steps_left(steps: list[StepRecord], figure: str, growth: _WindowGrowth, allocator: _AllocatorEvidence,
                     room: _Room) -> float | None:
    """Steps until a leak fills the device, where NVML's figures allow the forecast."""
    last = steps[-1]
    if figure != "allocated":  # host memory: what the process holds now is what has to fit
        headroom = room.free if room.free is not None else (
            room.total - growth.totals[-1] if room.total is not None else None)
        return _steps_left(steps, growth.slope, headroom, peaks=True)
    return _earliest(
        _steps_left(steps, growth.slope, _headroom(last, room.total, room.free, True), peaks=True),
        # The cache is room only while it does not grow along: where the reservation grows
        # with the leak (blocks rounded up and split), the device's free memory goes at the
        # reservation's pace, and runs out before the cache is ever used up.
        _steps_left(steps, allocator.reserved_slope if allocator.reserved_grows else None,
                    _headroom(last, room.total, room.free, False)))


def _allocator_verdict(steps: list[StepRecord], allocator: _AllocatorEvidence, room: _Room,
                       base: _Figures) -> LeakVerdict | None:
    """The verdict on flat allocated memory whose allocator's cache grows or fragments; None if neither."""
    a = allocator
    # Split blocks growing with the cache are only fragmentation once the allocator has to retry.
    fragmented = (a.inactive_grows and (a.retries_added is None or a.retries_added > 0)) or bool(
        a.retries_added is not None and a.retries_added >= MIN_RETRIES and a.inactive
        and a.reserved and a.inactive[-1] >= 0.1 * a.reserved[-1]
    )
    last = steps[-1]
    if (fragmented or a.reserved_grows) and (len(a.steps) < CONFIRM_STEPS or last.step <= CACHE_WARMUP_STEPS):
        # The caching allocator keeps growing over the first steps of a run (shapes it has not seen).
        return LeakVerdict(
            LEAK_WARMING_UP, reason=f"reserved grows {size(a.reserved_slope or 0)} per step over flat "
            f"allocated memory; the cache may warm up until step {CACHE_WARMUP_STEPS}", **base)
    if fragmented:
        rate = a.reserved_slope if a.reserved_grows else None
        oom = _forecast(steps, _steps_left(steps, rate, _headroom(last, room.total, room.free, False)))
        return LeakVerdict(
            LEAK_FRAGMENTATION, category="fragmentation",
            reason=f"{size(a.inactive[-1])} free but split in reserved blocks "
            f"({size(a.inactive_slope or 0)}/step), {a.retries_added or 0} alloc retries in the last "
            f"{len(a.steps)} steps; allocated flat at {size(last.allocated)}", **oom, **base)
    if a.reserved_grows:
        oom = _forecast(steps, _steps_left(steps, a.reserved_slope, _headroom(last, room.total, room.free, False)))
        return LeakVerdict(
            LEAK_CACHE_GROWTH, category="cache",
            reason=f"reserved grows {size(a.reserved_slope)} per step while allocated stays at "
            f"{size(a.steps[-1].allocated)}: the allocator caches blocks it cannot reuse", **oom, **base)
    return None


def _flat(steps: list[StepRecord], figure: str, growth: _WindowGrowth, allocator: _AllocatorEvidence,
          measured: list[StepRecord], base: _Figures) -> LeakVerdict:
    """The verdict on flat memory: warming up if it grew earlier and has not been flat for long, else
    clean. (A sawtooth has already shown what it does: it rises and is released.)"""
    settled, rose = _settling([float(getattr(s, figure)) for s in steps], FIGURES[figure][0])
    if allocator.reserved:
        r_settled, r_rose = _settling([float(s.reserved) for s in measured if s.reserved is not None])
        if r_rose:  # the cache warming up counts too: settled once both are flat
            settled, rose = min(settled, r_settled), True
    sawtooth = len(growth.drops) >= 2
    rose = rose and not sawtooth
    warmup = len(steps) - settled if rose else None
    if rose and settled < SETTLE_STEPS:
        return LeakVerdict(
            LEAK_WARMING_UP, warmup_steps=warmup, steps_needed=SETTLE_STEPS - settled,
            reason=f"memory grew over the first steps and has been flat for {settled}; "
            f"{SETTLE_STEPS - settled} more steps to call it settled", **base)
    reason = f"{FIGURE_NAMES[figure]} flat at {size(growth.totals[-1])} over the last {growth.span} steps"
    if sawtooth:
        reason += f", released {len(growth.drops)} times (garbage collection)"
    if rose:
        reason += f" after {warmup} steps of warm-up"
    return LeakVerdict(LEAK_CLEAN, warmup_steps=warmup, reason=reason, **base)


# What a verdict may be judged on, best first, with the least growth over the window that counts and
# the steps it must be seen over. The C allocator's bytes in use are exact but also hold the
# interpreter's and libraries' buffers; resident memory moves in page, arena and huge-page jumps
# that malloc may or may not give back: where it is all there is, growth must pass a higher floor,
# over more steps.
FIGURES = {
    "allocated": (MIN_GROWTH, CONFIRM_STEPS),
    "host_allocated": (HOST_MIN_GROWTH, CONFIRM_STEPS),
    "host_memory": (RSS_MIN_GROWTH, RSS_CONFIRM_STEPS),
}
FIGURE_NAMES = {"allocated": "allocated", "host_allocated": "host memory in use",
                "host_memory": "resident memory"}


def untracked_growth(report: ProbeReport, device: str | None = None) -> tuple[int, int] | None:
    """A CPU-only job's untracked growth: (bytes, since which measured step) by which the host memory
    beyond the tracked tensors grew, where it grew past noise; None otherwise, and for a CUDA job
    (its allocator counts every tensor: the breakdown's "untracked" part)."""
    steps, figure = _judged_steps(report, device)
    if figure == "allocated":
        return None
    return _untracked(steps, figure)


def _untracked(steps: list[StepRecord], figure: str) -> tuple[int, int] | None:
    """(growth, since step) of ``figure`` (each of ``steps`` has it) less the tracked tensors (a CPU
    measured step's ``allocated``), from the earliest measured step kept (the first steps are kept for
    good) to the latest step, or None below the figure's noise floor.

    The tracked tensors are those of the latest measured step: what grew since then, the probe has not
    seen. (What the first step creates, the optimizer's state, is tracked: it does not count.)
    """
    known = [s for s in steps if s.categories is not None and s.allocated is not None]
    if not known:
        return None
    base = known[0]
    now = getattr(steps[-1], figure)
    grown = (now - known[-1].allocated) - (getattr(base, figure) - base.allocated)
    if steps[-1].step <= base.step or grown < growth_floor(figure, now):
        return None
    return int(grown), base.step


def growth_floor(figure: str, level: float) -> float:
    """The least growth of ``figure`` (a key of FIGURES) from ``level`` that is more than noise."""
    return _floor(level, FIGURES[figure][0])


def _on_cpu(step: StepRecord) -> bool:
    return not (step.device or "").startswith("cuda")


def _judged_steps(report: ProbeReport, device: str | None) -> tuple[list[StepRecord], str]:
    """The steps of one device that carry the figure a verdict is judged on, one per step, in order.

    CUDA jobs are judged on the allocator's allocated bytes. CPU jobs on the C heap in use, else on
    resident memory (either holds every tensor), and where the probe read neither (an older probe),
    on the tracked tensors alone.
    """
    steps = report.steps
    if device is None:
        device = next((s.device for s in reversed(steps) if s.device is not None), None)
    mine = [s for s in steps if s.device == device]
    figure = "allocated"
    if mine and _on_cpu(mine[-1]):
        counts = {f: sum(getattr(s, f) is not None for s in mine) for f in FIGURES}
        best = max(("host_allocated", "host_memory"), key=lambda f: counts[f])
        if counts[best] >= max(1, counts["allocated"] // 2):
            figure = best
    by_step = {s.step: s for s in mine if getattr(s, figure) is not None}
    return [by_step[k] for k in sorted(by_step)], figure


def _latest(steps: list[StepRecord], name: str) -> int | None:
    latest: int | None = next((getattr(s, name) for s in reversed(steps) if getattr(s, name) is not None), None)
    return latest


def _column(steps: list[StepRecord], name: str) -> list[float]:
    """One figure over the steps, or [] when any step lacks it (a partial column would misalign)."""
    values = [getattr(s, name) for s in steps]
    return [] if None in values else [float(v) for v in values]


def _floor(level: float, min_growth: float = MIN_GROWTH) -> float:
    return max(min_growth, REL_GROWTH * level)


def _growth(xs: list[float], ys: list[float], floor: float,
            period: int = 1) -> tuple[float, bool, float, list[tuple[int, int]]]:
    """:func:`_fit` of one window of the judged figure, with a sawtooth judged by its low points:
    (slope per step, whether it grows, its margin over noise, the sawtooth's releases)."""
    slope, grows, margin = _fit(xs, ys, min_growth=floor, period=period)
    # The garbage collector freeing reference cycles now and then: a sawtooth, not a leak, unless the
    # low points rise too.
    drops = releases(ys, _floor(ys[-1], floor))
    if len(drops) >= 2:
        slope, grows = _trough_growth(xs, ys, drops, floor)
    return slope, grows, margin, drops


def _confirmed(span: int, totals: list[float], margin: float, confirm: int) -> bool:
    """Whether growth seen over ``span`` steps in readings ``totals`` is enough to call a leak: growth far
    clear of noise needs fewer readings (the probe reads fewer steps where its readings cost more), never
    fewer steps, and the readings must rise surely, a sawtooth's too (TREND_Z)."""
    readings = len(totals)
    return (span >= confirm and readings >= (CONFIRM_READINGS if margin < CLEAR_MARGIN else CLEAR_READINGS)
            and trend_z(totals) >= TREND_Z)


def _confirmed_lately(steps: list[StepRecord], figure: str, period: int, flat: int) -> bool:
    """Whether the verdict on the steps up to any earlier reading of the last ``flat`` steps confirmed
    a leak: the previous verdicts, derived from the evidence (not remembered), so that every monitor
    judging the same report says the same."""
    floor, confirm = FIGURES[figure]
    since = steps[-1].step - flat
    for end in range(len(steps) - 1, MIN_STEPS - 1, -1):  # newest first: a leak is found at once
        if steps[end - 1].step <= since:
            break
        window = _window(steps, end, period)
        xs = [float(s.step) for s in window]
        ys = [float(getattr(s, figure)) for s in window]
        _, grows, margin, _ = _growth(xs, ys, floor, period)
        if grows and _confirmed(window[-1].step - window[0].step + 1, ys, margin, confirm):
            return True
    return False


def _recent_growth(steps: list[StepRecord], figure: str, flat: int = FLAT_STEPS) -> float | None:
    """Bytes per step the figure grew over the last ``flat`` steps, or None where that is under its
    noise floor: flat.

    Growth is the larger of the robust slope over those steps and the rise from the median of their
    first eighth to that of their last: a leak that grows in steps every 20 steps reads as flat to a
    slope that takes its jumps for outliers, never to the rise. The readings judged start from the last
    one at or before those steps (what the figure was as they began, as far as the probe read it), and
    are at least the last 4: a probe that reads seldom has not seen a flat figure in fewer.
    """
    start = bisect.bisect_right(steps, steps[-1].step - flat, key=_step_of) - 1
    recent = steps[max(0, min(start, len(steps) - 4)):]
    if len(recent) < 4:
        return 0.0
    xs = [float(s.step) for s in recent]
    ys = [float(getattr(s, figure)) for s in recent]
    floor = FIGURES[figure][0]
    drops = releases(ys, _floor(ys[-1], floor))
    if len(drops) >= 2:  # a sawtooth's scatter is its height: its low points say whether it grows
        trough_slope, grows = _trough_growth(xs, ys, drops, floor)
        return trough_slope if grows else None
    slope = theil_sen(xs, ys) or 0.0
    ends = max(1, len(ys) // 8)
    span = xs[-1] - xs[0]
    growth = max(slope * span, median(ys[-ends:]) - median(ys[:ends]))
    noise = spread([y - slope * x for x, y in zip(xs, ys)])
    if growth < max(_floor(ys[-1], floor), NOISE_FACTOR * noise):
        return None
    return growth / span


def _fit(xs: list[float], ys: list[float], floor_of: list[float] | None = None,
         min_growth: float = MIN_GROWTH, period: int = 1) -> tuple[float, bool, float]:
    """Robust slope per step, whether it is a real, continuing growth (not noise, not flattening),
    and how many times over the growth clears what would be noise.

    ``floor_of`` sets the noise floor from another figure's level (inactive split is judged against
    reserved memory, not against its own small size); ``min_growth`` is the least growth over the
    window that counts; ``period`` the leak's own period, in steps (it grows in steps).
    """
    slope = theil_sen(xs, ys) or 0.0
    floor = _floor((floor_of or ys)[-1], min_growth)
    noise = spread([y - slope * x for x, y in zip(xs, ys)])
    tolerance = max(floor, NOISE_FACTOR * noise)
    margin = slope * (xs[-1] - xs[0]) / tolerance if xs else 0.0
    if len(xs) < 4 or margin < 1:
        return slope, False, margin
    # The latest half of the window's steps, in steps, not readings: after a stretch the probe could not
    # read, the latest readings are the latest evidence, however few. And from a reading two of the
    # leak's periods back at least, where it grows in steps: growth judged over less could fall between
    # two of its increments.
    half = max(0, min(bisect.bisect_left(xs, xs[-1] - (xs[-1] - xs[0]) / 2),
                      bisect.bisect_right(xs, xs[-1] - 2 * period) - 1))
    if len(xs) - half < 2:
        return slope, False, margin  # (one reading in the latest half: whether it still grows is not known)
    late_x, late_y = xs[half:], ys[half:]
    # Growth there, by its fit, by its typical step (a leak goes on growing step by step across one
    # unrelated release, which would bend the fit) or, where it grows in steps, by the rise of its level
    # (its fit and its typical step take the increments for outliers; a single jump is no period).
    latest = max(theil_sen(late_x, late_y) or 0.0, _typical_step(late_x, late_y),
                 _level_rise(late_x, late_y) if period > 1 else 0.0)
    still = latest >= DECELERATION * slope and latest * (xs[-1] - xs[half]) >= tolerance / 2
    return slope, still, margin


def _level_rise(xs: list[float], ys: list[float]) -> float:
    """Growth per step from the median of the first quarter of the readings to that of the last."""
    if len(xs) < 2 or xs[-1] <= xs[0]:
        return 0.0
    ends = max(1, len(ys) // 4)
    return (median(ys[-ends:]) - median(ys[:ends])) / (xs[-1] - xs[0])


def _typical_step(xs: list[float], ys: list[float]) -> float:
    """The median growth per step from one reading to the next."""
    rates = [(b - a) / (x1 - x0) for x0, x1, a, b in zip(xs, xs[1:], ys, ys[1:]) if x1 > x0]
    return median(rates) if rates else 0.0


def _trough_growth(xs: list[float], ys: list[float], drops: list[tuple[int, int]],
                   min_growth: float = MIN_GROWTH) -> tuple[float, bool]:
    """Slope of a sawtooth's low points, and whether they rise enough to be a leak of their own.

    Whether they rise is judged on the least value in each third of the window, not on the troughs
    found too: the readings may skip steps, and a trough they missed would pass for a risen one. So
    each third must span two releases at least, and the lows rise by more than reading late explains.
    """
    tx = [xs[t] for _, t in drops]
    ty = [ys[t] for _, t in drops]
    slope = theil_sen(tx, ty) or 0.0
    third = len(ys) // 3
    period = (tx[-1] - tx[0]) / (len(tx) - 1) if len(tx) > 1 else math.inf
    if len(drops) < 3 or third < 2 or xs[-1] - xs[0] < 6 * period:
        return slope, False
    lows = [min(ys[:third]), min(ys[third:2 * third]), min(ys[2 * third:])]
    floor = _floor(ys[-1], min_growth)
    # A low point read a step or two after the real trough sits up to a good part of the sawtooth's
    # height above it: the lows must rise by more than half that height.
    height = median(ys[peak] - ys[trough] for peak, trough in drops)
    grows = (slope * (tx[-1] - tx[0]) >= floor and lows[0] < lows[1] < lows[2]
             and lows[2] - lows[0] >= max(floor, 0.5 * height))
    return slope, grows


def _category_growth(measured: list[StepRecord], since: int, total: float,
                     figure: str) -> tuple[CategoryGrowth, ...]:
    """How much of the growth per step each tensor category explains, from the measured steps.

    Parameters, gradients and optimizer state exist whole at every measured step: their slopes are
    exact. Activations are the bytes a measured step saved for backward and still held at its end
    (a graph kept past its step), their median over the measured steps of the judged window (from
    step ``since``): the live total would count only the graphs of measured steps. "Other" is the
    rest of the growth of the judged total.
    """
    cats = [s for s in measured if s.categories is not None]
    if not cats:
        return ()
    xs = [float(s.step) for s in cats]
    found: list[CategoryGrowth] = []
    explained = 0.0
    for name in ("parameters", "gradients", "optimizer_state", "buffers", "activations"):
        values = [getattr(s.categories, name) for s in cats]
        if None in values:
            continue
        rate = theil_sen(xs, values) or 0.0 if len(cats) > 1 else 0.0
        if name == "activations":
            # (Not the job's first step: it is not a whole turn of the loop, since what a loop does
            # after optimizer.step(), evaluation or logging, counts in the next step.)
            kept = [s.activations_kept for s in cats
                    if s.step >= since and s.step > 1 and s.activations_kept is not None]
            if kept:
                rate = float(median(kept))
        explained += rate
        found.append(CategoryGrowth(name, rate, values[-1]))
    if found:
        # On CUDA the probe knows the live "other" bytes (allocated beyond the tracked tensors); on
        # CPU host memory holds more than tensors, so no level is claimed.
        latest = cats[-1].categories
        level = latest.other if figure == "allocated" and latest is not None else None
        found.append(CategoryGrowth("other", max(0.0, total - explained), level))
    return tuple(found)


def _allocator_growth(allocator: list[StepRecord]) -> tuple[CategoryGrowth, ...]:
    """The allocator's cache and fragmentation, per step, from the steps that read the allocator."""
    xs = [float(s.step) for s in allocator]
    derived = {
        "cache": [None if s.reserved is None or s.allocated is None else s.reserved - s.allocated for s in allocator],
        "fragmentation": [s.inactive_split for s in allocator],
    }
    known = {name: [v for v in values if v is not None] for name, values in derived.items()}
    return tuple(CategoryGrowth(name, theil_sen(xs, values) or 0.0, values[-1])
                 for name, values in known.items() if values and len(values) == len(derived[name]))


def _leading(growth: Sequence[CategoryGrowth], names: Sequence[str], total_slope: float) -> str | None:
    """The category that grows fastest among ``names``, if it explains a good part of the growth."""
    for g in growth:
        if g.name in names:
            return g.name if g.bytes_per_step > 0.25 * total_slope else None
    return None


def _slope_of(growth: Sequence[CategoryGrowth], name: str) -> float:
    return next(g.bytes_per_step for g in growth if g.name == name)


def _settling(series: list[float], min_growth: float = MIN_GROWTH) -> tuple[int, bool]:
    """(steps flat at the current level, whether it rose to that level from the first steps).

    Step-to-step jitter (varying batch shapes) widens what counts as flat; a ramp barely does,
    since its steps are small and alike.
    """
    level = median(series[-5:])
    recent = series[-WINDOW_STEPS:]
    jitter = spread([b - a for a, b in zip(recent, recent[1:])])
    tolerance = max(_floor(level, min_growth), NOISE_FACTOR * jitter)
    rose = level - median(series[:5]) >= tolerance
    return settled_count(series, level, tolerance), rose


def _headroom(last: StepRecord, total: int | None, free: int | None, cache_counts: bool) -> float | None:
    """Bytes the job can still grow into before the device is full.

    Growing allocations first reuse the allocator's cache (reserved minus allocated); growing cache
    needs new device memory.
    """
    cache = 0
    if cache_counts and last.reserved is not None and last.allocated is not None:
        cache = last.reserved - last.allocated
    if free is not None:
        return free + cache
    if total is None:
        return None
    held = last.allocated if cache_counts else (last.reserved if last.reserved is not None else last.allocated)
    return None if held is None else total - held


def _steps_left(steps: list[StepRecord], rate: float | None, headroom: float | None,
                peaks: bool = False) -> float | None:
    """Steps until ``headroom`` bytes are used up at ``rate`` bytes per step; None without either.

    With ``peaks``, what must fit is the step's peak (forward, backward, optimizer), not its end:
    a leaking job fails inside a step, when the transient tensors come on top of what leaked.
    Growing cache, by contrast, fills the device (and then forces retries) at its own pace.
    """
    if rate is None or rate <= 0 or headroom is None:
        return None
    transient = 0
    # The latest measured step's peaks, over its own end: what each step adds on top for a while.
    measured = next((s for s in reversed(steps) if s.peak_backward is not None or s.peak_forward is not None
                     or s.peak_optimizer is not None), None)
    highs = [] if measured is None else [
        p for p in (measured.peak_forward, measured.peak_backward, measured.peak_optimizer) if p is not None]
    if peaks and highs and measured is not None and measured.allocated is not None:
        transient = max(0, max(highs) - measured.allocated)
    return max(0.0, headroom - transient) / rate


def _earliest(*lefts: float | None) -> float | None:
    """The soonest of several forecasts (steps left), ignoring the ones that cannot be made."""
    return min((left for left in lefts if left is not None), default=None)


def _forecast(steps: list[StepRecord], steps_left: float | None) -> _Forecast:
    """The step during which memory no longer fits, ``steps_left`` after the latest, and when."""
    if steps_left is None:
        return _Forecast()
    last = steps[-1]
    out = _Forecast(oom_step=last.step + math.floor(steps_left) + 1)
    step_time = _step_time(steps)
    if step_time is not None:
        out["oom_in"] = oom_in = steps_left * step_time
        out["oom_at"] = last.ended_at + oom_in
    return out


def _step_time(steps: list[StepRecord]) -> float | None:
    """Median seconds per step: the probe's durations, or else the spacing of step ends."""
    recent = steps[-WINDOW_STEPS:]
    durations = [s.duration for s in recent if s.duration is not None]
    if durations:
        return median(durations)
    gaps = [
        (b.ended_at - a.ended_at) / (b.step - a.step) for a, b in zip(recent, recent[1:]) if b.step > a.step
    ]
    return median(gaps) if gaps else None


def snapshot_leak_verdict(report: ProbeReport, snapshot: Snapshot) -> LeakVerdict:
    """:func:`leak_verdict` for a probed process, with its GPU's room from the snapshot's NVML figures.

    The probe's busiest CUDA device is joined to NVML's by UUID; a CPU-only job, or one whose device
    NVML does not list, is judged without a device (no OOM forecast from NVML's free memory).
    """
    device = probed_nvml_device(report, snapshot)
    if device is None:
        return leak_verdict(report)
    name = next((pd.device for pd in report.devices if pd.uuid == device.uuid), None)
    return leak_verdict(report, device_total=device.memory_total, device_free=device.memory_free,
                        device=name)


def probed_nvml_device(report: ProbeReport, snapshot: Snapshot) -> Device | None:
    """The NVML device holding the probe's busiest CUDA device (joined by UUID), or None."""
    by_uuid: dict[str | None, Device] = {d.uuid: d for d in snapshot.devices if d.uuid}
    known = [pd for pd in report.devices if pd.uuid in by_uuid]
    if not known:
        return None
    busiest = max(known, key=lambda pd: pd.allocator.reserved if pd.allocator else -1)
    return by_uuid[busiest.uuid]


# A probe report's identity for the verdict cache: pid, time taken, steps held, the latest step.
_ReportKey = tuple[int, float, int, int | None]


@dataclass(frozen=True, eq=False, repr=False)
class JudgedLeaks(Record):
    """One machine's leak verdicts by pid, each with the identity of the report it judged: handed back
    to :func:`judge_leaks` with the next snapshot, so that reports that did not change keep their verdict
    (the analysis is the costly part of a refresh). Its holder keeps the state; this module keeps none."""

    verdicts: Mapping[int, LeakVerdict] = field(default_factory=dict)
    judged: Mapping[int, _ReportKey] = field(default_factory=dict)


def judge_leaks(snapshot: Snapshot, earlier: JudgedLeaks | None = None) -> JudgedLeaks:
    """The leak verdict of each probed process in ``snapshot``; the ``earlier`` verdict of a report that
    did not change since. Processes no longer probed are dropped."""
    known = earlier if earlier is not None else JudgedLeaks()
    verdicts: dict[int, LeakVerdict] = {}
    judged: dict[int, _ReportKey] = {}
    for report in snapshot.probes:
        key: _ReportKey = (report.pid, report.taken_at, len(report.steps),
                           report.steps[-1].step if report.steps else None)
        same = known.judged.get(report.pid) == key
        verdicts[report.pid] = known.verdicts[report.pid] if same else snapshot_leak_verdict(report, snapshot)
        judged[report.pid] = key
    return JudgedLeaks(verdicts, judged)
