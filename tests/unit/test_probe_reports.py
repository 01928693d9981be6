"""Incremental reports: a real probe in this process answers ``since_step``; the watcher merges."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputui.link import client, paths, protocol  # noqa: E402
from gputui.model import MemoryCategories, ProbeReport, StepRecord, from_jsonable, to_jsonable  # noqa: E402
from gputui.probe import desk, runtime  # noqa: E402
from gputui.probe.steps import StepEntry  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import loops  # noqa: E402


@pytest.fixture
def probe(tmp_path, monkeypatch, one_torch_thread):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    p = runtime.start(budget=1.0, max_steps=50)
    assert p.server is not None
    yield p
    runtime.stop()


def ask(probe, params=None) -> dict:
    return json.loads(protocol.ok_reply(1, probe.desk.report(params or {})))["result"]


def test_since_step_sends_only_the_newer_steps(probe):
    job = loops.make_job()
    loops.clean(job, 10)
    whole = ask(probe)
    assert "since_step" not in whole and [s["step"] for s in whole["steps"]] == list(range(1, 11))
    assert whole["probe_started_at"] == probe.started_at
    assert from_jsonable(ProbeReport, whole).steps == probe.report().steps
    loops.clean(job, 3)
    newer = ask(probe, {"since_step": 10, "started_at": probe.started_at})
    assert newer["since_step"] == 10 and [s["step"] for s in newer["steps"]] == [11, 12, 13]
    # Everything but the steps is there, as in a whole report.
    assert newer["devices"] == ask(probe)["devices"] and newer["pid"] == os.getpid()


def test_a_poller_holding_another_probes_steps_gets_a_whole_report(probe):
    loops.clean(loops.make_job(), 5)
    for params in ({"since_step": 3, "started_at": probe.started_at - 1.0},  # another probe
                   {"since_step": 3},  # no probe named
                   {"since_step": 9, "started_at": probe.started_at}):  # steps counted anew
        result = ask(probe, params)
        assert "since_step" not in result and len(result["steps"]) == 5
    for bad in (-1, "3", True, 2.5):
        with pytest.raises(ValueError, match="since_step must be a non-negative integer"):
            probe.desk.report({"since_step": bad, "started_at": probe.started_at})


def test_each_step_is_encoded_once(probe, monkeypatch):
    loops.clean(loops.make_job(), 8)
    ask(probe)
    encoded = []
    real = desk.dumps
    monkeypatch.setattr(desk, "dumps", lambda value: encoded.append(value) or real(value))
    ask(probe)
    assert not any("step" in v and "ended_at" in v for v in encoded if isinstance(v, dict))


def test_the_watcher_merges_new_steps_and_keeps_a_bounded_history(probe, monkeypatch):
    job = loops.make_job()
    loops.clean(job, 12)
    watcher = client.ProbeWatcher(timeout=5.0, keep_steps=30, keep_measured=0)
    asked = []
    real_send = client.ProbeLink.send

    def send(link, op, params=None):
        asked.append(params)
        return real_send(link, op, params)

    monkeypatch.setattr(client.ProbeLink, "send", send)
    try:
        first = watcher.poll()[os.getpid()]
        assert [s.step for s in first.steps] == list(range(1, 13))
        loops.clean(job, 25)
        merged = watcher.poll()[os.getpid()]
        assert asked == [None, {"since_step": 11, "started_at": probe.started_at}]  # one step back
        # 37 steps seen, the latest 30 kept, and the first two measured ones (the job's start); the
        # probe itself keeps 50.
        assert [s.step for s in merged.steps] == [1, 2] + list(range(8, 38))
        assert merged.steps[2:] == probe.report().steps[-30:]
        assert merged.steps[:2] == probe.report().steps[:2]
        assert merged.devices == probe.report().devices
        assert watcher.poll()[os.getpid()].steps == merged.steps  # nothing new: nothing lost
    finally:
        watcher.close()


def test_a_measured_step_revised_a_step_later_reaches_the_watcher(probe):
    # The probe revises its latest measured record at the next step's end (what that step kept for a
    # whole step): a watcher that got the first version gets the revised one at its next poll.
    job = loops.make_job()
    loops.clean(job, 4)
    watcher = client.ProbeWatcher(timeout=5.0)
    try:
        watcher.poll()
        latest = probe.tracker.board.steps[-1]
        revised = dataclasses.replace(latest.record, activations_kept=12345)
        probe.tracker.board.revise_latest(latest, latest._replace(record=revised))
        held = watcher.poll()[os.getpid()].steps
        assert held[-1] == revised and [s.step for s in held] == [1, 2, 3, 4]
        assert probe.report().steps[-1] == revised
    finally:
        watcher.close()


def test_one_shot_reports_stay_whole(probe):
    loops.clean(loops.make_job(), 6)
    report = client.fetch_report(os.getpid(), timeout=5.0)
    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("entry", [
    (5, 1767603600.123456, 0.0051234, "cpu", None, None, None),
    (6, 1.0, None, None, None, None, None),
    (7, 2.5, float("inf"), "cuda:0", None, None, None),  # not JSON: null, as the generic encoder makes it
    (8, 3.0, float("nan"), "cpu", None, 123456789, None),
    (9, 1e-07, 12.5, "cuda:1", 1 << 40, None, None),
    (10, 4.0, 0.01, "cpu", None, None, 987654321),
])
def test_unmeasured_steps_are_encoded_as_the_generic_codec_would(entry):
    entry = StepEntry(*entry)
    assert desk._step_json(entry) == protocol.dumps(to_jsonable(entry.to_record()))
    measured = StepRecord(*entry[:2], allocated=5, categories=MemoryCategories(1, 2, 3, 4, None))
    assert desk._step_json(StepEntry.measured(measured)) == protocol.dumps(to_jsonable(measured))


def test_measured_steps_outlive_the_window_of_recent_steps(tmp_path, monkeypatch):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    p = runtime.start(budget=1.0, max_steps=20)
    try:
        job = loops.make_job()
        loops.clean(job, 10)
        p.tracker.budget.share = 0.0
        loops.clean(job, 25)  # step 11 measured still (decided as step 10 ended), 12-35 not
        steps = p.report().steps  # the window of 20 holds 16-35; 1-11 measured, kept in front
        assert [s.step for s in steps] == list(range(1, 12)) + list(range(16, 36))
        assert all(s.allocated is not None for s in steps[:11])
        assert all(s.allocated is None for s in steps[11:])
        watcher = client.ProbeWatcher(timeout=5.0, keep_steps=12, keep_measured=4)
        try:
            held = watcher.poll()[os.getpid()].steps
        finally:
            watcher.close()
        assert [s.step for s in held] == [1, 2] + [8, 9, 10, 11] + list(range(24, 36))
    finally:
        runtime.stop()
