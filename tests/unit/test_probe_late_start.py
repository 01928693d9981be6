"""A probe started in a job that has trained already (gputui attach, or gputui.probe.start() mid-run):
what is there is found as it is now, what needs history counts from the start, and the report says so."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")



from gputui.analysis.phases import accounts  # noqa: E402
from gputui.analysis.text import probe_history  # noqa: E402
from gputui.plain.report import render_probe  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from gputui.units import size  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import loops  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def train(job, steps: int) -> None:
    for i in range(steps):
        x, y = job.batch_at(i)
        loops.train_step(job, x.clone(), y.clone())


@pytest.fixture
def late_probe():
    """A job 20 steps in when the probe starts (as gputui attach starts it), then 10 steps more."""
    job = loops.make_job()
    train(job, 20)
    before = time.time()
    probe = runtime.start(budget=1.0, serve=False, via="attach")  # budget 1.0: every step measured
    try:
        train(job, 10)
        yield job, probe.report(), before
    finally:
        runtime.stop()


def test_what_the_job_holds_is_found_exactly_after_a_late_start(late_probe):
    job, report, _ = late_probe
    params = sum(p.nbytes for p in job.model.parameters())
    n_params = len(list(job.model.parameters()))
    cats = report.devices[0].categories
    assert cats.parameters == params == 1_597_480
    assert cats.gradients == params
    # Adam's two moments per parameter, made 20 steps before the probe came, and a 4-byte step count each.
    assert cats.optimizer_state == 2 * params + 4 * n_params
    assert job.optimizer.state[next(job.model.parameters())]["step"].item() == 30.0


def test_steps_count_from_the_start_and_the_report_says_how_it_came(late_probe):
    _, report, before = late_probe
    assert [s.step for s in report.steps] == list(range(1, 11))  # the job's steps 21-30, counted anew
    assert report.via == "attach"
    assert before <= report.started_at <= report.steps[0].ended_at


def test_the_first_measured_step_does_not_claim_what_was_there_before_the_attach(late_probe):
    _, report, _ = late_probe
    first = accounts(report.steps, attached=report.via == "attach")[0]
    # Step 1 was under way when the probe came (here: the probe met the optimizer only at its end, so
    # the step's start left out Adam's state): the account starts at the first whole step.
    assert first.step == 2 and first.lines[0] == "the first whole step after the probe attached"
    assert not any("created at this step" in line for line in first.lines)
    params = sum(p.nbytes for p in late_probe[0].model.parameters())
    assert first.lines[1] == f"started at {size(3 * params + 4 * 6)} (the model: {size(params)})"  # and Adam
    assert any(line.startswith("held when the probe attached: gradients") for line in first.lines)


def test_the_report_says_when_the_probe_attached_and_how_much_history_it_has(late_probe):
    _, report, _ = late_probe
    clock = time.strftime("%H:%M:%S", time.localtime(report.started_at))
    assert probe_history(report) == (
        f"probe attached at {clock} (gputui attach) to a running job: steps, phase peaks and activations "
        "count from its first step after that; 10 steps so far, leak verdicts fit 10 of their 64")
    text = render_probe(report, width=400)
    assert f"  {probe_history(report)}\n" in text
    narrow = render_probe(report, width=60)  # said in full, over lines
    assert "count from its first step after that; 10 steps so far," in " ".join(narrow.split())
