"""Pilot tests of the job view (j) and the job detail screen: rows grouped under their job's line, folded
and unfolded, sorted and filtered inside the group, the selection kept; the detail screen's figures for
the DataParallel demo's device 0 and the torchrun demo's straggler rank 13; the many-host view's jobs.
"""

from __future__ import annotations

import dataclasses

import pytest
from still import still_app, still_hosts_app
from ui_data import settle, table_keys, wait_for

from gputui.ui.screens.job_detail import JobDetail
from gputui.ui.widgets.processes import ProcessTable

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)

TORCHRUN = "job:launcher 70100"
RANKS = [f"{70120 + i}/{i}" for i in range(8)]  # rank 8 + i on GPU i
DATAPARALLEL = "job:devices 61042"


def table(app) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


def cells(app, key: str) -> dict:
    return table(app).rows_by_key[key].cells


def screen_text(screen) -> str:
    return "\n".join(str(w.render()) for w in screen.query("Static") if w.display)


async def job_view(pilot) -> None:
    await settle(pilot)
    await pilot.press("j")
    await pilot.pause()


async def open_job(pilot, key: str) -> JobDetail:
    app = pilot.app
    table(app).move_cursor(row=table_keys(app).index(key))
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, JobDetail))
    await pilot.pause()
    return app.screen


async def test_j_groups_a_jobs_rows_under_its_line_and_toggles_back():
    app = still_app("torchrun", seconds=120, interval=3600)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        flat = table_keys(app)
        assert TORCHRUN not in flat
        await pilot.press("j")
        await pilot.pause()
        keys = table_keys(app)
        assert keys[0] == TORCHRUN and sorted(keys[1:]) == RANKS
        line = cells(app, TORCHRUN)
        assert line["command"] == "▾ rank 13 lags · pretrain.py (torchrun) · 8 ranks of 16"
        assert (line["pid"], line["user"], line["gpu"], line["gpu_memory"]) == ("70100", "kai", "0-7", "470G")
        assert cells(app, keys[-1])["command"].startswith("└─ /usr/bin/python3 -u pretrain.py")
        assert cells(app, keys[1])["command"].startswith("├─ ")
        assert "jobs" in str(app.screen.query_one("#table-status").render())
        await pilot.press("j")
        await pilot.pause()
        assert table_keys(app) == flat


