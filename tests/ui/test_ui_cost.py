"""The monitor shows what it costs: in the header where the line has room, on the help screen always."""

from __future__ import annotations

import dataclasses

from ui_data import ReplaySource, settle, training_snapshot

from gputui.model import MonitorCost
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.help import HelpScreen
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.bars import plain
from gputui.ui.widgets.header import HostHeader

COST = MonitorCost(cpu_percent=0.63, nvml_ms=1.234, sample_ms=4.5)


def app_with(cost: MonitorCost | None) -> GpuTuiApp:
    snapshot = dataclasses.replace(training_snapshot(), monitor=cost)
    return GpuTuiApp(Sampler(ReplaySource([snapshot]), watch_probes=False), MonitorOptions(me="bob"))


async def test_header_says_what_gputui_costs_where_there_is_room():
    app = app_with(COST)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        header = app.screen.query_one(HostHeader)
        first = plain(header.words(120)[0])
        assert first.endswith("self 0.6% CPU · NVML 1.2ms")
        # A line too short for it leaves it out rather than cutting the time or the host short.
        assert "self" not in plain(header.words(len(first) - 1)[0])


async def test_help_screen_says_it_in_full():
    app = app_with(COST)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        said = str(app.screen.query_one("#help-cost").render())
        assert "0.6% of one CPU core" in said and "4.5 ms" in said and "1.2 ms of it in NVML" in said


async def test_nothing_is_said_where_the_cost_was_not_measured():
    app = app_with(None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        header = app.screen.query_one(HostHeader)
        assert "self" not in plain(header.words(120)[0])
        await pilot.press("question_mark")
        await pilot.pause()
        assert not app.screen.query("#help-cost")
