"""Pilot tests of the many-host view: a line per host with its GPUs under it, one process table with
a HOST column, sort and filter across hosts, the detail screen of a process on another host, and
no signal sent to another machine."""

from __future__ import annotations

import pytest
from still import still_hosts_app
from ui_data import settle, table_keys, wait_for

from gputui.ui.hosts_screen import HostsScreen
from gputui.ui.screens.detail import ProcessDetail
from gputui.ui.widgets.hosts import HostLines
from gputui.ui.widgets.line import Line
from gputui.ui.widgets.processes import ProcessTable

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)

HOSTS = {"node1": "training-node", "node2": "leaky", "node3": None, "node4": "training-node"}


def app_of_hosts():
    return still_hosts_app(HOSTS, seconds=60, interval=30.0)


def lines_of(app) -> list[str]:
    return [str(line) for line in app.screen.query_one(HostLines).render().split("\n")]


async def test_a_line_per_host_with_its_gpus_under_it():
    app = app_of_hosts()
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, HostsScreen)
        lines = lines_of(app)
        starts = [i for i, line in enumerate(lines) if line.startswith("node")]
        assert [lines[i].split()[0] for i in starts] == ["node1", "node2", "node3", "node4"]
        assert starts == [0, 9, 11, 12]  # 8 GPUs under node1, 1 under node2, none under node3
        assert "live  8 GPUs  CPU" in lines[0] and "demo:training-node" in lines[0]
        assert lines[11] == "node3  unreachable: connect to host node3 port 22: Connection refused"
        header = str(app.screen.query_one("#header", Line).render())
        assert header.startswith("4 hosts  3 live, 1 unreachable") and "self 1.0% CPU" in header


async def test_one_table_with_a_host_column_and_pids_that_repeat_across_hosts():
    app = app_of_hosts()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        assert table.column_ids[0] == "host"
        keys = table_keys(app)
        assert "node1//48231/0" in keys and "node4//48231/0" in keys  # the same pid on two hosts
        every = sum(len(h.snapshot.processes) for h in app.source.hosts if h.snapshot is not None)
        assert len(keys) == len(set(keys)) == every == 23  # every process of every host, once
        assert table.rows_by_key["node4//48231/0"].cells["host"] == "node4"
        status = str(app.screen.query_one("#table-status").render())
        assert status.startswith("PROCESSES  23")


async def test_sort_and_filter_across_hosts():
    app = app_of_hosts()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.sort_by("host", reverse=True)
        await pilot.pause()
        hosts = [key.split("//")[0] for key in table_keys(app)]
        assert hosts == sorted(hosts, reverse=True) and hosts[0] == "node4"
        screen.sort_by("gpu_memory")
        await pilot.pause()
        table = screen.query_one(ProcessTable)
        memory = [table.rows_by_key[key].process.gpu_memory for key in table_keys(app)]
        assert memory == sorted(memory, reverse=True)  # one order across hosts
        await pilot.press("slash", *"node2", "enter")
        await pilot.pause()
        assert {key.split("//")[0] for key in table_keys(app)} == {"node2"}
        assert "filter “node2”" in str(screen.query_one("#table-status").render())


async def test_the_detail_of_a_probed_process_on_the_second_host():
    app = app_of_hosts()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=table_keys(app).index("node2//51200/0"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetail))
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, ProcessDetail) and (detail.host, detail.pid) == ("node2", 51200)
        assert detail.report is not None and detail.report.pid == 51200  # node2's own probe report
        title = str(detail.query_one("#detail-title").render())
        assert title.startswith("node2  Process 51200  on GPU 0")
        await pilot.press("s")  # record sites: not sent to another machine
        await pilot.pause()
        assert any("read-only" in n.message for n in app._notifications)


@pytest.mark.parametrize("key, command", [("I", "kill -INT"), ("T", "kill -TERM"), ("K", "kill -KILL")])
async def test_signals_are_never_sent_to_another_host(key, command):
    """Each key's suggestion names that key's signal (all three once said kill -TERM)."""
    app = app_of_hosts()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert said[-1] == ("Process 48231 runs on node1: the many-host view is read-only and sends no signal "
                            f"to another machine. To signal it there: ssh node1 {command} 48231"), said
        assert isinstance(app.screen, HostsScreen)  # no confirmation asked: nothing to send


async def test_a_narrow_pane_keeps_the_host_column():
    app = app_of_hosts()
    async with app.run_test(size=(60, 20)) as pilot:
        await settle(pilot)
        assert app.screen.query_one(ProcessTable).column_ids[0] == "host"
        assert lines_of(app)[0].startswith("node1  live  8 GPUs")


async def test_a_hosts_own_problems_are_on_its_line():
    app = still_hosts_app({"node1": "faults"}, seconds=60, interval=30.0)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        problems = app.source.hosts[0].snapshot.problems
        assert problems
        assert f"! {problems[0]}" in lines_of(app)[0]


async def test_ctrl_c_quits_the_many_host_view():
    app = app_of_hosts()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.return_code is None
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0