async def test_left_folds_a_job_under_its_line_and_right_unfolds_it():
    app = still_app("torchrun", seconds=120, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_view(pilot)
        table(app).move_cursor(row=table_keys(app).index("70125/5"))
        await pilot.press("left")  # on a rank: its job folds, the selection moves to the job's line
        await pilot.pause()
        assert table_keys(app) == [TORCHRUN]
        assert table(app).selected_key == TORCHRUN
        assert cells(app, TORCHRUN)["command"].startswith("▸ rank 13 lags · pretrain.py")
        status = str(app.screen.query_one("#table-status").render())
        assert "PROCESSES  8 " in status  # folded ranks are still counted as shown
        await pilot.press("right")
        await pilot.pause()
        assert sorted(table_keys(app)[1:]) == RANKS
        assert table(app).selected_key == TORCHRUN


async def test_sorting_and_the_filter_work_inside_the_group():
    app = still_app("torchrun", seconds=120, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_view(pilot)
        app.main.sort_by("sm")  # busiest first: rank 13 (58 %) last
        await pilot.pause()
        keys = table_keys(app)
        assert keys[0] == TORCHRUN
        assert app.snapshot is not None
        sm = {f"{p.pid}/{p.device_index}": p.sm_util for p in app.snapshot.processes}
        busy = [sm[k] for k in keys[1:]]
        assert busy == sorted(busy, reverse=True) and keys[-1] == "70125/5"
        await pilot.press("r")
        await pilot.pause()
        assert table_keys(app)[:2] == [TORCHRUN, "70125/5"]
        await pilot.press("slash", *"70123")
        await pilot.pause()
        assert table_keys(app) == [TORCHRUN, "70123/3"]


async def test_the_selection_stays_on_its_row_through_refreshes():
    app = still_app("torchrun", seconds=120, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_view(pilot)
        table(app).move_cursor(row=table_keys(app).index("70125/5"))
        snapshot = app.snapshot
        assert snapshot is not None
        # The busiest rank changes: rows change places, the selection follows its row.
        changed = dataclasses.replace(snapshot, taken_at=snapshot.taken_at + 1, processes=tuple(
            dataclasses.replace(p, gpu_memory=(p.gpu_memory or 0) * (2 if p.pid == 70125 else 1))
            for p in snapshot.processes))
        app.accept(changed)
        await pilot.pause()
        assert table_keys(app)[:2] == [TORCHRUN, "70125/5"]
        assert table(app).selected_key == "70125/5"
        table(app).move_cursor(row=0)
        app.accept(dataclasses.replace(changed, taken_at=changed.taken_at + 1))
        await pilot.pause()
        assert table(app).selected_key == TORCHRUN


async def test_job_detail_shows_the_straggler_rank_13_with_its_figures():
    app = still_app("torchrun", seconds=120, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_view(pilot)
        screen = await open_job(pilot, TORCHRUN)
        text = screen_text(screen)
        assert "Job pretrain.py (torchrun)  8 ranks of 16, GPUs 0-7, 470 GiB, torchrun pid 70100" in text
        assert "! rank 13 lags the others: 58% busy vs 94%, 0.71s a step vs 0.48s" in text
        ranks = str(screen.query_one("#job-ranks").render()).splitlines()
        # who, GPU, the NVML bar, NVML's figures, SM %, step time (probed ranks only), trend
        fields = {r.split()[1]: r.split() for r in ranks if r.startswith("rank ")}
        assert fields["13*"][2] == "5" and fields["13*"][4:7] == ["58.7G/79.6G", "58%", "0.71s"]
        assert fields["9"][2] == "1" and fields["9"][4:7] == ["58.7G/79.6G", "96%", "-"]
        assert sum(1 for r in ranks if r.strip().startswith("probe")) == 2  # ranks 8 and 13 are probed
        assert "1. Find what slows rank 13" in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main


async def test_job_detail_shows_dataparallel_device_0_above_the_others_and_out_of_memory_first():
    app = still_app("dataparallel", seconds=120, interval=3600)
    async with app.run_test(size=(80, 24)) as pilot:
        await job_view(pilot)
        assert cells(app, DATAPARALLEL)["command"].startswith(
            "▾ GPU 0 OOM in 2 min · train_dp.py (one process, 4 GPUs) · 1 process")
        assert table(app).rows_by_key[DATAPARALLEL].look()[1]["command"] == "bold $error"
        screen = await open_job(pilot, DATAPARALLEL)
        text = screen_text(screen)
        assert "! GPU 0 holds 33.8 GiB, 2.2x the others' median 15.5 GiB" in text
        assert "! GPU 0 runs out of memory first, in about 2 min" in text
        ranks = str(screen.query_one("#job-ranks").render()).splitlines()
        gpu0 = next(r for r in ranks if r.startswith("GPU 0"))
        assert "33.8G/40.0G" in gpu0 and "95%" in gpu0 and "▲2m" in gpu0
        assert all("15.5G/40.0G" in next(r for r in ranks if r.startswith(f"GPU {i}")) for i in (1, 2, 3))
        assert "Use DistributedDataParallel instead of DataParallel" in text
        assert "torchrun --nproc-per-node=4 train.py" in text


async def test_the_many_host_view_groups_each_hosts_jobs():
    app = still_hosts_app({"node1": "torchrun", "node2": "dataparallel"}, seconds=120, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await job_view(pilot)
        keys = table_keys(app)
        assert "node1//job:launcher 70100" in keys and "node2//job:devices 61042" in keys
        dp = keys.index("node2//job:devices 61042")
        assert keys[dp + 1:dp + 5] == [f"node2//61042/{i}" for i in range(4)]
        screen = await open_job(pilot, "node2//job:devices 61042")
        assert screen.host == "node2"
        text = screen_text(screen)
        assert text.startswith("node2  Job train_dp.py")
        assert "! GPU 0 holds 33.8 GiB" in text
