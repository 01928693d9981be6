"""The analysis never raises on odd input (gaps, unknowns, repeats, zeros): the monitor renders whatever it says."""

import random

import pytest

from gputui.analysis.advice import advise
from gputui.analysis.history import Series
from gputui.analysis.leaks import leak_verdict
from gputui.analysis.sites import growing_sites
from gputui.analysis.trends import process_trend
from gputui.model import (
    AllocationSite,
    AllocatorStats,
    Device,
    GpuProcess,
    MemoryCategories,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
)
from gputui.model.verdicts import LEAK_STATES, SEVERITIES, TREND_VERDICTS

MIB = 1 << 20


def maybe(rng, value, p=0.2):
    return None if rng.random() < p else value


def random_series(rng):
    n = rng.choice((0, 1, 5, 40, 200, 700))
    t, times, values = 0.0, [], []
    for _ in range(n):
        t += rng.choice((0.0, 0.5, 1.0, 1.0, 7.0))  # repeats and gaps
        times.append(t)
        values.append(maybe(rng, rng.choice((0, rng.randrange(1 << 36)))))
    return Series(tuple(times), tuple(values))


def random_report(rng):
    steps = []
    for s in range(rng.choice((0, 3, 30, 90))):
        allocated = maybe(rng, rng.randrange(1 << 34))
        steps.append(StepRecord(
            step=rng.choice((s, s, s - 1)), ended_at=1000.0 + s * rng.choice((0.0, 0.3)),
            duration=maybe(rng, rng.choice((0.0, 0.25))), device=rng.choice(("cuda:0", "cuda:1", None)),
            allocated=allocated, reserved=maybe(rng, (allocated or 0) + rng.randrange(1 << 30)),
            inactive_split=maybe(rng, rng.randrange(1 << 29)), alloc_retries=maybe(rng, rng.randrange(5)),
            peak_backward=maybe(rng, rng.randrange(1 << 35)),
            categories=maybe(rng, MemoryCategories(*(maybe(rng, rng.randrange(1 << 32)) for _ in range(5)))),
        ))
    recorded = tuple(range(rng.choice((0, 2, 8))))
    sites = tuple(
        AllocationSite(where=f"x.py:{i}", live_bytes=tuple(rng.randrange(1 << 20) for _ in range(rng.randrange(10))))
        for i in range(rng.randrange(4))
    )
    allocator = maybe(rng, AllocatorStats(allocated=rng.randrange(1 << 34), reserved=rng.randrange(1 << 34),
                                          inactive_split=maybe(rng, rng.randrange(1 << 30)),
                                          alloc_retries=maybe(rng, rng.randrange(9))))
    device = ProbeDevice("cuda:0", uuid=maybe(rng, "GPU-0"), allocator=allocator,
                         categories=maybe(rng, MemoryCategories(activations=maybe(rng, rng.randrange(1 << 32)),
                                                                optimizer_state=maybe(rng, rng.randrange(1 << 33)))))
    return ProbeReport(pid=1, taken_at=rng.choice((0.0, 2000.0)), devices=maybe(rng, (device,)) or (),
                       steps=tuple(steps), recorded_steps=recorded, sites=sites)


def test_random_input_gives_valid_verdicts():
    rng = random.Random(7)
    for _ in range(300):
        trend = process_trend(random_series(rng), device_free=maybe(rng, rng.randrange(1 << 36)),
                              device_total=maybe(rng, 1 << 36), started_at=maybe(rng, 0.0))
        assert trend.verdict in TREND_VERDICTS
        report = random_report(rng)
        verdict = leak_verdict(report, device_total=maybe(rng, 1 << 36), device_free=maybe(rng, 1 << 33))
        assert verdict.state in LEAK_STATES
        sites = growing_sites(report)
        proc = GpuProcess(pid=1, device_index=0, gpu_memory=maybe(rng, 8 << 30))
        other = GpuProcess(pid=2, device_index=0, gpu_memory=maybe(rng, 30 << 30))
        snap = Snapshot(taken_at=2000.0, devices=(Device(index=0, uuid="GPU-0", memory_total=maybe(rng, 80 << 30),
                                                         memory_used=maybe(rng, 70 << 30),
                                                         memory_free=maybe(rng, 10 << 30)),),
                        processes=(proc, other))
        advice = advise(snapshot=snap, process=maybe(rng, proc), report=maybe(rng, report), trend=trend,
                        verdict=verdict, sites=sites)
        assert [a.rank for a in advice] == list(range(1, len(advice) + 1))
        assert all(a.severity in SEVERITIES and a.title and a.detail and a.action for a in advice)


def test_zero_memory_and_flat_zero_steps():
    zeros = Series(tuple(float(t) for t in range(100)), (0,) * 100)
    assert process_trend(zeros).verdict == "steady"
    steps = tuple(StepRecord(step=s, ended_at=float(s), allocated=0, reserved=0) for s in range(30))
    assert leak_verdict(ProbeReport(pid=1, taken_at=30.0, steps=steps)).state == "clean"


def test_median_and_mean_match_the_statistics_module():
    import statistics

    from gputui.analysis.robust import mean, median
    for values in ([3], [1, 3], [5, 1, 4], [2.5, -1.0, 7.25, 0.1], [0.1] * 7 + [0.2] * 3):
        assert median(values) == statistics.median(values)
        assert median(iter(values)) == statistics.median(values)
        assert mean(values) == pytest.approx(statistics.mean(values), rel=1e-15)
    assert median([1, 2]) == 1.5 and median([4, 1, 9]) == 4
    with pytest.raises(ValueError):
        median([])
