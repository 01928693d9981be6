"""The header's first line in a narrow pane (50 columns, the compact layout): the host and the time
apart, and a host name too long for both drops the time rather than the state at the edge."""

from __future__ import annotations

import dataclasses

import pytest
from ui_data import ReplaySource, settle, training_snapshot

from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.header import HostHeader
from gputui.units import clock_time

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


async def first_line(hostname: str) -> tuple[str, str]:
    """The header's first line as drawn at 50x15, and the snapshot's time of day."""
    base = training_snapshot()
    snapshot = dataclasses.replace(base, host=dataclasses.replace(base.host, hostname=hostname))
    app = GpuTuiApp(Sampler(ReplaySource([snapshot]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        return app.screen.query_one(HostHeader).render_line(0).text, clock_time(snapshot.taken_at)


async def test_the_host_and_the_time_are_apart():
    line, time = await first_line("dgx-sim-01")
    assert line.startswith(f"dgx-sim-01 {time} CPU "), line
    assert line.rstrip().endswith("every 1s"), line


async def test_a_long_host_name_drops_the_time_not_the_state():
    host = "gpu-node-0042.cluster"  # 21 characters: the line has room for it or the time
    line, time = await first_line(host)
    assert line.startswith(f"{host} CPU "), line
    assert time not in line and line.rstrip().endswith("every 1s"), line
