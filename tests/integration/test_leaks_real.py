"""Leak verdicts on real CPU PyTorch loops (examples/loops.py) run under the in-process probe.

The classic leaks must be called leaks in the right category, and once confirmed the probe records
allocation sites by itself and names the line; the loops that only look like leaks (warm-up, a cache
that fills then stays, the garbage collector's sawtooth) must stay clean and record nothing.
"""

import dataclasses
import gc
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if not (EXAMPLES / "loops.py").exists():
    pytest.skip("examples/loops.py is not there", allow_module_level=True)
sys.path.insert(0, str(EXAMPLES))

import loops  # noqa: E402
from clocks import JobClock  # noqa: E402

import gputui.probe  # noqa: E402
from gputui.analysis.leaks import leak_verdict  # noqa: E402
from gputui.analysis.sites import growing_sites  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from gputui.probe.host import MallocInUse  # noqa: E402

STEPS = 80
KIB = 1024


@pytest.fixture(autouse=True)
def check_every_16_steps(monkeypatch):
    # The probe's own leak check runs as often as its cost allows, which on a loaded machine may be
    # rarely: here it runs every 16 measured steps, so what it decides does not depend on timing.
    monkeypatch.setattr(runtime, "LEAK_CHECK_SHARE", 1.0)


def report_of(kind: str, steps: int = STEPS):
    # A reading every step (budget 1.0) keeps the test deterministic; the default budget samples.
    # The verdict reads the whole process's C heap: garbage that earlier tests left, freed by the
    # collector while this loop runs, would take its share off the growth.
    gc.collect()
    probe = gputui.probe.start(serve=False, budget=1.0)
    try:
        kept = loops.run(kind, steps)
        report = probe.report()
    finally:
        gputui.probe.stop()
    del kept
    return report


def verdict_of(kind: str):
    return leak_verdict(report_of(kind))


def line_of(text: str) -> int:
    lines = Path(loops.__file__).read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if text in line]
    return number


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["total_loss", "outputs"])
def test_kept_graphs_are_an_activation_leak(kind):
    report = report_of(kind)
    v = leak_verdict(report)
    assert v.state == "leak" and v.category == "activations"
    assert v.steps_seen == STEPS and v.allocated_per_step > 0
    activations = next(g for g in v.growth if g.name == "activations")
    # each step keeps one evaluation graph: 256 KiB saved for backward; the heap in use grows by that
    # and autograd's own few KiB
    assert activations.bytes_per_step == 256 * KIB
    assert activations.bytes_per_step <= v.allocated_per_step < 1.1 * activations.bytes_per_step
    # The sites recorded once the leak was confirmed name the line whose graph is kept.
    line, function = KEPT_GRAPH_LINES[kind]
    top = growing_sites(report)[0]
    assert top.where == f"{loops.__file__}:{line_of(line)} in {function}"
    assert top.bytes_per_step >= 256 * KIB  # the graph's saved activations (and the output itself)


KEPT_GRAPH_LINES = {
    "total_loss": ("val_loss = nn.functional.cross_entropy(job.model(x), y)", "leak_total_loss"),
    "outputs": ("out = job.model(job.batch_at(step + 1)[0])", "leak_outputs"),
}


