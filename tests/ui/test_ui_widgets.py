"""The main screen's drawing pieces: styled words, the one-line history charts, and the widgets that
draw lines from cached segments (repaint only on change, one line per device in small panes, clicks).
"""

from __future__ import annotations

import pytest
from textual.content import Content
from ui_data import GIB, device, make_app, settle

from gputui.model import BREAKDOWN_ITEMS, BreakdownItem
from gputui.ui.widgets import bars
from gputui.ui.widgets.charts import DeviceHistory, chart_line, chart_scale
from gputui.ui.widgets.devices import DeviceLines, render_device
from gputui.ui.widgets.line import pieces_of
from gputui.ui.widgets.memory_bar import STYLES, cells


def test_words_join_skip_empty_parts_and_merge_one_style():
    words = bars.join([bars.label("MEM"), "", "58.5G", (), bars.value("n/a")])
    assert words == (("MEM", "bold $text-muted"), (" 58.5G ", ""), ("n/a", "$text-muted"))
    assert bars.plain(words) == "MEM 58.5G n/a"
    assert bars.assemble(("a", "bold"), ("b", "bold"), " c") == (("ab", "bold"), (" c", ""))


def test_meter_colours_its_fill_by_level():
    assert bars.meter(0.5, 4) == (("▕", "$text-muted"), ("██", "$success"), ("░░", "$text-muted 50%"),
                                  ("▏", "$text-muted"))
    assert bars.meter(0.95, 2, ascii=True)[1] == ("##", "$error")
    assert bars.meter(None, 2, ascii=True) == (("[", "$text-muted"), ("??", "$text-muted 50%"),
                                               ("]", "$text-muted"))


def test_content_becomes_lines_of_pieces_with_overlapping_styles_joined():
    content = Content.assemble(("ab", "bold"), " c\n", ("d", "$error"))
    content = content.stylize("red", 1, 3)
    assert pieces_of(content) == ((("a", "bold"), ("b", "bold red"), (" ", "red"), ("c", "")),
                                  (("d", "$error"),))


def test_chart_line_puts_the_newest_point_at_the_right_on_a_fixed_scale():
    line = chart_line("UTIL", "50%", 50.0, (0.0, 50.0, 100.0), (0.0, 100.0, 0.7, 0.9), 17)
    assert line == (("UTIL  ", "bold $text-muted"), ("  50%", "bold $success"), ("   ", ""),
                    ("▁▄▇", "$primary"))
    assert bars.plain(line) == "UTIL    50%   ▁▄▇"
    ascii_line = chart_line("MEM", "79G", 79.0, (10.0, 80.0), (0.0, 80.0, 0.7, 0.95), 14, ascii=True)
    assert bars.plain(ascii_line) == "MEM     79G _#"
    assert ascii_line[1] == ("  79G", "bold $error")  # 79 of 80: past the high mark


def test_chart_line_without_a_scale_draws_a_flat_line():
    line = chart_line("POWER", "n/a", None, (5.0, 6.0), (0.0, 0.0, 0.7, 0.9), 14)
    assert line[-1] == ("▁▁", "$primary")
    assert line[1] == ("  n/a", "$text-muted")


def test_chart_scales_come_from_the_device():
    d = device(0)
    assert chart_scale("gpu_util", d) == (0.0, 100.0, 0.7, 0.9)
    assert chart_scale("memory_used", d) == (0.0, float(d.memory_total), 0.7, 0.95)
    assert chart_scale("power_draw", d) == (0.0, 700.0, 0.7, 0.9)
    # yellow from 10 degrees below the slowdown, red at it: as the device line and --once colour it
    assert chart_scale("temperature", d) == (20.0, 90.0, 1 - 10 / 70, 1.0)


def test_a_lost_device_is_one_line_saying_so():
    lines = render_device(device(1, lost="GPU is lost"), "normal", 120)
    assert len(lines) == 1
    assert bars.plain(lines[0]).endswith("LOST: GPU is lost")


