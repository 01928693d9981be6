"""Pilot tests of the live monitor's first minute as a new user meets it (issue 9, part 3): failures
before the first sample, MIG instances, narrow panes, the help screen's ids and legend, the detail
screen's forecast, sorting marks, Home/End, and signals on tree parents.
"""

from __future__ import annotations

import dataclasses

import pytest
from plain_data import once_text
from ui_data import make_app, settle, table_keys, training_snapshot

from gputui.errors import UserError
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.header import HostHeader

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


class RefusingSource:
    """A collector stand-in whose every sample raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def sample(self):
        self.calls += 1
        raise self.error

    def probe_reports(self):
        return ()

    def close(self) -> None:
        pass


def screen_text(widget) -> str:
    return "\n".join(strip.text for strip in widget.render_lines(widget.size.region))


# -- a failure before the first sample -----------------------------------------------------------


async def test_a_request_that_cannot_be_met_ends_the_monitor_with_exit_2():
    refusal = UserError("--only 99: no such GPU; the GPUs here are 0, 1")
    app = GpuTuiApp(Sampler(RefusingSource(refusal), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            if not app.is_running:
                break
            await pilot.pause(0.05)
    assert app.return_code == 2
    assert app.refusal is refusal


def test_run_tui_says_what_once_says_for_a_gpu_that_does_not_exist(monkeypatch, capsys):
    from gputui import cli
    from gputui.ui import app as app_module

    original = GpuTuiApp.run
    opened = []

    def headless(self, **kwargs):  # the test has no terminal to draw on
        opened.append(self)
        return original(self, headless=True, **kwargs)

    monkeypatch.setattr(app_module.GpuTuiApp, "run", headless)
    monkeypatch.setattr("gputui.plain.terminal.is_terminal", lambda *args, **kwargs: True)
    monkeypatch.setattr("gputui.cli._stdin_is_terminal", lambda: True)  # a keyboard, as a user has
    monkeypatch.setenv("TERM", "xterm-256color")
    assert cli.main(["--demo", "workstation", "--only", "99"]) == 2
    live = capsys.readouterr().err
    assert cli.main(["--demo", "workstation", "--only", "99", "--once"]) == 2
    once = capsys.readouterr().err
    assert opened  # the live monitor did start, and ended by itself
    assert live == once
    assert live.startswith("gputui: --only 99: no such GPU; the GPUs here are 0 (GPU-")


async def test_a_failure_before_the_first_sample_is_shown_under_the_wait():
    app = GpuTuiApp(Sampler(RefusingSource(RuntimeError("driver went away")), watch_probes=False),
                    MonitorOptions(me="bob", interval=30.0))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            if app.problem:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        header = screen_text(app.screen.query_one(HostHeader))
        assert "waiting for the first sample" in header
        assert "sampling failed: RuntimeError: driver went away" in header
        assert app.is_running  # a passing failure: sampling goes on


# -- MIG ----------------------------------------------------------------------------------------


async def test_mig_instances_are_shown_under_their_gpu_and_named_in_the_table():
    from still import still_app

    from gputui.ui.widgets.devices import DeviceLines
    from gputui.ui.widgets.processes import ProcessTable

    app = still_app("mig", seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        devices = screen_text(app.screen.query_one(DeviceLines)).splitlines()
        migs = [line.split()[:3] for line in devices if "MIG" in line]
        assert migs == [["MIG", "0:1", "3g.40gb"], ["MIG", "0:5", "2g.20gb"],
                        ["MIG", "0:13", "1g.10gb"], ["MIG", "0:14", "1g.10gb"]]
        assert "30.5G/39.4G" in next(line for line in devices if "MIG 0:1 " in line)
        table = app.screen.query_one(ProcessTable)
        gpus = {row.pid: row.cells["gpu"] for row in table.rows_by_key.values()}
        assert gpus == {61500: "1", 61010: "0:1", 61100: "0:5", 61300: "0:14", 61200: "0:13"}
        await pilot.click(DeviceLines, offset=(10, devices.index(devices[-1])))  # GPU 1's second line
        await pilot.pause()
        assert app.screen.chart_device == 1
        await pilot.resize_terminal(80, 24)  # compact: one line per GPU and per instance
        await pilot.pause()
        compact = screen_text(app.screen.query_one(DeviceLines)).splitlines()
        assert [line.split()[1] for line in compact if "MIG" in line] == ["0:1", "0:5", "0:13", "0:14"]


async def test_a_mig_instance_has_one_name_in_once_the_monitor_and_the_detail_screen():
    """--once once listed "MIG 0...3" (MIG device indices) where everything else said 0:1 (GPU 0, GPU
    instance 1): the instance a process runs in must read the same everywhere."""
    from datetime import timezone

    from still import still_app

    from gputui.ui.widgets.devices import DeviceLines

    app = still_app("mig", seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        once = once_text(app.snapshot, width=120, tz=timezone.utc).splitlines()
        once_migs = [line.split()[1] for line in once if line.lstrip().startswith("MIG ")]
        devices = screen_text(app.screen.query_one(DeviceLines)).splitlines()
        monitor_migs = [line.split()[1] for line in devices if "MIG" in line]
        assert once_migs == monitor_migs == ["0:1", "0:5", "0:13", "0:14"]
        once_gpus = {line.split()[0]: line.split()[2] for line in once if line.split()[:1] == ["61010"]}
        assert once_gpus == {"61010": "0:1"}
        screen = await open_detail(pilot, 61010)
        title = str(screen.query_one("#detail-title").render())
        assert title.startswith("Process 61010  on MIG 0:1  python train.py"), title
        info = str(screen.query_one("#detail-info").render())
        assert "devices  MIG 0:1 (H100 80GB HBM3, 3g.40gb) 30.5G" in info, info
        assert "type  compute, MIG 0:1: GI 1 CI 0" in info, info


async def open_detail(pilot, pid: int):
    from gputui.ui.screens.detail import ProcessDetail
    from gputui.ui.widgets.processes import ProcessTable

    table = pilot.app.screen.query_one(ProcessTable)
    table.move_cursor(row=next(i for i, key in enumerate(table.row_keys) if key.startswith(f"{pid}/")))
    await pilot.pause()
    await pilot.press("enter")
    for _ in range(200):  # generous: the machine's two cores are shared
        await pilot.pause(0.05)
        if isinstance(pilot.app.screen, ProcessDetail) and pilot.app.screen.analysis is not None:
            return pilot.app.screen
    raise AssertionError("the detail screen did not show")


# -- narrow panes, column widths, the sort mark -------------------------------------------------


async def test_eight_gpus_in_a_50x15_pane_are_all_on_screen():
    """GPUs 5-7 were cut off at 50x15 with no key to reach them, and torchrun's straggler is GPU 5:
    a tiny pane puts two GPUs on a line when one a line does not fit."""
    import re

    from still import still_app

    from gputui.ui.widgets.devices import DeviceLines, DeviceList
    from gputui.ui.widgets.processes import ProcessTable

    app = still_app("torchrun", seconds=90)
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        box = app.screen.query_one(DeviceList)
        lines = screen_text(app.screen.query_one(DeviceLines)).splitlines()
        assert len(lines) == 4 and box.region.height == 4 and box.max_scroll_y == 0
        assert [re.findall(r"(?:^|\s)(\d) ▕", line) for line in lines] == [
            ["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
        straggler = next(d for d in app.snapshot.devices if d.index == 5)
        assert re.search(rf"5 ▕[^▏]*▏ *\S+ +{straggler.gpu_util}% ", lines[2]), lines[2]
        assert all(len(line) <= 50 for line in lines)
        assert app.screen.query_one(ProcessTable).region.height >= 6  # the table keeps its rows
        await pilot.click(DeviceLines, offset=(30, 2))  # the right cell of the third line: GPU 5
        await pilot.pause()
        assert app.screen.chart_device == 5
        assert "▶5 ▕" in screen_text(app.screen.query_one(DeviceLines)).splitlines()[2]


async def test_more_gpus_than_a_tiny_pane_holds_are_reached_with_g():
    """Sixteen GPUs are eight lines even two a line: g picks the next GPU, marks it and brings it into view."""
    from ui_data import device

    from gputui.ui.widgets.devices import DeviceLines, DeviceList

    snap = training_snapshot()
    snap = dataclasses.replace(snap, devices=tuple(device(i) for i in range(16)))
    app = make_app([snap])
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        box = app.screen.query_one(DeviceList)
        assert box.region.height == 5 and box.max_scroll_y == 3
        for _ in range(15):
            await pilot.press("g")
        await pilot.pause()
        assert app.screen.chart_device == 15
        lines = screen_text(app.screen.query_one(DeviceLines)).splitlines()
        assert "▶15 " in lines[7]
        assert box.scroll_y == 3  # GPU 15's line (the eighth) is in view
        await pilot.press("g")  # round to GPU 0, at the top again
        await pilot.pause()
        assert app.screen.chart_device == 0 and box.scroll_y == 0


def table_lines(app) -> list[str]:
    from gputui.ui.widgets.processes import ProcessTable

    return screen_text(app.screen.query_one(ProcessTable)).splitlines()


async def test_a_narrow_pane_keeps_the_leak_letter_and_the_time_to_oom():
    from still import still_app

    app = still_app("leaky", seconds=120)
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        assert app.screen.layout_mode == "tiny"
        header, leaking = table_lines(app)[:2]
        assert header.split() == ["PID", "P", "GPU", "GPU", "MEM", "▼", "TREND", "COMMAND"]
        assert leaking.split()[:2] == ["51200", "A"]  # activations leak
        assert leaking.split()[4] == "▲69s"  # growing, out of memory in 69 s


async def test_sort_mark_is_whole_and_the_trend_column_is_as_wide_as_its_trends():
    from still import still_app

    app = still_app("workstation", seconds=90)  # nothing grows here
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        header = table_lines(app)[0]
        assert "GPU MEM ▼" in header
        table = app.screen.query_one("ProcessTable")
        widths = table.shown_widths
        assert widths["trend"] == 5  # no trend shown: just its label
        assert widths["command"] == 25 and "user" in widths  # the TREND cells went to USER and COMMAND
        await pilot.press("s")  # next column: TREND, its mark whole too
        assert "TREND ▼" in table_lines(app)[0]
    leaky = still_app("leaky", seconds=120)
    async with leaky.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = leaky.screen.query_one("ProcessTable")
        trend = table.rows_by_key["51200/0"].cells["trend"]
        assert trend.startswith("▲") and trend.endswith(" 69s")
        assert table.shown_widths["trend"] == len(trend)


async def test_ascii_sort_mark():
    from still import still_app

    app = still_app("workstation", seconds=90, ascii=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "GPU MEM v" in table_lines(app)[0]


# -- the help screen ----------------------------------------------------------------------------


def help_text(screen) -> str:
    from textual.widgets import Static

    return "\n".join(screen_text(static) for static in screen.query(Static))


@pytest.mark.parametrize("size", [(80, 24), (50, 15)])
async def test_help_shows_every_binding_id_whole(size):
    from gputui.ui.bindings import binding_ids
    from gputui.ui.screens.help import HelpScreen

    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        words = set(help_text(app.screen).replace("│", " ").split())
        assert binding_ids() <= words, binding_ids() - words


async def test_help_explains_every_mark():
    from gputui.ui.screens.help import HelpScreen

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        legend = screen_text(app.screen.query_one("#help-legend"))
        lines = {line.split("  ")[0].strip(): line for line in legend.splitlines() if line.strip()}
        for mark in ("●", "P G O B A T C F", "!", "▲1.2G/m 85s", "↗", "~", "▶", "⚠", "n/a"):
            assert mark in lines, mark
        assert "Parameters" in lines["P G O B A T C F"] and "rate per minute" in lines["▲1.2G/m 85s"]
        assert "levelling off" in lines["↗"]


# -- moving in the table ------------------------------------------------------------------------


async def test_home_and_end_move_the_table_cursor():
    from gputui.ui.widgets.processes import ProcessTable

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        keys = table_keys(app)
        await pilot.press("end")
        assert table.cursor_row == len(keys) - 1 and table.selected_key == keys[-1]
        await pilot.press("home")
        assert table.cursor_row == 0 and table.selected_key == keys[0]


# -- signals on a tree parent -------------------------------------------------------------------


@pytest.mark.parametrize("key, command", [("I", "kill -INT"), ("T", "kill -TERM"), ("K", "kill -KILL")])
async def test_a_signal_key_on_a_tree_parent_says_it_is_not_a_gpu_process(key, command):
    from gputui.ui.widgets.processes import ProcessTable

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        keys = table_keys(app)
        table.move_cursor(row=keys.index("1000/-"))  # torchrun, the ranks' parent
        await pilot.pause()
        said, how = [], []
        app.notify = lambda message, **options: (said.append(message), how.append(options))
        await pilot.press(key)
        await pilot.pause()
        assert how[-1].get("markup") is False  # "sshd: ... [listener]" must be shown as it is
        assert "Select a process first." not in said
        assert said[-1] == ("Process 1000 (torchrun --nproc-per-node=4 train.py) is a parent in the "
                            "tree, not a GPU process: gputui signals GPU processes only. Select one "
                            f"under it, or signal it yourself: {command} 1000")
        assert app.screen is app.main  # no confirmation asked


# -- colours ------------------------------------------------------------------------------------


@pytest.mark.parametrize("theme", ["dark", "light"])
async def test_selected_row_header_and_rows_differ_in_256_colours(theme):
    from rich.color import ColorSystem

    from gputui.ui.widgets.processes import ProcessTable

    app = make_app(theme=theme)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        assert table.has_focus

        def in_256(style) -> int:
            return style.bgcolor.downgrade(ColorSystem.EIGHT_BIT).number

        header = in_256(table.get_component_rich_style("processtable--header"))
        selected = in_256(table.get_component_rich_style("processtable--cursor"))
        rows = in_256(table.rich_style)
        assert len({header, selected, rows}) == 3, (header, selected, rows)


@pytest.mark.parametrize("no_color", [True, False])
async def test_no_color_keeps_the_leak_marker_visible(monkeypatch, no_color):
    from still import still_app

    from gputui.ui.widgets.processes import ProcessTable

    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    app = still_app("leaky", seconds=120)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.no_color is no_color
        table = app.screen.query_one(ProcessTable)
        marker = table.get_cell("51200/0", "probe")
        trend = table.get_cell("51200/0", "trend")
        quiet = table.get_cell("52300/0", "pid")
        assert marker.plain == "A" and trend.plain.startswith("▲")
        assert bool(marker.style.reverse) is no_color and bool(trend.style.reverse) is no_color
        assert not quiet.style  # plain cells stay plain


async def test_a_problem_with_brackets_is_shown_as_it_is():
    import dataclasses

    from ui_data import training_snapshot

    problem = "GPU 3: [gpu lost] from /dev/nvidia3 [/bold]"
    app = make_app([dataclasses.replace(training_snapshot(), problems=(problem,))])
    shown = []
    app.notify = lambda message, **options: shown.append((message, options.get("markup")))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
    assert (problem, False) in shown


async def test_help_wastes_no_rows_in_a_small_pane():
    app = make_app()
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        title = app.screen.query_one(".help-title")
        section = app.screen.query(".help-section").first()
        # "Keys", one blank line (the section's own padding), then "Everywhere"
        assert title.region.height == 1 and section.region.y == title.region.bottom
