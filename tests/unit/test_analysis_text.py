"""How a probe report's figure age is worded (the probe reads on the training thread, so figures lag)."""

from gputui.analysis.text import figures_age


def test_figures_age_says_which_step_and_how_long_before_the_report():
    assert figures_age(None, None, 100.0) == (
        "no figures read yet (the probe reads at the training loop's next step)")
    assert figures_age(99.5, 0, 100.0) == "figures read before the first step, just now"
    assert figures_age(99.0, 325, 100.0) == "figures read at step 325, just now"
    assert figures_age(40.0, 12, 100.0) == "figures read at step 12, 60 s before the report"
    assert figures_age(100.0 - 600, 12, 100.0) == "figures read at step 12, 10 min before the report"
    assert figures_age(101.0, 3, 100.0) == "figures read at step 3, just now"  # clocks a little apart
