"""Trend verdicts and time-to-OOM forecasts on synthetic NVML memory series with exact values."""

import math
import random

import pytest

from gputui.analysis.history import History, Series
from gputui.analysis.robust import releases, theil_sen, thin_indices
from gputui.analysis.trends import TrendCache, process_trend, trends
from gputui.model import Device, GpuProcess, MigInstance, Snapshot
from gputui.model.verdicts import ProcessTrend

MIB = 1 << 20
GIB = 1 << 30


def series(fn, seconds, start=0.0):
    times = tuple(float(start + t) for t in range(seconds))
    return Series(times, tuple(fn(t) for t in range(seconds)))


def test_theil_sen_ignores_an_outlier_and_steps():
    xs = list(range(10))
    ys = [3 * x for x in xs]
    ys[4] = 1000  # one wild reading
    assert theil_sen(xs, ys) == 3.0
    assert theil_sen([1, 1], [0, 5]) is None
    assert thin_indices(5, 3) == [0, 2, 4]
    assert thin_indices(3, 5) == [0, 1, 2]


def test_releases_need_a_real_drop_and_a_climb_between():
    values = [0, 5, 10, 0, 1, 0, 1, 10, 2]
    assert releases(values, 5) == [(2, 3), (7, 8)]
    assert releases([0, 1, 0, 1, 0], 5) == []


def test_too_little_history_is_unknown():
    short = series(lambda t: GIB + t * MIB, 20)  # 20 s < MIN_SPAN
    assert process_trend(short).verdict == "unknown"
    assert process_trend(short).level == GIB + 19 * MIB
    sparse = Series((0.0, 40.0, 80.0), (GIB, GIB, GIB))  # 3 readings < MIN_POINTS
    assert process_trend(sparse).verdict == "unknown"
    assert process_trend(Series()).verdict == "unknown"


def test_steady_process():
    trend = process_trend(series(lambda t: 2 * GIB, 300), device_free=10 * GIB)
    assert trend == ProcessTrend("steady", rate=0.0, level=2 * GIB, samples=300, span=299.0,
                                 computed_at=299.0)
    assert trend.time_to_oom is None and trend.mib_per_min == 0.0


def test_steady_with_page_noise_is_steady():
    rng = random.Random(1)
    noisy = series(lambda t: 3 * GIB + rng.choice((-2, 0, 2, 4)) * MIB, 600)
    assert process_trend(noisy).verdict == "steady"


def test_linear_growth_has_exact_rate_and_time_to_oom():
    leak = series(lambda t: GIB + t * MIB, 300)  # 1 MiB/s for 5 minutes
    trend = process_trend(leak, device_free=10 * GIB)
    assert trend.verdict == "growing"
    assert trend.rate == MIB
    assert trend.mib_per_min == 60.0
    assert trend.time_to_oom == 10 * GIB / MIB == 10240.0