def test_growing_dict_of_tensors_is_a_leak_of_other_tensors():
    v = verdict_of("cache")
    assert v.state == "leak" and v.category == "other", v.reason
    growth = {g.name: g.bytes_per_step for g in v.growth}
    assert growth["parameters"] == growth["gradients"] == growth["optimizer_state"] == 0.0
    assert growth["activations"] == 0.0
    assert v.growth[0].name == "other" and v.growth[0].bytes_per_step == v.host_other_per_step
    if MallocInUse().available:
        # No allocator on CPU: the C allocator's bytes in use grow by the 64x256 float32 tensor the
        # loop keeps per step (64 KiB, plus malloc's few bytes of overhead).
        assert 64 * KIB <= v.host_other_per_step == v.allocated_per_step < 66 * KIB
        assert v.reason.startswith("host memory in use grows ")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_confirmed_leak_records_its_sites_by_itself():
    report = report_of("cache", 100)
    v = leak_verdict(report)
    assert v.state == "leak" and v.category == "other"
    # The probe confirmed the leak on its own, recorded a bounded window, and switched it off again.
    assert len(report.recorded_steps) == runtime.AUTO_SITES_STEPS and not report.recording
    top = growing_sites(report)[0]
    assert top.where == f"{loops.__file__}:{line_of('cache[step] = x * 1.0')} in leak_cache"
    assert top.bytes_per_step == 64 * KIB and top.growth == (runtime.AUTO_SITES_STEPS - 1) * 64 * KIB


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["clean", "warmup", "bounded_cache", "sawtooth"])
def test_clean_loops_raise_no_alarm(kind):
    report = report_of(kind, 100)
    v = leak_verdict(report)
    assert v.state == "clean", v.reason
    assert v.oom_step is None
    assert report.recorded_steps == () and not report.recording  # no sites recorded for nothing


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_gc_sawtooth_is_seen_as_released():
    v = verdict_of("sawtooth")
    # 64 steps judged, the collector running every 8th: 7 drops inside the window.
    assert v.reason.endswith("released 7 times (garbage collection)")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_at_the_default_budget_a_few_measured_steps_give_the_exact_activation_rate(monkeypatch):
    # Saved tensors are seen on measured steps only, a few in a hundred at the default budget: the
    # rate comes from what each of those steps kept (activations_kept), not from the live total,
    # which would count only the measured steps' graphs and come out many times too low. On a clock
    # the test sets (5 ms steps, 50 us readings), so the steps measured do not follow the machine's load.
    with JobClock().charging(monkeypatch) as clock:
        probe = gputui.probe.start(serve=False, clock=clock)
        try:
            kept = loops.run("outputs", 400)
            report = probe.report()
            measured = probe.board.records()
        finally:
            gputui.probe.stop()
    del kept
    measured = [s for s in measured if s.categories is not None]
    assert 3 <= len(measured) < 400 / 2  # sampled, not every step
    v = leak_verdict(report)
    assert v.state == "leak" and v.category == "activations"
    activations = next(g for g in v.growth if g.name == "activations")
    assert activations.bytes_per_step == 256 * KIB  # exact: within 10 % is the promise


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_leak_stays_called_between_the_few_steps_a_tight_budget_measures(monkeypatch):
    # Readings of 2 ms against 5 ms steps: the budget measures almost no step, and growth asks for one
    # as it doubles (steps 18, 51, 116, 245, 502). Between them the latest measured step is older than
    # the judged window; the figure grew steadily since, so it still says what grows: once called a
    # leak in activations, the verdict stays that at every later step.
    with JobClock(reading=0.002).charging(monkeypatch) as clock:
        probe = gputui.probe.start(serve=False, clock=clock)
        try:
            kept = loops.run("outputs", 600)
            report = probe.report()
        finally:
            gputui.probe.stop()
    del kept
    measured = [s.step for s in report.steps if s.categories is not None]
    assert len(measured) <= 8 and max(b - a for a, b in zip(measured, measured[1:])) > 2 * 64, measured
    verdicts = [(report.steps[last - 1].step, v.state, v.category) for last in range(1, len(report.steps) + 1)
                for v in [leak_verdict(dataclasses.replace(report, steps=report.steps[:last]))]]
    called = next(i for i, (_, state, _) in enumerate(verdicts) if state == "leak")
    assert verdicts[called][0] <= 120, verdicts[called]
    assert [v for v in verdicts[called:] if v[1:] != ("leak", "activations")] == []
    v = leak_verdict(report)
    assert next(g for g in v.growth if g.name == "activations").bytes_per_step == 256 * KIB
