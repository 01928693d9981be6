"""Alerts on real CPU PyTorch jobs: a job that keeps its losses (``total_loss += loss``) under
``gputui run`` reaches an --alert-command from ``gputui --watch`` within the leak verdict's usual time;
the clean loops of the leak corpus raise no alert at any step, as a monitor watching them would judge."""

import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import leak_corpus  # noqa: E402

import gputui.probe  # noqa: E402
from gputui.alerts.rules import AlertState, evaluate  # noqa: E402
from gputui.model import Snapshot  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from gputui.sample.judge import Judge  # noqa: E402

# The leak corpus calls a leak within 50 steps; this job's steps take milliseconds, and the monitor
# samples every second: the alert must come well within a minute of the job's start.
WITHIN = 60.0
CLEAN = sorted(k for k, p in leak_corpus.PATTERNS.items() if not p.leaks)


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"),
                 OMP_NUM_THREADS="1")
    return clean


def stop(child, group: bool = False):
    """Ctrl-C, then SIGKILL after 20 s; ``group``: to the child's whole process group (a job started in
    a session of its own), so that the leaking job under `gputui run` never outlives the test, whatever
    stops it (a loaded machine once kept it alive for 15 minutes, growing to 23 GB)."""
    def send(signum):
        try:
            os.killpg(child.pid, signum) if group else child.send_signal(signum)
        except ProcessLookupError:
            pass

    if child.poll() is None or group:
        send(signal.SIGINT)
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        send(signal.SIGKILL)
        child.wait(timeout=10)


def test_a_job_keeping_its_losses_reaches_the_alert_command_in_time(env, tmp_path):
    got = tmp_path / "got.ndjson"
    receiver = tmp_path / "receiver.sh"
    receiver.write_text(f"#!/bin/sh\n{{ cat; echo; }} >> {got}\n")
    receiver.chmod(0o755)
    began = time.monotonic()
    job = subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable,
                            str(ROOT / "examples" / "loops.py"), "total_loss", "--steps", "1000000"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    watch = None
    try:
        # The monitor starts once the job's probe can be found: without a driver, it watches probes.
        while not any(Path(env["GPUTUI_PROBE_DIR"]).iterdir()) and time.monotonic() - began < WITHIN:
            time.sleep(0.2)
        watch = subprocess.Popen([sys.executable, "-m", "gputui", "--watch", "1", "--alert-command", str(receiver)],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while not got.exists() and time.monotonic() - began < WITHIN:
            time.sleep(0.2)
        took = time.monotonic() - began
    finally:
        if watch is not None:
            stop(watch)
        stop(job, group=True)
    assert got.exists(), watch.stderr.read() if watch else ""
    first = json.loads(got.read_text().splitlines()[0])["events"][0]
    pid = first["alert"]["pid"]  # the job's Python, which `gputui run` started
    assert (first["change"], first["alert"]["kind"]) == ("started", "leak")
    assert first["alert"]["title"] == f"process {pid} leaks activations"
    print(f"leak alert {took:.1f} s after the job started")
    assert took < WITHIN


@pytest.fixture
def every_step_checked(monkeypatch):
    monkeypatch.setattr(runtime, "LEAK_CHECK_SHARE", 1.0)


def alerts_over_steps(name):
    """Every alert event a monitor sampling after each step of pattern ``name`` would raise."""
    gc.collect()
    probe = gputui.probe.start(serve=False, budget=1.0)
    try:
        kept = {**leak_corpus.PATTERNS, **leak_corpus.SLOW_PATTERNS}[name].run(80)
        report = probe.report()
    finally:
        gputui.probe.stop()
    del kept
    assert len(report.steps) >= 60
    judge, state, raised = Judge(), AlertState(), []
    for last in range(1, len(report.steps) + 1):
        seen = dataclasses.replace(report, steps=report.steps[:last])
        sample = judge(Snapshot(taken_at=report.taken_at + last, probes=(seen,)))
        state, events = evaluate(state, sample.snapshot, sample.judgements)
        raised += [(last, e.change, e.alert.kind, e.alert.title) for e in events]
    return raised


@pytest.mark.usefixtures("one_torch_thread", "every_step_checked")
@pytest.mark.parametrize("name", CLEAN)
def test_a_clean_loop_of_the_leak_corpus_raises_no_alert(name):
    assert alerts_over_steps(name) == []


@pytest.mark.usefixtures("one_torch_thread", "every_step_checked")
def test_the_same_watch_of_a_leaking_loop_raises_its_leak_once():
    raised = alerts_over_steps("running_total")
    assert [(change, kind) for _, change, kind, _ in raised] == [("started", "leak")]
    assert raised[0][0] <= 50  # the corpus's bound on steps to a verdict