async def test_device_rows_repaint_only_on_change_and_collapse_in_small_panes():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        lines = app.screen.query_one(DeviceLines)
        assert len(lines.lines) == 2 * len(app.snapshot.devices)  # two lines per GPU here
        drawn = lines.lines
        lines._repaint_required = False
        app.screen.render_snapshot()  # the same snapshot again
        assert lines.lines is drawn and not lines._repaint_required
        await pilot.resize_terminal(50, 15)
        await pilot.pause()
        assert len(lines.lines) == len(app.snapshot.devices)


async def test_clicking_a_device_charts_it():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.click(DeviceLines, offset=(3, 4))  # third line pair: GPU 2
        await pilot.pause()
        assert app.screen.chart_device == 2
        charts = app.screen.query_one(DeviceHistory)
        assert charts.border_title.startswith("GPU 2 history")
        assert bars.plain(charts.lines[0][1]).startswith("UTIL")


@pytest.mark.parametrize("mode", ["normal", "compact"])
def test_memory_the_driver_cannot_report_reads_na_once(mode):
    # Some boards (Jetson, some vGPU profiles) report no memory figures at all.
    text = " ".join(bars.plain(line) for line in render_device(
        device(0, memory_used=None, memory_total=None, memory_free=None), mode, 120))
    assert "n/a/n/a" not in text and "n/a" in text


