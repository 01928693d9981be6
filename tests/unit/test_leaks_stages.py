"""The stages of a leak verdict, each on its own: the window's growth, the hysteresis that holds a
confirmed leak, the allocator's evidence and the allocator's verdict (gputui/analysis/leaks.py)."""

from test_leaks import GIB, MIB, leaking_activations, report, slow_leak

from gputui.analysis import leaks


def judged(probe_report):
    """The report's steps that carry the judged figure, and which figure."""
    return leaks._judged_steps(probe_report, None)


def test_the_window_growth_of_a_steady_leak_is_its_slope_confirmed():
    steps, figure = judged(leaking_activations())
    growth = leaks._window_growth(steps, figure)
    assert figure == "allocated" and growth.slope == 24 * MIB
    assert growth.grows and growth.confirmed and not growth.held
    assert growth.span == 40 and growth.drops == [] and growth.totals[-1] == 4 * GIB + 39 * 24 * MIB


def test_a_slow_leak_between_two_increments_is_held_by_the_earlier_evidence():
    # At step 56 the last 1 MiB step lies 16 steps back: the window alone reads it as flattening (two
    # increments are no period yet to judge its level by).
    steps, figure = judged(report(56, slow_leak, start=1))
    window = leaks._window_growth(steps, figure)
    assert not window.grows and not window.held
    held = leaks._held(window, steps, figure)
    assert held.grows and held.held and held.slope == window.slope == MIB / 24


def test_a_leak_that_grows_in_steps_grows_by_the_rise_of_its_level_over_two_periods():
    # 1 MiB every 20 steps, read every step, at a step 19 past an increment: the fit of the window's
    # latest half and its typical step read it as flattening (issue 45: it fell back to "warming up");
    # over two of its periods, its level rises.
    steps, figure = judged(report(139, slow_leak, start=1))
    period = leaks._period(steps, figure)
    window = leaks._window_growth(steps, figure, period)
    assert period == 20 and window.span == 4 * period
    assert window.grows and window.confirmed and not window.held
    assert not leaks._window_growth(steps, figure, 1).grows  # (judged as if it grew every step)


def test_memory_flat_over_the_last_64_steps_is_no_growth():
    steps, figure = judged(report(200, lambda s: GIB + min(s, 100) * 10 * MIB))
    growth = leaks._held(leaks._window_growth(steps, figure), steps, figure)
    assert not growth.grows and not growth.held and growth.slope == 0.0


def fragmenting(retries):
    return report(40, lambda s: 4 * GIB, reserved=lambda s: 5 * GIB + s * 20 * MIB,
                  inactive=lambda s: 100 * MIB + s * 20 * MIB, retries=retries, start=100)


def test_the_allocator_evidence_of_split_blocks_and_retries():
    steps, _ = judged(fragmenting(lambda s: s // 10))
    evidence = leaks._allocator_evidence(steps)
    assert len(evidence.steps) == 40 and evidence.retries_added == 3
    assert evidence.reserved_slope == evidence.inactive_slope == 20 * MIB
    assert evidence.reserved_grows and evidence.inactive_grows
    room = leaks._Room(total=None, free=2 * GIB)
    verdict = leaks._allocator_verdict(steps, evidence, room, {})
    assert verdict is not None and verdict.state == "fragmentation"
    assert verdict.oom_step == 139 + 102 + 1  # 2 GiB at the reservation's 20 MiB a step: 102.4 steps


def test_the_allocator_has_no_verdict_of_its_own_when_its_cache_is_flat():
    steps, _ = judged(report(40, lambda s: 4 * GIB, reserved=lambda s: 5 * GIB, inactive=lambda s: 0,
                             retries=lambda s: 0, start=100))
    evidence = leaks._allocator_evidence(steps)
    assert evidence.retries_added == 0 and evidence.reserved_slope == 0.0 and not evidence.reserved_grows
    assert leaks._allocator_verdict(steps, evidence, leaks._Room(None, None), {}) is None
