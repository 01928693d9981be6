"""What the probe cannot see in a CPU job is shown as such: real CPU loops under the in-process probe.

Host memory beyond the tracked tensors that grows (a running total without ``.item()``, a list a tensor
is appended to each step) is the breakdown's "untracked growth", the leak verdict's
``untracked_growth``, and advice ranks it by its size: never a smaller known part ahead of it.
"""

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputui.analysis.advice import advise  # noqa: E402
from gputui.analysis.breakdown import breakdowns  # noqa: E402
from gputui.analysis.leaks import leak_verdict  # noqa: E402
from gputui.model import ProbeReport, Snapshot, from_jsonable  # noqa: E402
from gputui.model.codec import parse_json  # noqa: E402
from gputui.probe.host import MallocInUse  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
JOB = Path(__file__).parents[1] / "untracked_job.py"

pytestmark = pytest.mark.skipif(not MallocInUse().available, reason="needs glibc's mallinfo2")


def probed(loop: str, steps: int):
    """The report of ``loop`` run for ``steps`` under the probe, in a process of its own (the verdict
    reads the whole process's C heap: in this one, earlier tests' garbage hid the growth)."""
    job = subprocess.run([sys.executable, str(JOB), loop, str(steps)], capture_output=True, text=True,
                         timeout=300)
    assert job.returncode == 0, job.stderr
    report = from_jsonable(ProbeReport, parse_json(job.stdout))
    verdict = leak_verdict(report)
    snapshot = Snapshot(taken_at=report.taken_at)
    (breakdown,) = breakdowns(report, snapshot)
    advice = advise(snapshot=snapshot, process=None, report=report, verdict=verdict)
    return report, verdict, breakdown, advice


def test_a_list_appended_to_shows_as_untracked_growth_and_advice_puts_it_first():
    # 20 steps: too few to confirm a leak, enough to grow 20 MiB, where Adam's state is 3 MiB
    report, verdict, breakdown, advice = probed("appending", 20)
    assert verdict.state in ("collecting", "warming_up")  # no leak confirmed yet
    grown = (verdict.last_step - verdict.untracked_since) * MIB  # (the latest step read)
    assert 0.98 * grown <= verdict.untracked_growth <= grown + 2 * MIB
    assert breakdown.size_of("untracked_growth") == verdict.untracked_growth
    assert breakdown.items[-1].label == (
        f"untracked growth (host memory beyond the tracked tensors, since step {verdict.untracked_since})")
    assert 2 * breakdown.size_of("parameters") <= breakdown.size_of("optimizer_state") < 4 * MIB  # Adam
    assert [a.kind for a in advice] == ["untracked-growth"]  # not "optimizer state is the largest part"
    assert advice[0].estimated_saving == verdict.untracked_growth
    assert "grew " in advice[0].detail and f"since step {verdict.untracked_since}" in advice[0].detail


def test_a_confirmed_host_leak_is_saved_by_its_untracked_growth():
    report, verdict, breakdown, advice = probed("appending", 40)
    assert verdict.state == "leak" and verdict.category == "other"
    grown = (verdict.last_step - verdict.untracked_since) * MIB  # (the latest step read)
    assert 0.98 * grown <= verdict.untracked_growth <= grown + 2 * MIB
    assert [a.kind for a in advice] == ["growing-tensors"]
    assert advice[0].estimated_saving == verdict.untracked_growth


def test_a_running_total_without_item_shows_the_graphs_the_probe_did_not_measure():
    report, verdict, breakdown, advice = probed("running_total", 80)
    assert verdict.state == "leak" and verdict.category == "activations"
    # Each step keeps one evaluation graph: 256 KiB saved for backward, and autograd's few KiB. The
    # probe sees the graphs of its measured steps only; the rest is untracked growth.
    since, last = verdict.untracked_since, verdict.last_step
    seen = sum(1 for s in report.steps if s.categories is not None and since < s.step <= last)
    assert (last - since - seen) * 256 * KIB <= verdict.untracked_growth <= (last - since) * 300 * KIB
    assert breakdown.size_of("untracked_growth") == verdict.untracked_growth
    assert breakdown.size_of("activations") < verdict.untracked_growth
    assert advice[0].kind == "keep-graph"
    assert advice[0].estimated_saving >= verdict.untracked_growth
