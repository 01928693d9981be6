"""The alert rules (gputui/alerts/rules.py) on the simulator's scenarios, sampled with an injected clock:
each kind starts once when its evidence appears and ends once when it goes, with the evidence in words."""

import dataclasses

import pytest

from gputui.alerts.rules import AlertState, Thresholds, evaluate
from gputui.model.judgement import Judgements
from gputui.options import Options
from gputui.sample.pipeline import open_pipeline


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


DEFAULTS = Thresholds()


def events_of(scenario, until, every, thresholds=DEFAULTS):
    """(time, change, kind, key, title, detail) of every alert event over the scenario's first seconds."""
    clock, state, seen = Clock(), AlertState(), []
    with open_pipeline(Options(mode="once", demo=scenario), clock=clock, pause=lambda s: None,
                       environ={}) as pipeline:
        for i in range(int(until / every) + 1):
            clock.now = i * every
            sample = pipeline.sample()
            state, events = evaluate(state, sample.snapshot, sample.judgements, thresholds)
            seen += [(clock.now, e.change, e.alert.kind, e.alert.key, e.alert.title, e.alert.detail) for e in events]
    return seen


def test_a_leak_and_its_oom_start_once_and_end_when_the_job_dies_of_it():
    seen = events_of("leaky", 200, 5)
    assert [(t, change, kind) for t, change, kind, *_ in seen] == [
        (0, "started", "leak"), (0, "started", "oom_soon"),
        (195, "ended", "leak"), (195, "ended", "oom_soon"), (195, "started", "oom_ended")]
    leak, oom_soon, ended = seen[0], seen[1], seen[4]
    assert leak[4:] == ("process 51200 leaks activations", "leak: 48.0 MiB a step, kept at train.py:131 in main")
    assert oom_soon[4] == "process 51200 runs out of GPU memory in 3 min"
    assert ended[4] == "process 51200 ended by an out-of-memory error"
    assert ended[5].startswith("CUDA out of memory. Tried to allocate 820.00 MiB.")


def test_no_oom_alert_when_the_oom_is_further_off_than_the_threshold():
    kinds = {kind for _, _, kind, *_ in events_of("leaky", 60, 5, Thresholds(oom_within=60.0))}
    assert kinds == {"leak"}


def test_a_lost_gpu_alerts_and_kinds_not_asked_for_do_not():
    assert [e[:5] for e in events_of("faults", 30, 10)] == [(0, "started", "gpu_lost", "gpu 1", "GPU 1 is lost")]
    assert events_of("faults", 30, 10, Thresholds(kinds=frozenset({"leak"}))) == []


def test_job_findings_alert_a_straggler_and_an_imbalance():
    stragglers = [e for e in events_of("torchrun", 60, 10) if e[2] == "straggler"]
    assert [e[:5] for e in stragglers] == [(30, "started", "straggler", "job launcher 70100 pid 70125",
                                            "rank 13 of pretrain.py (torchrun) lags the others")]
    assert stragglers[0][5] == "step time 0.71 against 0.48"
    imbalance = [e for e in events_of("dataparallel", 0, 10) if e[2] == "imbalance"]
    assert imbalance[0][4] == "rank ? of train_dp.py (one process, 4 GPUs) holds 2.2x the others' memory"


def test_clean_machines_raise_nothing():
    for scenario in ("workstation", "training-node", "mig"):
        assert events_of(scenario, 300, 10) == [], scenario


def machine_at(scenario, at):
    clock = Clock()
    clock.now = at
    with open_pipeline(Options(mode="once", demo=scenario), clock=clock, pause=lambda s: None,
                       environ={}) as pipeline:
        return pipeline.sample().snapshot


def run_through(snapshots, thresholds):
    state, seen = AlertState(), []
    for snapshot in snapshots:
        state, events = evaluate(state, snapshot, Judgements(), thresholds)
        seen += [(snapshot.taken_at, e.change, e.alert.kind, e.alert.title, e.alert.detail) for e in events]
    return seen


def with_device(snapshot, at, index=0, keep_processes=True, **changes):
    devices = tuple(dataclasses.replace(d, **changes) if d.index == index else d for d in snapshot.devices)
    processes = snapshot.processes if keep_processes else tuple(
        p for p in snapshot.processes if p.device_index != index)
    return dataclasses.replace(snapshot, taken_at=at, devices=devices, processes=processes)


