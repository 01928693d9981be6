"""Snapshot tests (pytest-textual-snapshot) of the detail screen of a probed process, on the leaky
demo at a fixed clock: the top (verdict headline, history) and the probe's view and analysis below.

Regenerate after an intended change: pytest tests/ui/test_ui_probe_snapshots.py --snapshot-update
"""


import pytest
from still import still_app
from ui_data import settle, wait_for

from gputui.ui.screens.detail import ProcessDetail

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


async def open_detail(pilot):
    await settle(pilot)
    await pilot.press("enter")  # the leaking job holds the most GPU memory: the first row
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ProcessDetail))
    await pilot.pause(0.3)


def test_probed_detail_screen_top(snap_compare):
    assert snap_compare(still_app("leaky", seconds=120), terminal_size=(120, 40), run_before=open_detail)


def test_probed_detail_screen_probe_view(snap_compare):
    async def scrolled(pilot):
        await open_detail(pilot)
        screen = pilot.app.screen
        screen.query_one("#detail-body").scroll_to_widget(screen.query_one("#detail-probe"),
                                                          animate=False, top=True)
        await pilot.pause(0.3)

    assert snap_compare(still_app("leaky", seconds=120), terminal_size=(120, 40), run_before=scrolled)


def test_probed_detail_screen_analysis(snap_compare):
    async def scrolled(pilot):
        await open_detail(pilot)
        screen = pilot.app.screen
        screen.query_one("#detail-body").scroll_to_widget(screen.query_one("#detail-analysis"),
                                                          animate=False, top=True)
        await pilot.pause(0.3)

    assert snap_compare(still_app("leaky", seconds=120), terminal_size=(120, 40), run_before=scrolled)
