"""The sampling pipeline (gputui/sample/): one simulated machine through every mode is judged alike, and
every JSON document carries the judgement the live monitor shows: the leaky demo's job keeps each
step's activations (48 MiB a step) and its advice says its autograd graph is kept alive."""

import dataclasses
import json
import types

import pytest
from record_helpers import crafted
from ui_data import T0

import gputui.collect
from gputui.collect import open_collector
from gputui.link import oom_file
from gputui.model import HOST_LIVE, HostView, to_jsonable
from gputui.model.judgement import Judgements
from gputui.model.waste import Waste, WasteRules
from gputui.options import Options, RecordOptions, ReplayOptions
from gputui.plain import modes, oom, probes
from gputui.plain.document import dumps, hosts_document
from gputui.record import run
from gputui.sample.pipeline import open_pipeline
from gputui.serve.sampling import Sampling, document
from gputui.ui.sources.sampler import Sampler

MIB = 1 << 20
LEAKY = 51200  # the leaky demo's probed job
AT = 150.0  # seconds into the scenario: the leak is well under way, before its OOM
SAMPLES, EVERY = 14, 5.0  # a history for the memory trends: 65 s, from 90 s in
FIRST = 90.0


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def plain_judgements():
    """``gputui --demo leaky --watch``'s pipeline, its last sample's judgements."""
    clock = Clock()
    with open_pipeline(Options(mode="once", demo="leaky"), clock=clock, pause=lambda s: None,
                       environ={}) as pipeline:
        for i in range(SAMPLES):
            clock.now = FIRST + i * EVERY
            sample = pipeline.sample()
    return sample.judgements


def serve_judgements():
    """The exporter's sampling of the same machine."""
    clock = Clock()
    sampling = Sampling(open_pipeline(Options(mode="serve", demo="leaky"), lasting=True, clock=clock,
                                      pause=lambda s: None, environ={}))
    try:
        for i in range(SAMPLES):
            clock.now = FIRST + i * EVERY
            sample = sampling.take()
    finally:
        sampling.stop()
    return sample.judgements


def ui_judgements():
    """The live monitor's sampler (the worker thread's two calls) on the same machine."""
    clock = Clock()
    sampler = Sampler(open_collector("leaky", clock=clock, environ={}), watch_probes=False)
    try:
        for i in range(SAMPLES):
            clock.now = FIRST + i * EVERY
            judged = sampler.judge(sampler.sample())
    finally:
        sampler.close()
    return judged.judgements


def assert_the_leak_is_judged(judgement):
    leak = judgement["leak"] if isinstance(judgement, dict) else to_jsonable(judgement.leak)
    assert (leak["state"], leak["category"], leak["allocated_per_step"]) == ("leak", "activations", 48 * MIB)
    advice = judgement["advice"] if isinstance(judgement, dict) else to_jsonable(judgement.advice)
    titles = [a["title"] for a in advice]
    assert "Each step's autograd graph is kept alive" in titles
    assert all(a["detail"] for a in advice)  # each with its evidence


def test_every_mode_judges_the_same_machine_alike():
    plain, serve, ui = plain_judgements(), serve_judgements(), ui_judgements()
    assert plain == serve
    # The live monitor takes no CPU warm-up sample, so its first sample has the driver's per-process SM figures
    # that the plain modes' warm-up read already took (the fake clock stands still through it): the same
    # judgements but for the owners' mean SM utilisation, which that one sample moves, and so where it came
    # from (the plain modes' stands in the GPU's, with no per-process figure left to read).
    assert dataclasses.replace(plain, waste=None) == dataclasses.replace(ui, waste=None)
    assert plain.waste is not None and ui.waste is not None
    assert [dataclasses.replace(o, sm_util=None, sm_source=None) for o in plain.waste.owners] == \
        [dataclasses.replace(o, sm_util=None, sm_source=None) for o in ui.waste.owners]
    assert [o.sm_util for o in plain.waste.owners] == pytest.approx([o.sm_util for o in ui.waste.owners], abs=1)
    judged = plain.of(LEAKY)
    assert_the_leak_is_judged(judged)
    (on_gpu,) = judged.trends
    assert (on_gpu.device, on_gpu.trend.verdict, on_gpu.trend.samples) == (0, "growing", SAMPLES)
    assert on_gpu.trend.time_to_oom is not None and on_gpu.trend.time_to_oom > 0


# ------------------------------------------------------------------------------- the documents

@pytest.fixture
def leaky_at(monkeypatch):
    """The demo on a clock stopped ``AT`` seconds in, for the modes that open their own collector."""
    clock = Clock(AT)
    opened = gputui.collect.open_collector

    def at_the_moment(demo=None, **kw):
        return opened(demo, **{**kw, "clock": clock, "environ": {}})

    monkeypatch.setattr(gputui.collect, "open_collector", at_the_moment)
    monkeypatch.setenv("COLUMNS", "100")
    return clock


def leaky_judgement(document_judgements):
    return next(p for p in document_judgements["processes"] if p["pid"] == LEAKY)


def test_json_carries_the_judgements(leaky_at, capsys):
    assert modes.json(Options(mode="json", demo="leaky")) == 0
    assert_the_leak_is_judged(leaky_judgement(json.loads(capsys.readouterr().out)["judgements"]))


