"""Leak verdicts on the real clock, every core kept busy by other processes, looked at as users look:
`gputui probe PID --json` once a second (issue 45). bench/bench_verdicts.py runs these jobs and more, five
times each, idle and busy; here one run each of the two that broke: a slow leak that grows in steps
(it flipped back to "warming up"), and a cache that warms up and then stays flat (called a leak after).
"""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_verdicts import Figures, Load, jobs, judge, one_run  # noqa: E402

from gputui.analysis.leaks import FLAT_STEPS  # noqa: E402

pytestmark = pytest.mark.slow


def job(name, **changes):
    import dataclasses

    (found,) = [j for j in jobs() if j.name == name]
    return dataclasses.replace(found, **changes)


def busy_run(name, steps):
    """One run of a bench job with every core busy: its figures, and every look at it."""
    figures = Figures()
    with Load(True):
        run = one_run(job(name, steps=steps), "busy", None, 0)
    judge(run, figures)
    looks = [x for looks in run.looks.values() for x in looks]
    assert figures.polls >= 5, looks
    return figures, looks


def test_a_slow_leak_on_a_busy_machine_is_called_once_and_stays_called_with_its_keeper():
    figures, looks = busy_run("slow_leak", 900)
    assert figures.flips == 0, [(x.step, x.state, x.reason) for x in looks]
    (first,) = figures.first_calls
    assert first is not None and first <= 300, looks
    assert figures.keeper_named == 1, looks[-1]


def test_a_cache_that_warms_up_is_no_leak_once_flat_on_a_busy_machine():
    figures, looks = busy_run("warmup_plateau", 350)
    assert figures.false_alarms == 0, [(x.step, x.state, x.reason) for x in looks]
    late = [x for x in looks if x.step is not None and x.step >= 100 + 2 * FLAT_STEPS]
    assert late and all(x.state == "clean" for x in late), [(x.step, x.state, x.reason) for x in late]