def test_slow_leak_is_seen_over_the_whole_history():
    # 30 MiB/min on 7 GiB: too little within two minutes, plain over ten.
    slow = series(lambda t: 7 * GIB + t * MIB // 2, 600)
    trend = process_trend(slow, device_free=30 * GIB)
    assert trend.verdict == "growing" and trend.rate == MIB / 2
    assert trend.time_to_oom == 60 * GIB / MIB
    assert process_trend(series(lambda t: 7 * GIB + t * MIB // 2, 100)).verdict == "steady"


def test_time_to_oom_without_free_uses_the_total_as_if_alone():
    leak = series(lambda t: GIB + t * 2 * MIB, 200)
    trend = process_trend(leak, device_total=8 * GIB)
    level = GIB + 199 * 2 * MIB
    assert trend.level == level
    assert trend.time_to_oom == (8 * GIB - level) / (2 * MIB)
    assert process_trend(leak).time_to_oom is None


def test_missing_readings_are_skipped():
    values = [GIB + t * MIB if t % 7 else None for t in range(300)]
    trend = process_trend(Series(tuple(float(t) for t in range(300)), tuple(values)))
    assert trend.verdict == "growing" and trend.rate == MIB
    assert trend.samples == 300 - math.ceil(300 / 7)


def warmup(t):
    """The caching allocator's warm-up: 500 MiB of context, a 60 s ramp to 4 GiB, then flat."""
    return 500 * MIB + min(t, 60) * ((4 * GIB - 500 * MIB) // 60)


def test_warm_up_is_not_a_leak_at_any_point():
    during = process_trend(series(warmup, 50))  # still ramping, only 50 s seen
    just_after = process_trend(series(warmup, 100))  # flat for 40 s
    later = process_trend(series(warmup, 170))  # flat for 110 s
    long_after = process_trend(series(warmup, 300))  # flat for 4 minutes
    assert [during.verdict, just_after.verdict, later.verdict, long_after.verdict] == [
        "warming_up", "warming_up", "warming_up", "steady"]
    assert long_after.rate == 0.0


def test_young_process_growth_is_warm_up_then_growing_once_old():
    leak = series(lambda t: GIB + t * MIB, 100, start=1000.0)
    assert process_trend(leak, started_at=1050.0).verdict == "warming_up"  # 49 s old
    assert process_trend(leak, started_at=500.0).verdict == "growing"


def test_growth_that_flattens_within_the_window_is_warming_up():
    # Grows for 80 s then holds: the latest half of the window is flat.
    trend = process_trend(series(lambda t: GIB + min(t, 80) * 4 * MIB, 140))
    assert trend.verdict == "warming_up"


def test_steady_then_leak_is_caught_after_the_confirm_span():
    def fn(t):
        return 2 * GIB + max(0, t - 200) * MIB
    assert process_trend(series(fn, 230)).verdict in ("steady", "warming_up")  # 30 s of growth
    late = process_trend(series(fn, 400))  # 200 s of growth: the whole window grows
    assert late.verdict == "growing" and late.rate == MIB


def gc_sawtooth(t):
    """Reference cycles freed by the collector every 30 s: 100 MiB up, then back down."""
    return 2 * GIB + (t % 30) * (100 * MIB // 30)


def test_gc_sawtooth_is_not_growing():
    trend = process_trend(series(gc_sawtooth, 300), device_free=GIB)
    assert trend.verdict == "sawtooth"
    assert trend.releases == 9
    assert trend.time_to_oom is None


def test_sawtooth_whose_low_points_rise_is_growing():
    def fn(t):
        return gc_sawtooth(t) + (t // 30) * 50 * MIB  # each cycle keeps 50 MiB
    trend = process_trend(series(fn, 300), device_free=GIB)
    assert trend.verdict == "growing"
    assert trend.releases == 9
    assert trend.rate == pytest.approx(50 * MIB / 30, rel=1e-12)
    assert trend.time_to_oom == pytest.approx(GIB / (50 * MIB / 30), rel=1e-12)


def test_after_a_restart_only_the_new_run_counts():
    def fn(t):
        return 8 * GIB + t * MIB if t < 150 else GIB + (t - 150) * MIB
    trend = process_trend(series(fn, 300), device_free=4 * GIB)
    assert trend.releases == 1
    assert trend.verdict == "growing" and trend.rate == MIB
    just_restarted = process_trend(series(fn, 160))
    assert just_restarted.verdict == "sawtooth"


def test_grow_then_stable_cache_is_steady_later():
    # A dataset cache that fills in steps of 256 MiB every 10 s for a minute, then stays.
    def fn(t):
        return GIB + min(t // 10, 6) * 256 * MIB
    assert process_trend(series(fn, 120)).verdict == "warming_up"
    assert process_trend(series(fn, 400)).verdict == "steady"


def snapshot_at(t, processes, free=40 * GIB):
    device = Device(index=0, memory_total=80 * GIB, memory_used=80 * GIB - free, memory_free=free)
    return Snapshot(taken_at=float(t), devices=(device,), processes=processes)


def leaky_and_steady(t):
    return (
        GpuProcess(pid=10, device_index=0, gpu_memory=GIB + t * MIB, started_at=-1000.0),
        GpuProcess(pid=11, device_index=0, gpu_memory=3 * GIB, started_at=-1000.0),
    )


def test_trends_judges_every_process_in_the_snapshot():
    history = History()
    for t in range(300):
        snap = snapshot_at(t, leaky_and_steady(t))
        history.add(snap)
    result = trends(history, snap)
    assert set(result) == {(10, 0), (11, 0)}
    assert result[(10, 0)].verdict == "growing" and result[(10, 0)].rate == MIB
    assert result[(10, 0)].time_to_oom == 40 * GIB / MIB
    assert result[(11, 0)].verdict == "steady"


def test_trends_uses_total_minus_used_when_free_is_missing():
    history = History()
    for t in range(300):
        device = Device(index=0, memory_total=80 * GIB, memory_used=60 * GIB)
        snap = Snapshot(taken_at=float(t), devices=(device,), processes=leaky_and_steady(t))
        history.add(snap)
    assert trends(history, snap)[(10, 0)].time_to_oom == 20 * GIB / MIB


def test_cache_spreads_the_work_and_refreshes_time_to_oom():
    history = History()
    procs = lambda t: tuple(  # noqa: E731
        GpuProcess(pid=100 + i, device_index=0, gpu_memory=GIB + t * MIB) for i in range(10))
    for t in range(300):
        history.add(snapshot_at(t, procs(t)))
    cache = TrendCache(every=5.0)
    first = trends(history, snapshot_at(299, procs(299)), cache=cache)
    assert all(tr.computed_at == 299.0 and tr.verdict == "growing" for tr in first.values())

    history.add(snapshot_at(300, procs(300), free=20 * GIB))
    second = trends(history, snapshot_at(300, procs(300), free=20 * GIB), cache=cache)
    assert all(tr.computed_at == 299.0 for tr in second.values())  # none due yet
    # The cached verdicts still forecast from the free memory of now.
    assert all(tr.time_to_oom == 20 * GIB / MIB for tr in second.values())

    for t in range(301, 305):
        history.add(snapshot_at(t, procs(t)))
    history.add(snapshot_at(305, procs(305)))
    third = trends(history, snapshot_at(305, procs(305)), cache=cache)
    # All 10 are due, but 5 s since the last call allows re-judging all of them ...
    assert sum(tr.computed_at == 305.0 for tr in third.values()) == 10
    history.add(snapshot_at(311, procs(311)))
    fourth = trends(history, snapshot_at(311, procs(311)), cache=cache)
    assert sum(tr.computed_at == 311.0 for tr in fourth.values()) == 10

    history.add(snapshot_at(312, procs(312)))
    # ... while a refresh 1 s later may re-judge only a fifth of those due.
    cache.trends = {k: v.__class__(**{**v.__dict__, "computed_at": 300.0}) for k, v in cache.trends.items()}
    fifth = trends(history, snapshot_at(312, procs(312)), cache=cache)
    assert sum(tr.computed_at == 312.0 for tr in fifth.values()) == 2


def test_cache_forgets_processes_that_left():
    history = History()
    for t in range(40):
        history.add(snapshot_at(t, leaky_and_steady(t)))
    cache = TrendCache()
    trends(history, snapshot_at(39, leaky_and_steady(39)), cache=cache)
    only_one = snapshot_at(40, leaky_and_steady(40)[:1])
    history.add(only_one)
    assert set(trends(history, only_one, cache=cache)) == {(10, 0)}
    assert set(cache.trends) == {(10, 0)}


def test_a_process_in_a_mig_slice_runs_out_when_its_slice_does():
    slices = (MigInstance(index=0, gpu_instance_id=7, memory_total=10 * GIB, memory_used=6 * GIB),
              MigInstance(index=1, gpu_instance_id=8, memory_total=20 * GIB, memory_used=GIB))
    history = History()
    for t in range(300):
        device = Device(index=0, memory_total=80 * GIB, memory_used=7 * GIB, memory_free=73 * GIB,
                        mig_enabled=True, mig_instances=slices)
        procs = (GpuProcess(pid=5, device_index=0, gpu_instance_id=7, gpu_memory=GIB + t * MIB),
                 GpuProcess(pid=6, device_index=0, gpu_instance_id=99, gpu_memory=GIB + t * MIB))
        snap = Snapshot(taken_at=float(t), devices=(device,), processes=procs)
        history.add(snap)
    result = trends(history, snap)
    assert result[(5, 0)].time_to_oom == 4 * GIB / MIB
    assert result[(6, 0)].time_to_oom == 73 * GIB / MIB  # unknown slice: the whole device


@pytest.mark.parametrize("period", [300, 1800])
@pytest.mark.parametrize("amplitude", [64 * MIB, 512 * MIB])
def test_an_oscillation_is_never_called_growth_however_long_it_runs(period, amplitude):
    # Memory that rises and falls smoothly forever (an eval pass every few minutes, a cache that
    # fills and is trimmed), watched over a four-hour soak with the last hour of history kept.
    def fn(t):
        return 8 * GIB + amplitude * math.sin(2 * math.pi * t / period)
    verdicts = set()
    for now in range(2 * period + 600, 4 * 3600, 97):
        times = tuple(float(t) for t in range(max(0, now - 3600), now, 2))
        trend = process_trend(Series(times, tuple(int(fn(t)) for t in times)), device_free=40 * GIB,
                              started_at=-1000.0)
        verdicts.add(trend.verdict)
    assert "growing" not in verdicts and "sawtooth" in verdicts


def test_a_leak_under_an_oscillation_is_still_growth():
    def fn(t):
        return 8 * GIB + 512 * MIB * math.sin(2 * math.pi * t / 300) + t * 2 * MIB
    times = tuple(float(t) for t in range(3600, 7200, 2))
    trend = process_trend(Series(times, tuple(int(fn(t)) for t in times)), device_free=40 * GIB,
                          started_at=-1000.0)
    assert trend.verdict == "growing"
    assert abs(trend.rate - 2 * MIB) < 0.2 * MIB