def test_new_ecc_errors_alert_and_old_ones_do_not():
    base = machine_at("faults", 0)  # GPU 0 has had 17 corrected errors since before gputui looked
    assert base.devices[0].ecc_corrected == 17
    seen = run_through([with_device(base, 0), with_device(base, 5, ecc_corrected=19),
                        with_device(base, 10, ecc_corrected=19)], Thresholds(kinds=frozenset({"gpu_errors"})))
    assert seen == [(5, "started", "gpu_errors", "GPU 0 has 2 new ECC errors", "corrected 19, uncorrected 0")]


def test_memory_held_while_idle_alerts_after_the_threshold_and_ends_when_work_resumes():
    base = machine_at("workstation", 0)
    held = [p for p in base.processes if p.device_index == 0]
    assert held  # someone holds memory there
    idle = [with_device(base, t, gpu_util=0) for t in (0, 30, 59, 60, 90)]
    seen = run_through([*idle, with_device(base, 95, gpu_util=40)],
                       Thresholds(idle_after=60.0, kinds=frozenset({"gpu_idle"})))
    assert [s[:4] for s in seen] == [(60, "started", "gpu_idle", "GPU 0 holds memory while idle"),
                                     (95, "ended", "gpu_idle", "GPU 0 holds memory while idle")]
    assert seen[0][4].endswith("idle for 60 s")


def test_a_gpu_becoming_free_alerts_once_it_has_stayed_free():
    base = machine_at("workstation", 0)
    samples = [with_device(base, 0), *(with_device(base, t, keep_processes=False) for t in (10, 40, 70)),
               with_device(base, 80)]
    seen = run_through(samples, Thresholds(free_after=30.0, kinds=frozenset({"gpu_free"})))
    assert [s[:4] for s in seen] == [(40, "started", "gpu_free", "GPU 0 is free"),
                                     (80, "ended", "gpu_free", "GPU 0 is free")]
    # A GPU that was free from the first look never "becomes" free.
    assert run_through(samples[1:4], Thresholds(free_after=30.0, kinds=frozenset({"gpu_free"}))) == []


def test_an_alert_quotes_the_judgement_the_json_document_carries_for_the_same_sample():
    from gputui.plain.document import snapshot_document

    clock = Clock()
    clock.now = 120.0
    with open_pipeline(Options(mode="once", demo="leaky"), clock=clock, pause=lambda s: None,
                       environ={}) as pipeline:
        sample = pipeline.sample()
    _, events = evaluate(AlertState(), sample.snapshot, sample.judgements)
    alerts = {e.alert.kind: e.alert for e in events}
    document = snapshot_document(sample.snapshot, sample.judgements)
    (judged,) = [p for p in document["judgements"]["processes"] if p["pid"] == 51200]
    leak = judged["leak"]
    assert alerts["leak"].title == f"process 51200 leaks {leak['category']}"
    assert alerts["oom_soon"].seconds_to_oom == pytest.approx(leak["oom_at"] - sample.snapshot.taken_at)


def test_only_a_leaking_or_growing_process_is_looked_at_and_each_alerts_as_ever():
    # A quiet process (no leak, no growing trend) is passed over at once (issue 46: 64 of them each sample);
    # a growing NVML trend alone, without a probe, still says when it runs out, and a leak alone still alerts.
    from gputui.model import Snapshot
    from gputui.model.judgement import DeviceTrend, ProcessJudgement
    from gputui.model.verdicts import LEAK_GROWING, TREND_GROWING, TREND_STEADY, LeakVerdict, ProcessTrend

    growing = ProcessJudgement(pid=7, started_at=1.0, trends=(
        DeviceTrend(0, ProcessTrend(TREND_STEADY)), DeviceTrend(1, ProcessTrend(TREND_GROWING, time_to_oom=90.0))))
    quiet = ProcessJudgement(pid=8, started_at=2.0, trends=(DeviceTrend(0, ProcessTrend(TREND_STEADY)),))
    leaking = ProcessJudgement(pid=9, started_at=3.0, leak=LeakVerdict(sorted(LEAK_GROWING)[0]))
    _, events = evaluate(AlertState(), Snapshot(taken_at=100.0), Judgements(processes=(growing, quiet, leaking)))
    assert [(e.alert.kind, e.alert.key) for e in events] == [("oom_soon", "pid 7@1.0"), ("leak", "pid 9@3.0")]
