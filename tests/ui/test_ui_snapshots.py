"""Snapshot tests (pytest-textual-snapshot) of the monitor on fixed simulated data and a fixed clock.

Regenerate after an intended change of the picture: pytest tests/ui/test_ui_snapshots.py --snapshot-update
"""


import pytest
from still import still_app, still_hosts_app, still_replay_app
from ui_data import settle, wait_for

from gputui.ui.screens.detail import ProcessDetail

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


async def drawn(pilot):
    await settle(pilot)


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (50, 15)], ids=["120x40", "80x24", "50x15"])
def test_training_node_main_screen(snap_compare, size):
    assert snap_compare(still_app("training-node", seconds=120), terminal_size=size, run_before=drawn)


def test_faults_scenario_shows_lost_gpu_and_slowdown(snap_compare):
    assert snap_compare(still_app("faults", seconds=60), terminal_size=(120, 40), run_before=drawn)


def test_ascii_tree_view(snap_compare):
    async def tree(pilot):
        await drawn(pilot)
        await pilot.press("t")
        await pilot.pause()

    assert snap_compare(still_app("workstation", seconds=60, ascii=True), terminal_size=(100, 32),
                        run_before=tree)


def test_detail_screen(snap_compare):
    async def detail(pilot):
        await drawn(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ProcessDetail))
        await pilot.pause(0.2)

    assert snap_compare(still_app("training-node", seconds=120), terminal_size=(120, 40),
                        run_before=detail)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_many_hosts(snap_compare, size):
    hosts = {"node1": "training-node", "node2": "leaky", "node3": None, "node4": "workstation"}
    assert snap_compare(still_hosts_app(hosts, seconds=120), terminal_size=size, run_before=drawn)


def test_replay_screen(snap_compare, tmp_path):
    """gputui replay, paused 2 minutes into 3: the position in the header, the screens as live."""
    app = still_replay_app("leaky", tmp_path / "leaky.rec", seconds=180, at=120)
    assert snap_compare(app, terminal_size=(120, 40), run_before=drawn)
