"""One machine's leak verdicts as a value passed in and returned (gputui/analysis/leaks.py's
judge_leaks): a report that did not change keeps its verdict; the analysis package keeps no state."""

import dataclasses

import pytest
from test_leaks import GIB, MIB, leaking_activations, report

from gputui.analysis.leaks import JudgedLeaks, judge_leaks, leak_verdict
from gputui.model import Snapshot


def snapshot(*reports, at=2000.0):
    return Snapshot(taken_at=at, probes=reports)


def test_each_probed_process_is_judged_and_an_unchanged_report_keeps_its_verdict():
    leaking = leaking_activations()
    flat = dataclasses.replace(report(40, lambda s: 4 * GIB), pid=2)
    first = judge_leaks(snapshot(leaking, flat))
    assert {pid: v.state for pid, v in first.verdicts.items()} == {1: "leak", 2: "clean"}
    assert first.verdicts[1] == leak_verdict(leaking) and first.verdicts[1].allocated_per_step == 24 * MIB
    again = judge_leaks(snapshot(leaking, flat, at=2001.0), first)
    assert again.verdicts[1] is first.verdicts[1] and again.verdicts[2] is first.verdicts[2]


def test_a_new_step_is_judged_again_and_a_process_no_longer_probed_is_dropped():
    first = judge_leaks(snapshot(leaking_activations(n=39), dataclasses.replace(report(40, lambda s: GIB), pid=2)))
    later = judge_leaks(snapshot(leaking_activations(n=40)), first)
    assert set(later.verdicts) == {1} and later.verdicts[1] is not first.verdicts[1]
    assert later.verdicts[1].last_step == 39 and first.verdicts[1].last_step == 38
    assert set(first.verdicts) == {1, 2}  # the earlier value is left as it was


def test_the_verdicts_are_a_frozen_value():
    judged = judge_leaks(snapshot(leaking_activations()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        judged.verdicts = {}  # type: ignore[misc]
    assert judge_leaks(snapshot()) == JudgedLeaks()
