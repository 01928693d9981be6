"""The readings budget holds what measured steps really cost, hooks armed only when they measure."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.optim.optimizer import _global_optimizer_pre_hooks  # noqa: E402

from gputui.analysis.leaks import growth_floor  # noqa: E402
from gputui.probe import runtime, tracking  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import loops  # noqa: E402

COST = 0.01  # seconds a measured step's untimed hooks cost in the test below


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_unmeasured_steps_run_without_the_readings_hooks():
    p = runtime.start(budget=0.0, serve=False)
    try:
        job = loops.make_job()
        loops.clean(job, 6)  # the first steps learn the model's top-level module
        assert not p.tracker._armed
        assert len(job.model._forward_pre_hooks) == 0 and len(job.model._forward_hooks) == 0
        assert p.tracker._pre_handles == [] and len(p.tracker._handles) == 1  # the step counter
        p.tracker.budget.share = 1.0
        loops.clean(job, 2)
        assert p.tracker._armed and len(job.model._forward_pre_hooks) == 1
        assert len(_global_optimizer_pre_hooks) >= 1
    finally:
        runtime.stop()
    assert len(job.model._forward_pre_hooks) == 0 and not p.tracker._armed


def test_measured_steps_are_charged_what_they_cost_beyond_their_own_timing(monkeypatch):
    # Untimed work in the forward hook (as nn.Module's slow path would be) makes measured steps
    # longer; the probe charges the excess over a typical step to its budget, so it measures less.
    real = tracking.Tracker._module_pre

    def slow_module_pre(self, module, args):
        time.sleep(COST)
        return real(self, module, args)

    monkeypatch.setattr(tracking.Tracker, "_module_pre", slow_module_pre)
    p = runtime.start(budget=0.02, serve=False, auto_sites=False)
    try:
        job = loops.make_job()
        # At 2 % of ~12 ms steps, a 10 ms measured step comes about once in 60 steps after the first
        # few: run until one has (or far longer than that should take).
        for _ in range(12):
            loops.clean(job, 50)
            steps = p.report().steps
            if any(s.allocated is not None for s in steps[10:]):
                break
    finally:
        runtime.stop()
    measured = [s for s in steps[10:] if s.allocated is not None]
    assert measured and len(measured) < len(steps[10:])
    # Each measured step was charged (about) the sleep, not only its readings' few hundred us.
    assert p.tracker.charged >= 0.3 * COST * len(measured)
    assert p.tracker.charged <= 0.02 * p.tracker.elapsed + 0.5 * max(s.duration for s in steps)


def test_installing_twice_counts_each_step_once():
    p = runtime.start(budget=0.0, serve=False)
    try:
        p.tracker.install()  # already installed by start()
        loops.clean(loops.make_job(), 3)
        p.tracker.uninstall()
        p.tracker.uninstall()
        p.tracker.install()
        p.tracker.install()
        loops.clean(loops.make_job(), 2)
        steps = p.report().steps
    finally:
        runtime.stop()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5]
    assert all(s.duration is None or s.duration > 1e-4 for s in steps)


def leak_corpus():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import leak_corpus

    return leak_corpus


def test_growth_between_measured_steps_asks_for_a_measured_step_whatever_the_budget():
    # A list of tensors that grows 384 KiB a step, at the default budget: the next measured step would
    # come after dozens of steps. The first step-end reading 16 steps or more after the latest measured
    # step that shows growth past the verdict's floor makes the next step a measured one.
    p = runtime.start(serve=False, auto_sites=False)
    try:
        leak_corpus().PATTERNS["global_list"].run(70)
        report = p.report()
        asked = p.tracker.evidence_steps
    finally:
        runtime.stop()
    measured = [s.step for s in report.steps if s.categories is not None]
    base, trigger = None, None
    for s in report.steps:
        if s.categories is not None:
            base = s  # the latest measured step
        elif (s.host_allocated is not None and s.step - base.step >= 16 and s.host_allocated
              - base.host_allocated >= growth_floor("host_allocated", base.host_allocated)):
            trigger = s.step
            break
    assert trigger is not None and trigger + 1 in measured, (measured, trigger)
    assert 1 <= asked <= 3  # gaps of 16, 32, 64 steps while the growth lasts
    # (The verdict itself, at this budget, is tested in a fresh process: tests/test_leak_corpus.py.)


def test_a_flat_loop_asks_for_no_extra_measured_steps():
    p = runtime.start(serve=False, auto_sites=False)
    try:
        job = loops.make_job()
        loops.clean(job, 40)  # warm-up: the heap may grow while the allocator's caches fill
        before = p.tracker.evidence_steps
        loops.clean(job, 200)
        assert p.tracker.evidence_steps == before
    finally:
        runtime.stop()
