"""gputui.units: the one place numbers are worded, for every view (the screen, --once, gputui probe,
verdicts and advice). One rounding rule for sizes in three widths; None is always "n/a"."""

from datetime import timezone

import pytest

from gputui import units

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
T = 1767603600.0  # 2026-01-05 09:00:00 UTC


@pytest.mark.parametrize("value, prose, compact, short", [
    (None, "n/a", "n/a", "n/a"),
    (0, "0 B", "0B", "0"),
    (1023, "1023 B", "1023B", "1023"),
    (1024, "1.00 KiB", "1.00KiB", "1.0K"),
    (1536 * MiB, "1.50 GiB", "1.50GiB", "1.5G"),
    (512 * MiB, "512 MiB", "512MiB", "512M"),
    (int(10.24 * GiB), "10.2 GiB", "10.2GiB", "10.2G"),
    (80 * GiB, "80.0 GiB", "80.0GiB", "80.0G"),
    (2016 * GiB, "1.97 TiB", "1.97TiB", "2.0T"),
    (-2 * MiB, "-2.00 MiB", "-2.00MiB", "-2.0M"),
])
def test_a_size_has_three_figures_and_one_fewer_in_the_narrowest_cells(value, prose, compact, short):
    assert (units.size(value), units.size_compact(value), units.size_short(value)) == (prose, compact, short)


def test_a_figure_that_rounds_to_1024_moves_up_a_unit():
    assert units.size(int(1023.6 * MiB)) == "1.00 GiB"
    assert units.size_short(int(1023.6 * MiB)) == "1.0G"
    assert units.size(int(1023.4 * MiB)) == "1023 MiB"


def test_size_pair_shares_the_unit_only_when_nothing_is_lost():
    assert units.size_pair(int(21.6 * GiB), 128 * GiB) == "21.6/128.0GiB"
    assert units.size_pair(504 * MiB, int(79.6 * GiB)) == "504MiB/79.6GiB"  # not 0.0/79.6GiB
    assert units.size_pair(137 * GiB, 2048 * GiB) == "137GiB/2.00TiB"  # not 0.1/2.0TiB
    assert units.size_pair(0, 80 * GiB) == "0B/80.0GiB"
    assert units.size_pair(None, 80 * GiB) == "n/a/80.0GiB"
    assert units.size_pair(3 * MiB, None) == "3.00MiB"


def test_short_pairs_keep_each_figure_in_its_unit_and_say_na_once():
    assert units.size_pair_short(504 * MiB, int(79.6 * GiB)) == "504M/79.6G"
    assert units.size_pair_short(20 * GiB, 80 * GiB) == "20.0G/80.0G"
    assert units.size_pair_short(None, 80 * GiB) == "n/a/80.0G"
    assert units.size_pair_short(None, None) == "n/a"


def test_rates_and_percents():
    assert units.rate(int(1.21 * GiB)) == "1.21 GiB/s" and units.rate(None) == "n/a"
    assert units.percent(42.4) == "42%" and units.percent(42.44, digits=1) == "42.4%"
    assert units.percent(None) == "n/a"


@pytest.mark.parametrize("seconds, shown", [
    (None, "n/a"), (0, "0s"), (59.9, "59s"), (60, "1:00"), (3723, "1:02:03"), (90000, "1d 01h"),
    (-5, "0s"),
])
def test_elapsed_reads_like_ps(seconds, shown):
    assert units.elapsed(seconds) == shown


def test_step_times_keep_precision():
    assert [units.step_time(s) for s in (0.0048, 0.21, 12.54, None)] == ["4.8ms", "0.21s", "12.5s", "n/a"]


def test_spans_in_sentences_and_in_cells():
    assert [units.span(s) for s in (45, 720, 3.5 * 3600, 2 * 86400)] == ["45 s", "12 min", "3.5 h", "2.0 days"]
    assert [units.span_short(s) for s in (0.4, 85, 99.6, 840, 5 * 3600, 3 * 86400)] == [
        "0s", "85s", "100s", "14m", "5h", "3d"]


def test_clock_time_in_a_given_zone():
    assert units.clock_time(T, timezone.utc, date=True, zone=True) == "2026-01-05 09:00:00 UTC"
    assert units.clock_time(T + 61, timezone.utc) == "09:01:01"
    assert units.clock_time(None) == "n/a"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), (" 2.5 ", 2.5),
                                               ("2H", 7200.0), ("1m30.5s", 90.5)])
def test_durations_as_typed(text, seconds):
    assert units.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5 m", "-5s", "5d", "12:00", "1h 30m"])
def test_not_a_duration(text):
    assert units.parse_duration(text) is None
