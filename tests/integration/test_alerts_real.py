"""Alerts on real CPU PyTorch jobs: a job that keeps its losses (``total_loss += loss``) under
``gputui run`` reaches an --alert-command from ``gputui --watch`` within the leak verdict's usual time;
the clean loops of the leak corpus raise no alert at any step, as a monitor watching them would judge."""

import dataclasses
import gc
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

import leak_corpus  # noqa: E402
from alert_watch import watch_a_leaking_job  # noqa: E402

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


def test_a_job_keeping_its_losses_reaches_the_alert_command_in_time(env, tmp_path):
    run = watch_a_leaking_job(env, tmp_path, WITHIN)
    assert run.first is not None, run.watch_stderr
    pid = run.first["alert"]["pid"]  # the job's Python, which `gputui run` started
    assert (run.first["change"], run.first["alert"]["kind"]) == ("started", "leak")
    assert run.first["alert"]["title"] == f"process {pid} leaks activations"
    print(f"leak alert {run.alerted:.1f} s after the job started")
    assert run.alerted < WITHIN


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