def test_the_step_chart_draws_the_steps_that_carry_figures():
    from gputui.model import StepRecord
    from gputui.ui.widgets.step_chart import step_series

    # A CPU job: memory read at every 50th step only; the others carry their time.
    steps = tuple(StepRecord(s, float(s), 0.004, "cpu", allocated=(s // 50) * 1024, peak_forward=2048)
                  if s % 50 == 0 else StepRecord(s, float(s), 0.002, "cpu") for s in range(1, 1001))
    series = step_series(steps, "cpu")
    assert series.steps == tuple(range(50, 1001, 50))  # not the latest 120 steps, all without figures
    assert dict(series.values)["allocated"] == tuple(float(s // 50 * 1024) for s in range(50, 1001, 50))
    assert series.step_time == 0.002  # the step time is still that of the latest steps
    # No figures at all yet: the latest steps, for their times.
    assert step_series(tuple(StepRecord(s, float(s), 0.002, "cpu") for s in range(1, 201))).steps == \
        tuple(range(81, 201))


def test_pcie_throughput_read_seconds_ago_says_so():
    # PCIe rx/tx are read every few seconds (each NVML call blocks ~20 ms): an older figure says its age.
    d = device(0, pcie_rx=3 * GIB, pcie_tx=GIB)
    fresh = bars.plain(render_device(d, "normal", 150, pcie_age=1)[1])
    old = bars.plain(render_device(d, "normal", 150, pcie_age=4)[1])
    assert "rx 3.00 GiB/s tx 1.00 GiB/s" in fresh and "ago" not in fresh
    assert "rx 3.00 GiB/s tx 1.00 GiB/s 4s ago" in old


def test_cells_fill_the_bar_exactly_and_keep_small_items_visible():
    items = tuple(BreakdownItem(k, k, size) for k, size in
                  (("a", 1000), ("b", 1), ("c", 499)))
    assert cells(items, 1500, 10) == [6, 1, 3]
    assert cells(items, 1500, 2) == [1, 1, 1]  # never narrower than one cell per item
    assert sum(cells(items, 1500, 77)) == 77


async def test_detail_chart_of_a_percentage_stands_on_0_to_100_not_on_its_own_min_and_max():
    from textual.app import App

    from gputui.analysis.history import Series
    from gputui.ui.widgets.charts import Chart

    class One(App):
        def compose(self):
            yield Chart("SM", lambda v: f"{v:.0f}%", top=100.0, id="sm")

    app = One()
    async with app.run_test(size=(40, 5)) as pilot:
        chart = app.query_one(Chart)
        chart.show(Series(times=(0.0, 1.0, 2.0, 3.0), values=(95.0, 96.0, 96.4, 95.0)))
        await pilot.pause()
        rows = [str(line.render()) for line in chart.query(".chart-bars")]
        # Two rows of 8 eighths: 95-96 % is 15 of 16 eighths every time, no full-height swing.
        assert [row[-4:] for row in rows] == ["▇▇▇▇", "████"]
        chart.show(Series(times=(0.0, 1.0), values=(50.0, 127.0)))  # 127 % CPU: the top rises to it
        await pilot.pause()
        assert [row[-2:] for row in [str(line.render()) for line in chart.query(".chart-bars")]] == [" █", "▆█"]


def test_the_step_chart_legend_lists_only_lines_that_can_be_seen():
    from gputui.model import StepRecord
    from gputui.ui.widgets.step_chart import plotted, step_series

    # Forward and backward peaks 0.1 GiB apart on a 9 GiB scale share their cells: one line, one entry.
    steps = tuple(StepRecord(s, float(s), 0.4, "cuda:0", allocated=(15 + s * 0.05) * GIB,
                             peak_forward=(18 + s * 0.05) * GIB, peak_backward=(18.1 + s * 0.05) * GIB,
                             peak_optimizer=(16.5 + s * 0.05) * GIB) for s in range(120))
    assert plotted(step_series(steps, "cuda:0")) == [
        ("allocated", "at step end", "cyan"), ("peak_forward", "forward/backward peak", "orange"),
        ("peak_optimizer", "optimizer peak", "green")]
    # A series with no figure is not drawn, nor listed.
    bare = tuple(StepRecord(s, float(s), 0.4, "cuda:0", allocated=s * GIB) for s in range(10))
    assert plotted(step_series(bare, "cuda:0")) == [("allocated", "at step end", "cyan")]


@pytest.mark.parametrize("mode, shown", [("exclusive_process", "compute exclusive process"),
                                         ("prohibited", "compute prohibited"), ("default", None)])
def test_a_compute_mode_other_than_default_is_said_in_the_device_row(mode, shown):
    lines = [bars.plain(line) for line in render_device(device(0, compute_mode=mode), "normal", 140)]
    if shown is None:
        assert not any("compute" in line for line in lines)
    else:
        assert shown in lines[1], lines


def test_every_breakdown_item_has_a_colour_and_its_own_letter():
    # The bar looks each item up by key: one without a style would end the monitor with a KeyError.
    assert set(STYLES) == set(BREAKDOWN_ITEMS)
    letters = [letter for _, letter in STYLES.values()]
    assert len(set(letters)) == len(letters)
    assert STYLES["gathered"] == ("$error-lighten-2", "W")


async def test_styled_lines_repaint_only_the_lines_that_changed():
    """Textual's own work on a line costs several times ours: a GPU whose second line (clocks, PCIe) did
    not change keeps it, and only the changed line is drawn again."""
    from textual.app import App

    from gputui.ui.widgets.line import StyledLines

    drawn: list[int] = []

    class Counted(StyledLines):
        def render_line(self, y):
            drawn.append(y)
            return super().render_line(y)

    class Lines(App):
        def compose(self):
            yield Counted()

    app = Lines()
    async with app.run_test(size=(40, 6)) as pilot:
        widget = app.query_one(Counted)
        widget.show_lines([("", (("GPU 0 ", "bold"), ("71%", ""))), ("", (("SM 1980 MHz", ""),)),
                           ("", (("GPU 1 ", "bold"), ("12%", "")))])
        await pilot.pause()
        drawn.clear()
        widget.show_lines([("", (("GPU 0 ", "bold"), ("73%", ""))), ("", (("SM 1980 MHz", ""),)),
                           ("", (("GPU 1 ", "bold"), ("12%", "")))])
        await pilot.pause()
        assert sorted(set(drawn)) == [0]
        drawn.clear()
        widget.show_lines([("", (("GPU 0 ", "bold"), ("73%", "")))])  # fewer lines: all drawn, laid out again
        await pilot.pause()
        assert set(drawn) >= {0}
        assert widget.size.height == 1
