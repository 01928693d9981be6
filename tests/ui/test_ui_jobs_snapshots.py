"""Snapshot tests (pytest-textual-snapshot) of the job view (j) and the job detail screen, on the demos at
a fixed clock: the torchrun job with its straggler, the training node's job among other processes, the
DataParallel job whose device 0 runs out first.

Regenerate after an intended change: pytest tests/ui/test_ui_jobs_snapshots.py --snapshot-update
"""


import pytest
from still import still_app
from ui_data import settle

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


async def job_view(pilot):
    await settle(pilot)
    await pilot.press("j")
    await pilot.pause()


async def job_detail(pilot):
    await job_view(pilot)
    await pilot.press("home", "enter")  # the job holds the most GPU memory: its line is the first
    await pilot.pause(0.3)


@pytest.mark.parametrize(("scenario", "size"), [("torchrun", (120, 40)), ("training-node", (80, 24))],
                         ids=["torchrun-120x40", "training-node-80x24"])
def test_job_view(snap_compare, scenario, size):
    assert snap_compare(still_app(scenario, seconds=120), terminal_size=size, run_before=job_view)


@pytest.mark.parametrize(("scenario", "size"), [("dataparallel", (120, 40)), ("torchrun", (80, 24))],
                         ids=["dataparallel-120x40", "torchrun-80x24"])
def test_job_detail(snap_compare, scenario, size):
    assert snap_compare(still_app(scenario, seconds=120), terminal_size=size, run_before=job_detail)
