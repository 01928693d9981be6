"""Trends of every GPU process's NVML memory: steady, warming up, sawtooth, or growing toward OOM.

Works from the monitor's own history, so it needs no probe. ``trends`` judges a whole snapshot at
once and, given a ``TrendCache``, spreads the work so a thousand processes stay cheap per refresh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence, TypedDict, cast

from gputui.analysis.history import History, ProcessKey, Series
from gputui.analysis.robust import releases, theil_sen
from gputui.model import GpuProcess, Snapshot
from gputui.model.verdicts import (
    TREND_GROWING,
    TREND_SAWTOOTH,
    TREND_STEADY,
    TREND_UNKNOWN,
    TREND_WARMING_UP,
    ProcessTrend,
)

MIB = 1 << 20
METRIC = "gpu_memory"  # the one series of the history that trends read

WINDOW = 120.0  # seconds of the latest history the current rate is fitted on
MIN_SPAN = 30.0  # seconds of history needed before any verdict
MIN_POINTS = 10  # known readings needed before any verdict
CONFIRM_SPAN = 60.0  # growth must be seen over this long before it is called growing
YOUNG = 90.0  # a process younger than this that grows is warming up, not leaking
SETTLE = 120.0  # after growth, flat for this long before it is called steady again
MIN_RISE = 16 * MIB  # less than this is noise in NVML's page-granular figures
REL_RISE = 0.01  # ... and so is less than this fraction of the process's memory
DECELERATION = 0.25  # the latest half growing slower than this fraction of the window: flattening
MAX_READINGS = 150  # readings analysed per process; longer histories are thinned evenly


class _Common(TypedDict):
    """The ProcessTrend fields every verdict of one series shares."""

    level: int
    samples: int
    span: float
    releases: int
    computed_at: float | None


def rise_threshold(level: float) -> float:
    """The smallest change in memory that counts as a change for a process holding ``level`` bytes."""
    return max(MIN_RISE, REL_RISE * level)


def process_trend(
    series: Series,
    *,
    device_free: int | None = None,
    device_total: int | None = None,
    now: float | None = None,
    started_at: float | None = None,
) -> ProcessTrend:
    """Judge one process's memory series (bytes over seconds).

    ``device_free`` turns a growing rate into a time to OOM; without it, ``device_total`` minus the
    process's own memory stands in (as if it were alone on the GPU). ``started_at`` (seconds since
    the epoch) lets a young process's growth count as warm-up.
    """
    times, values = _readings(series)
    samples = len(times)
    if samples == 0:
        return ProcessTrend(TREND_UNKNOWN, computed_at=now)
    level = int(values[-1])
    span = times[-1] - _first_known_time(series)
    if now is None:
        now = times[-1]
    base = _Common(level=level, samples=_known_count(series), span=span, releases=0, computed_at=now)
    if samples < MIN_POINTS or span < MIN_SPAN:
        return ProcessTrend(TREND_UNKNOWN, **base)

    threshold = rise_threshold(level)
    low, high = min(values), max(values)
    if high - low < threshold:  # the common case, and a cheap one
        rate = 0.0 if high == low else _window_rate(times, values)
        return ProcessTrend(TREND_STEADY, rate=rate, **base)

    drops = releases(values, threshold)
    base["releases"] = len(drops)
    if len(drops) >= 2:
        return _sawtooth(times, values, drops, threshold, base, device_free, device_total)
    if drops:
        # After one release (a restart, one big free), only what came after says where it is going.
        start = drops[0][1]
        if len(times) - start < MIN_POINTS or times[-1] - times[start] < MIN_SPAN:
            return ProcessTrend(TREND_SAWTOOTH, rate=_window_rate(times, values), **base)
        times, values = times[start:], values[start:]

    first = _window_start(times, times[-1] - WINDOW)
    wt, wv = times[first:], values[first:]
    rate = theil_sen(wt, wv) or 0.0
    window_span = wt[-1] - wt[0]
    young = started_at is not None and now - started_at < YOUNG
    if rate * window_span >= threshold and _been_this_high(values, first, level):
        # Rising now, but it has been up here before and came back down: the rising half of an
        # oscillation, not growth. A leak sets new highs.
        return ProcessTrend(TREND_SAWTOOTH, rate=rate, **base)
    if rate * window_span >= threshold:
        half = _window_start(wt, wt[-1] - window_span / 2)
        latest_rate = theil_sen(wt[half:], wv[half:]) or 0.0
        if young or window_span < CONFIRM_SPAN or latest_rate < DECELERATION * rate:
            return ProcessTrend(TREND_WARMING_UP, rate=rate, **base)
        oom = _time_to_oom(rate, level, device_free, device_total)
        return ProcessTrend(TREND_GROWING, rate=rate, time_to_oom=oom, **base)

    # A slow leak shows only over the whole history: it must grow there and still grow as fast now.
    if first > 0 and not young:
        long_rate = theil_sen(times, values) or 0.0
        if (long_rate * (times[-1] - times[0]) >= threshold and rate >= (1 - DECELERATION) * long_rate
                and not _been_this_high(values, len(values) // 2, level)):
            oom = _time_to_oom(long_rate, level, device_free, device_total)
            return ProcessTrend(TREND_GROWING, rate=long_rate, time_to_oom=oom, **base)

    # Flat now. It is warming up if it grew earlier and has not been flat for long.
    settled_since = times[0]
    for t, v in zip(reversed(times), reversed(values)):
        if abs(v - level) > threshold:
            settled_since = t
            break
    grew = level - min(values[: max(3, len(values) // 10)]) >= threshold
    if grew and times[-1] - settled_since < SETTLE:
        return ProcessTrend(TREND_WARMING_UP, rate=rate, **base)
    return ProcessTrend(TREND_STEADY, rate=rate, **base)


def _been_this_high(values: Sequence[float], before: int, level: float) -> bool:
    """Whether the readings before index ``before`` already reached ``level``."""
    return before > 0 and max(values[:before]) >= level


def _sawtooth(times: list[float], values: list[float], drops: list[tuple[int, int]], threshold: float,
              base: _Common, device_free: int | None, device_total: int | None) -> ProcessTrend:
    """Released again and again: a sawtooth, unless the low points themselves keep rising."""
    if values[-1] - values[drops[-1][1]] < threshold:
        drops = drops[:-1]  # still falling: where this fall ends is not known yet
    trough_t = [times[t] for _, t in drops]
    trough_v = [values[t] for _, t in drops]
    if len(drops) >= 3:
        rate = theil_sen(trough_t, trough_v) or 0.0
        if rate * (trough_t[-1] - trough_t[0]) >= threshold:
            oom = _time_to_oom(rate, base["level"], device_free, device_total)
            return ProcessTrend(TREND_GROWING, rate=rate, time_to_oom=oom, **base)
        return ProcessTrend(TREND_SAWTOOTH, rate=rate, **base)
    return ProcessTrend(TREND_SAWTOOTH, rate=_window_rate(times, values), **base)


def _time_to_oom(rate: float, level: int, device_free: int | None, device_total: int | None) -> float | None:
    if rate <= 0:
        return None
    free = device_free
    if free is None and device_total is not None:
        free = max(0, device_total - level)
    return None if free is None else free / rate


def _readings(series: Series) -> tuple[list[float], list[float]]:
    """Known (time, value) readings, thinned evenly to MAX_READINGS (the latest always kept)."""
    times, values = series.times, series.values
    n = len(times)
    if n > MAX_READINGS:
        step = math.ceil(n / MAX_READINGS)
        # Keep the newest reading exactly: the level and the latest rate depend on it.
        offset = (n - 1) % step
        times, values = times[offset::step], values[offset::step]
    if None in values:
        pairs = [(t, v) for t, v in zip(times, values) if v is not None]
        return [t for t, _ in pairs], [v for _, v in pairs]
    return list(times), cast("list[float]", list(values))  # no None among them: checked above


def _first_known_time(series: Series) -> float:
    for t, v in zip(series.times, series.values):
        if v is not None:
            return t
    return series.times[-1]


def _known_count(series: Series) -> int:
    return len(series.values) - series.values.count(None)


def _window_start(times: list[float], oldest: float) -> int:
    for i, t in enumerate(times):
        if t >= oldest:
            return i
    return len(times) - 1


def _window_rate(times: list[float], values: list[float]) -> float:
    first = _window_start(times, times[-1] - WINDOW)
    return theil_sen(times[first:], values[first:]) or 0.0


def trend_history() -> History:
    """A history for judging trends only: each process's memory, no device series (the live monitor's
    own history, for its charts, keeps every metric: a second copy of them all doubled its growth), and
    no Series kept between samples (``trends`` reads each one once)."""
    return History(device_metrics=(), process_metrics=(METRIC,), keep_series=False)


@dataclass
class TrendCache:
    """Remembers trends between refreshes so each process is re-judged only every ``every`` seconds.

    Re-judging is spread evenly over refreshes (the stalest first), so a thousand processes that
    appeared together do not all cost their fit on the same refresh.
    """

    every: float = 5.0
    trends: dict[ProcessKey, ProcessTrend] = field(default_factory=dict)
    last_call: float | None = None


def trends(
    history: History, snapshot: Snapshot, *, cache: TrendCache | None = None
) -> dict[ProcessKey, ProcessTrend]:
    """The trend of every GPU process in ``snapshot``, from ``history`` (which already holds it)."""
    now = snapshot.taken_at
    # Room per device, and per MIG instance: a process in a MIG slice runs out when its slice does.
    free: dict[tuple[int, int | None], int | None] = {}
    total: dict[tuple[int, int | None], int | None] = {}
    for d in snapshot.devices:
        total[d.index, None] = d.memory_total
        free[d.index, None] = _free(d.memory_free, d.memory_total, d.memory_used)
        for mig in d.mig_instances:
            if mig.gpu_instance_id is not None:
                total[d.index, mig.gpu_instance_id] = mig.memory_total
                free[d.index, mig.gpu_instance_id] = _free(None, mig.memory_total, mig.memory_used)

    def room(proc: GpuProcess) -> tuple[int, int | None]:
        where = (proc.device_index, proc.gpu_instance_id)
        return where if where in total else (proc.device_index, None)

    def judge(proc: GpuProcess) -> ProcessTrend:
        key = (proc.pid, proc.device_index)
        return process_trend(
            history.process(key, METRIC),
            device_free=free.get(room(proc)),
            device_total=total.get(room(proc)),
            now=now,
            started_at=proc.started_at,
        )

    if cache is None:
        return {(p.pid, p.device_index): judge(p) for p in snapshot.processes}

    procs = {(p.pid, p.device_index): p for p in snapshot.processes}
    old = cache.trends
    due: list[tuple[float, ProcessKey]] = []
    for key in procs:
        trend = old.get(key)
        if trend is None or trend.verdict == TREND_UNKNOWN or trend.computed_at is None:
            due.append((-math.inf, key))  # new or still collecting: cheap, always judged
        elif now - trend.computed_at >= cache.every:
            due.append((trend.computed_at, key))
    if cache.last_call is None:
        budget = len(due)
    else:
        elapsed = min(max(now - cache.last_call, 0.0), cache.every)
        budget = math.ceil(len(procs) * elapsed / cache.every)
    due.sort(key=lambda item: item[0])
    result: dict[ProcessKey, ProcessTrend] = {}
    for rank, (stamp, key) in enumerate(due):
        if stamp == -math.inf or rank < budget:
            result[key] = judge(procs[key])
    for key, proc in procs.items():
        if key not in result:
            result[key] = _refreshed(old[key], free.get(room(proc)), total.get(room(proc)))
    cache.trends = result
    cache.last_call = now
    return result


def _free(free: int | None, total: int | None, used: int | None) -> int | None:
    if free is None and total is not None and used is not None:
        return max(0, total - used)
    return free


def _refreshed(trend: ProcessTrend, device_free: int | None, device_total: int | None) -> ProcessTrend:
    """A cached growing trend with its time to OOM recomputed for the device's free memory now."""
    if trend.verdict != TREND_GROWING or trend.rate is None or trend.level is None:
        return trend
    return replace(trend, time_to_oom=_time_to_oom(trend.rate, trend.level, device_free, device_total))
