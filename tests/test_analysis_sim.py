"""The analysis on the simulated machines: the leaky job is caught and explained, the others stay green.

Drives the real collector over the simulator with a fake clock, one sample a second, as the monitor does.
"""

from collections import deque

import pytest

from gputui.analysis.advice import advise
from gputui.analysis.history import History
from gputui.analysis.leaks import leak_verdict
from gputui.analysis.sites import growing_sites
from gputui.analysis.trends import TrendCache, trends
from gputui.collect import open_collector
from gputui.collect.sim.scenarios import leaky_layout


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
