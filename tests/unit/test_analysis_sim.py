"""The analysis on the simulated machines: the leaky job is caught and explained, the others stay green.

Drives the real collector over the simulator with a fake clock, one sample a second, as the monitor does.
"""

from collections import deque

import pytest

from gputui.analysis.advice import advise
from gputui.analysis.history import History
from gputui.analysis.leaks import WINDOW_STEPS, leak_verdict, snapshot_leak_verdict
from gputui.analysis.process import analyse
from gputui.analysis.sites import growing_sites
from gputui.analysis.trends import TrendCache, trends
from gputui.collect import open_collector
from gputui.collect.sim import scenarios
from gputui.collect.sim.scenarios import leaky_layout
from gputui.units import span


def run(scenario, seconds, every=None):
    """Sample ``scenario`` once a second; yields (t, snapshot, trends, probe reports)."""
    now = [0.0]
    collector = open_collector(scenario, clock=lambda: now[0])
    history, cache = History(), TrendCache()
    try:
        for t in range(seconds):
            now[0] = float(t)
            snap = collector.sample()
            history.add(snap)
            judged = trends(history, snap, cache=cache)
            if every is None or t % every == 0 or t == seconds - 1:
                yield t, snap, judged, collector.probe_reports()
    finally:
        collector.close()


def test_leaky_job_is_caught_named_located_and_forecast():
    leak = leaky_layout().leak_per_step
    # the last sample (running to the end, which closes the collector)
    _, snap, judged, reports = deque(run("leaky", 150), maxlen=1).pop()
    (report,) = reports
    device = snap.devices[0]
    verdict = leak_verdict(report, device_free=device.memory_free)
    assert verdict.state == "leak" and verdict.category == "activations"
    assert verdict.allocated_per_step == pytest.approx(leak)
    assert verdict.oom_step > verdict.last_step and verdict.oom_in > 0
    sites = growing_sites(report)
    assert sites and sites[0].bytes_per_step == pytest.approx(leak)
    assert sites[0].where.startswith("train.py:")

    proc = next(p for p in snap.processes if p.pid == report.pid)
    trend = judged[(proc.pid, proc.device_index)]
    assert trend.verdict == "growing" and trend.time_to_oom is not None
    # NVML sees the leak through the reserved memory that follows it: within 10 % of the probe's rate.
    assert trend.rate == pytest.approx(leak / verdict.step_time, rel=0.1)

    advice = advise(snapshot=snap, process=proc, report=report, trend=trend, verdict=verdict, sites=sites)
    kinds = [a.kind for a in advice]
    assert kinds[:2] == ["oom-soon", "keep-graph"]
    assert sites[0].where in advice[1].detail


# How far a forecast may miss the simulator's OOM. Late: never by more than LATE (a few of the job's 0.4 s
# steps: the probe's figures date from its latest step's end, NVML's from the sample, the OOM comes inside
# a step). Early: by no more than LATE once the probe's fit has left the allocator's warm-up behind; while
# the fit still holds it (the cache grew faster then, so the rate is too high: early, never late) by no
# more than WARMING_SHARE of the time left; NVML's trend, fitted on two minutes, by no more than
# TREND_SHARE of it.
LATE = 2.0
WARMING_SHARE = 0.15
TREND_SHARE = 0.10


def test_leaky_forecasts_are_checked_against_the_simulators_own_oom():
    """The probe's and NVML's time to OOM, every 3 s of the leaky job's first run, against the second
    the simulator makes that run fail (the step whose reservation no longer fits); and the headroom
    shown beside them offers no larger batch."""
    job = next(p.job for p in scenarios.build("leaky").programs if p.probed and p.job is not None)
    lay = job.layout
    first = job.run_at(0.0)
    assert first is not None and first.oom_at is not None
    # The probe's fit covers WINDOW_STEPS steps: from then on it no longer holds the cache's warm-up.
    warm = first.start + lay.warm_until + WINDOW_STEPS * lay.step_time
    checked = {"probe warming": 0, "probe warm": 0, "nvml": 0}
    for t, snap, judged, reports in run("leaky", int(first.oom_at), every=3):
        truth = first.oom_at - t
        (report,) = reports
        verdict = snapshot_leak_verdict(report, snap)
        left = verdict.seconds_to_oom(snap.taken_at)
        if left is not None:
            early = LATE if t >= warm else WARMING_SHARE * truth
            checked["probe warm" if t >= warm else "probe warming"] += 1
            assert -early <= left - truth <= LATE, (t, left, truth)
        trend = judged[(first.pid, 0)]
        # The room the views show agrees: no larger batch for a job the forecast runs out of memory.
        proc = next(p for p in snap.processes if p.pid == first.pid)
        (room,) = analyse(snap, proc, report, trend=trend, leak=verdict).headroom
        assert room.batch_factor is None and room.withheld == (
            f"allocated grows 48.0 MiB per step (leak), out of memory in about {span(left)}"), t
        if trend.time_to_oom is not None:
            checked["nvml"] += 1
            assert -max(LATE, TREND_SHARE * truth) <= trend.time_to_oom - truth <= LATE, (t, trend.time_to_oom, truth)
    # The probe forecasts from its first verdict (t=0), NVML's trend once it has seen a minute of growth.
    assert checked == {"probe warming": 19, "probe warm": 45, "nvml": 44}


def test_leaky_job_is_flagged_within_a_few_dozen_steps():
    for _t, _snap, _judged, reports in run("leaky", 60, every=2):
        verdict = leak_verdict(reports[0])
        if verdict.state == "leak":
            assert verdict.steps_seen <= 40
            return
    pytest.fail("the leak was not flagged within 60 s")


def test_training_node_warm_up_raises_no_alarm():
    for t, _snap, judged, reports in run("training-node", 240, every=5):
        assert {tr.verdict for tr in judged.values()} <= {"unknown", "steady", "warming_up"}, t
        for report in reports:
            assert leak_verdict(report).state in ("collecting", "warming_up", "clean"), t
    assert {tr.verdict for tr in judged.values()} == {"steady"}
    assert {leak_verdict(r).state for r in reports} == {"clean"}