def test_watch_json_carries_the_judgements(leaky_at, monkeypatch, capsys):
    def stop(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(modes, "time", types.SimpleNamespace(monotonic=lambda: 0.0, sleep=stop))
    assert modes.watch(Options(mode="json", demo="leaky", json=True, watch=2.0)) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert_the_leak_is_judged(leaky_judgement(json.loads(line)["judgements"]))


def test_probe_json_carries_the_judgement(leaky_at, capsys):
    assert probes.probe(Options(mode="probe", demo="leaky", pid=LEAKY, json=True)) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["judgement"]["pid"] == LEAKY
    assert_the_leak_is_judged(found["judgement"])


def test_probe_text_and_json_say_the_same(leaky_at, capsys):
    probes.probe(Options(mode="probe", demo="leaky", pid=LEAKY, json=True))
    advice = json.loads(capsys.readouterr().out)["judgement"]["advice"]
    probes.probe(Options(mode="probe", demo="leaky", pid=LEAKY))
    text = capsys.readouterr().out
    assert f"advice 1: {advice[0]['title']}" in text and f"advice 2: {advice[1]['title']}" in text


def test_oom_json_carries_the_judgement(leaky_at, tmp_path, capsys):
    collector = gputui.collect.open_collector("leaky")
    try:
        report = next(r for r in collector.probe_reports() if r.pid == LEAKY)
    finally:
        collector.close()
    path = tmp_path / "oom.json"
    path.write_text(json.dumps({"schema": oom_file.SCHEMA, "version": oom_file.VERSION, "report": to_jsonable(report)}))
    assert oom.oom(Options(mode="oom", json=True, file=str(path))) == 0
    found = json.loads(capsys.readouterr().out)["judgement"]
    # No GPUs in the file: judged from the steps alone, as `gputui oom` prints it
    assert found["leak"]["state"] == "leak" and found["leak"]["allocated_per_step"] == 48 * MIB


def test_serve_snapshot_carries_the_judgements():
    clock = Clock(AT)
    sampling = Sampling(open_pipeline(Options(mode="serve", demo="leaky"), lasting=True, clock=clock,
                                      pause=lambda s: None, environ={}))
    try:
        sample = sampling.take()
    finally:
        sampling.stop()
    assert_the_leak_is_judged(leaky_judgement(json.loads(document(sample))["judgements"]))


def test_hosts_json_carries_each_hosts_judgements():
    sample = open_pipeline(Options(mode="json", demo="leaky"), clock=Clock(AT), pause=lambda s: None,
                           environ={}).sample()
    found = json.loads(dumps(hosts_document([HostView("node1", HOST_LIVE, None, 0.5, sample.snapshot,
                                                       sample.judgements)])))
    assert_the_leak_is_judged(leaky_judgement(found["hosts"][0]["document"]["judgements"]))


def test_a_recording_carries_the_judgements_and_replays_them(tmp_path, capsys):
    now = [T0]

    def pause(seconds):
        now[0] += seconds

    path = tmp_path / "leaky.rec"
    options = Options(mode="record", demo="leaky", interval=50.0, record=RecordOptions(file=str(path), duration=AT))
    assert run.record(options, clock=lambda: now[0], pause=pause, quiet=True) == 0
    assert run.print_at(Options(mode="replay", json=True, replay=ReplayOptions(file=str(path)))) == 0
    out = capsys.readouterr()
    assert_the_leak_is_judged(leaky_judgement(json.loads(out.out)["judgements"]))
    assert "judged now" not in out.err


def test_an_older_recording_is_judged_at_replay_and_says_so(tmp_path, capsys):
    sample = open_pipeline(Options(mode="json", demo="leaky"), clock=Clock(AT), pause=lambda s: None,
                           environ={}).sample()
    old = {"schema": "gputui.snapshot", "version": 1, "gputui": "0.0.9", "snapshot": to_jsonable(sample.snapshot),
           "breakdowns": []}  # written before documents carried judgements
    leaks = {str(pid): to_jsonable(v) for pid, v in sample.leaks.items()}
    path = crafted(tmp_path / "old.rec", {"document": old, "leaks": leaks})
    assert run.print_at(Options(mode="replay", json=True, replay=ReplayOptions(file=str(path)))) == 0
    out = capsys.readouterr()
    assert out.err.splitlines()[-1] == ("gputui: a recording from before samples carried their judgements: "
                                        "judged now from its leak verdicts, without memory trends")
    assert_the_leak_is_judged(leaky_judgement(json.loads(out.out)["judgements"]))
    assert run.print_at(Options(mode="replay", replay=ReplayOptions(file=str(path)))) == 0
    assert "advice 2: Each step's autograd graph is kept alive" in capsys.readouterr().out


def test_a_judgement_that_fails_is_a_problem_not_a_failed_sample(monkeypatch):
    import gputui.analysis.jobs

    def broken(*args, **kw):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(gputui.analysis.jobs, "analyse_job", broken)
    sample = open_pipeline(Options(mode="json", demo="torchrun"), clock=Clock(90.0), pause=lambda s: None,
                           environ={}).sample()
    # who holds the GPUs is judged apart, and still said
    assert sample.judgements == Judgements(waste=sample.judgements.waste)
    assert sample.judgements.waste == Waste(WasteRules())
    assert sample.snapshot.problems[-1] == "analysis failed: ZeroDivisionError: division by zero"


def test_the_live_monitors_pid_filter_leaves_out_other_processes_probes_as_once_does():
    """--pid 52300: the leaky job's probe report goes with its process, in the live monitor as in --once
    (the monitor's own sampler used to keep every report whatever the filter)."""
    clock = Clock(AT)
    sampler = Sampler(open_collector("leaky", clock=clock, environ={}), pids=(52300,), watch_probes=False)
    try:
        live = sampler.sample()
    finally:
        sampler.close()
    once = open_pipeline(Options(mode="once", demo="leaky", pids=(52300,)), clock=Clock(AT),
                         pause=lambda s: None, environ={}).sample().snapshot
    assert [p.pid for p in live.processes] == [p.pid for p in once.processes] == [52300]
    assert live.probes == once.probes == ()
