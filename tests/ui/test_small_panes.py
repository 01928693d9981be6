"""The monitor in a small pane (issue 47, items 1 and 9): alerts in one line with a key to read them all, never
over the process table; toasts, where a big pane still has them, above the table and never repeating the no-driver
banner; eight GPUs folded into one line at 40x10 so the processes stay in reach."""

from __future__ import annotations

import pytest
from still import still_app
from test_alerts_ui import leaky_app
from test_ui_probe import FakeWatcher, cpu_job
from ui_data import T0, device, settle, wait_for

from gputui.alerts.delivery import Delivery
from gputui.collect import open_collector
from gputui.model import Device, Host
from gputui.model.alert import Alert, AlertEvent, AlertSettings
from gputui.ui.app import AlertsDue, GpuTuiApp
from gputui.ui.main_screen import MainScreen
from gputui.ui.sources.sampler import NoDriverSource, Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.bars import plain
from gputui.ui.widgets.devices import DeviceLines, DeviceList
from gputui.ui.widgets.processes import ProcessTable

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)

LEAK = "[warning] process 51200 leaks activations"
OOM = "[critical] process 51200 runs out of GPU memory in 3 min"
SIZES = {"50x15": (50, 15), "80x24": (80, 24), "120x40": (120, 40)}


def drawn(widget) -> str:
    """The widget's lines as they are drawn."""
    return "\n".join(strip.text for strip in widget.render_lines(widget.size.region))


def said(app) -> str:
    """The alert line as drawn, or "" where it is not shown (it is mounted when something first goes wrong)."""
    line = next(iter(app.screen.query("#alerts")), None)
    return drawn(line) if line is not None and line.display else ""


def toasts(app) -> list:
    """The toasts on the screen showing (Textual mounts one widget per notification shown)."""
    from textual.widgets._toast import Toast

    return list(app.screen.query(Toast))


def covering(app, region) -> set[str]:
    """What is drawn over ``region`` of the screen, other than the widget that owns each cell there."""
    screen = app.screen
    owner = {}
    for y in range(region.y, region.bottom):
        for x in range(region.x, region.right):
            widget, _ = screen.get_widget_at(x, y)
            owner[(x, y)] = widget
    table = screen.query_one(ProcessTable)
    status = screen.query_one("#table-status")
    return {type(w).__name__ for w in owner.values() if w not in (table, status)}


def rows_in_view(app) -> list[str]:
    """The process table's rows the pane shows (the table scrolls; its first line is its header)."""
    table = app.screen.query_one(ProcessTable)
    top = table.scroll_offset.y
    return list(table.row_keys)[top:top + table.size.height - 1]


async def rung(pilot, rings) -> None:
    """Wait until the leaky demo's alerts have come, as the bell says (the alert channel delivers on a thread of
    its own)."""
    await settle(pilot)
    await wait_for(pilot, lambda: rings)
    await pilot.pause(0.2)  # (toasts, if any, mounted)


# -- item 1: alerts in a small pane ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [SIZES["50x15"], SIZES["80x24"]], ids=["50x15", "80x24"])
async def test_in_a_small_pane_the_alerts_are_one_line_and_no_toast_covers_the_table(size):
    app, rings = leaky_app(AlertSettings(desktop="off"))
    async with app.run_test(size=size, notifications=True) as pilot:
        await rung(pilot, rings)
        main = app.screen
        assert toasts(app) == []
        table = main.query_one(ProcessTable)
        assert covering(app, table.region) == set()
        assert rows_in_view(app)[:3] == ["51200/0", "52300/0", "52410/0"]  # the leaking process's row first
        line = main.query_one("#alerts")
        assert line.display and line.region.height == 1 and line.region.bottom == size[1] - 1  # over the footer
        assert said(app).startswith(" ! 2 alerts · ") and "process 51200" in said(app), said(app)
    assert rings == [1]  # the bell rings as before


async def test_the_alert_key_lists_the_alerts_newest_first_with_their_detail_and_escape_closes():
    app, _ = leaky_app(AlertSettings(enabled=False))  # alerts told by hand below, at known times
    leak = Alert("leak", "pid 51200@1.0", "warning", "process 51200 leaks activations",
                 "leak: 48.0 MiB a step, kept at train.py:131 in main", pid=51200)
    idle = Alert("gpu_idle", "gpu GPU-2", "info", "GPU 2 holds memory while idle", "1.0 GiB held for 61 min",
                 gpu="GPU-2")
    async with app.run_test(size=(50, 15), notifications=True) as pilot:
        await settle(pilot)
        app.post_message(AlertsDue(Delivery((AlertEvent("started", leak, T0),))))
        app.post_message(AlertsDue(Delivery((AlertEvent("started", idle, T0 + 60),))))
        await wait_for(pilot, lambda: len(app.notices.newest_first()) == 2)
        await pilot.pause()
        assert said(app).startswith(" ! 2 alerts · info: GPU 2 holds memory")
        await pilot.press("exclamation_mark")
        screen = app.screen
        from gputui.ui.screens.alerts import AlertsScreen

        assert isinstance(screen, AlertsScreen)
        listed = screen.text()
        assert listed.index("GPU 2 holds memory while idle") < listed.index("process 51200 leaks activations")
        assert "1.0 GiB held for 61 min" in listed and "kept at train.py:131 in main" in listed
        assert "since 09:01:00" in listed and "since 09:00:00" in listed
        # An alert that ends leaves the list, while it is open.
        app.post_message(AlertsDue(Delivery((AlertEvent("ended", idle, T0 + 120),))))
        await wait_for(pilot, lambda: "GPU 2 holds memory" not in screen.text())
        assert "process 51200 leaks activations" in screen.text()
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert said(app).startswith(" ! 1 alert · warning: process 51200 leaks")
        await pilot.press("exclamation_mark")
        assert isinstance(app.screen, AlertsScreen)
        await pilot.press("exclamation_mark")  # the same key closes it
        assert isinstance(app.screen, MainScreen)


async def test_with_no_alert_there_is_no_alert_line():
    app, _ = leaky_app(AlertSettings(enabled=False))
    async with app.run_test(size=(50, 15), notifications=True) as pilot:
        await settle(pilot)
        assert said(app) == ""
        await pilot.press("exclamation_mark")
        assert "No alert and no problem now." in app.screen.text()


async def test_outside_words_in_an_alert_are_shown_not_obeyed_and_the_ascii_look_stays_ascii():
    source = Sampler(open_collector("leaky", clock=lambda: 100.0, environ={}), watch_probes=False)
    app = GpuTuiApp(source, MonitorOptions(interval=30.0, me="dev", ascii=True, alerts=AlertSettings(enabled=False)))
    hostile = Alert("straggler", "job launcher 42", "warning", "job \x1b]0;pwned\x07 lags", "rank 3\x1b[2J slow")
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        app.post_message(AlertsDue(Delivery((AlertEvent("started", hostile, T0),))))
        await wait_for(pilot, lambda: said(app))
        line = said(app)
        assert line.isascii() and "\x1b" not in line and "job \\x1b]0;pwned\\x07 lags" in line, line
        await pilot.press("exclamation_mark")
        listed = app.screen.text()
        assert "\x1b" not in listed and "rank 3\\x1b[2J slow" in listed, listed


# -- item 1: toasts in a big pane ------------------------------------------------------------------------


async def test_in_a_big_pane_the_toasts_stay_above_the_process_table():
    app, rings = leaky_app(AlertSettings(desktop="off"))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await rung(pilot, rings)
        main = app.screen
        shown = toasts(app)
        above = main.query_one("#top").region  # the devices and the charts
        for toast in shown:
            assert toast.region.y >= above.y and toast.region.bottom <= above.bottom, (toast.region, above)
            assert toast.region.width <= 60
        assert sorted(str(t.render()).split("\n")[1] for t in shown) == sorted([LEAK, OOM])
        status = main.query_one("#table-status").region
        assert covering(app, status.union(main.query_one(ProcessTable).region)) == set()
        assert said(app).startswith(" ! 2 alerts · ")  # the line stays after the toasts go


async def test_a_crowd_of_alerts_is_one_toast_naming_the_most_urgent():
    app, _ = leaky_app(AlertSettings(enabled=False))
    crowd = [Alert("gpu_idle", f"gpu GPU-{i}", "info", f"GPU {i} holds memory while idle", gpu=f"GPU-{i}")
             for i in range(2)]
    crowd.append(Alert("oom_soon", "pid 51200@1.0", "critical", "process 51200 runs out of GPU memory in 3 min"))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        app.post_message(AlertsDue(Delivery(tuple(AlertEvent("started", a, T0) for a in crowd))))
        await pilot.pause(0.3)
        shown = [str(t.render()) for t in toasts(app)]
        assert shown == [f"3 alerts\n{OOM}, and 2 more"]
        assert toasts(app)[0].has_class("-error")


async def test_toasts_go_to_the_line_when_the_charts_are_hidden():
    app, _ = leaky_app(AlertSettings(enabled=False))  # the alert told by hand, once the charts are hidden
    oom = Alert("oom_soon", "pid 51200@1.0", "critical", "process 51200 runs out of GPU memory in 3 min",
                "under the 30 min threshold", pid=51200)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("c")  # no charts: the devices' two lines are all there is above the table
        app.post_message(AlertsDue(Delivery((AlertEvent("started", oom, T0),))))
        await pilot.pause(0.3)
        assert toasts(app) == []
        assert said(app).startswith(" ! 1 alert · critical: process 51200 runs out")


# -- item 1: no driver -----------------------------------------------------------------------------------


BANNER = "No NVIDIA driver (NVML is missing): no GPUs to show; probed processes are shown from their probes."


class Reader:
    """The host as psutil would read it, the same on every run."""

    def read(self):
        return Host(hostname="laptop", cpu_count=8, cpu_percent=37.0, memory_total=16 * 2**30,
                    memory_used=6 * 2**30, swap_total=0, swap_used=0, load_average=(1.5, 1.0, 0.5))


def no_driver_app() -> GpuTuiApp:
    from gputui.collect.nvml import NvmlUnavailable

    reason = str(NvmlUnavailable("NVML Shared Library Not Found"))
    source = NoDriverSource(reason, clock=lambda: T0, hostname="laptop", host=Reader())
    return GpuTuiApp(Sampler(source, watcher=FakeWatcher([cpu_job()])), MonitorOptions(me="bob"), banner=BANNER)


@pytest.mark.parametrize("size", [(59, 20), (120, 40)], ids=["59x20", "120x40"])
async def test_without_a_driver_the_reason_is_one_line_under_the_banner_not_a_toast(size):
    app = no_driver_app()
    async with app.run_test(size=size, notifications=True) as pilot:
        await settle(pilot)
        app.sample_now()
        await settle(pilot, 2)
        await pilot.pause(0.2)
        main = app.screen
        assert toasts(app) == []
        assert "No NVIDIA driver (NVML is missing)" in drawn(main.query_one("#header"))
        assert said(app).startswith(" ! 1 problem · cannot read the GPUs")
        assert covering(app, main.query_one(ProcessTable).region) == set()
        await pilot.press("exclamation_mark")
        assert "Try `gputui --demo` to see simulated GPUs." in app.screen.text()


# -- item 9: eight GPUs in a tiny pane -------------------------------------------------------------------


async def test_at_40x10_eight_gpus_fold_into_one_line_and_the_processes_stay_in_reach():
    app = still_app("training-node", seconds=120)
    async with app.run_test(size=(40, 10)) as pilot:
        await settle(pilot)
        main = app.screen
        devices = main.query_one(DeviceLines)
        assert devices.region.height == 1
        assert drawn(devices).startswith(" 8 GPUs "), drawn(devices)
        table = main.query_one(ProcessTable)
        keys = list(table.row_keys)
        assert len(keys) >= 8
        assert rows_in_view(app) == keys[:6]  # 10 lines: header, GPUs, the table's header, 6 rows, footer
        await pilot.press("end")
        assert table.selected_key == keys[-1] and keys[-1] in rows_in_view(app)
        await pilot.press("home")
        assert table.selected_key == keys[0] and keys[0] in rows_in_view(app)


async def test_at_40x10_g_shows_one_gpu_at_a_time_in_the_folded_line_then_all_again():
    app = still_app("training-node", seconds=120)
    async with app.run_test(size=(40, 10)) as pilot:
        await settle(pilot)
        devices = app.screen.query_one(DeviceLines)
        await pilot.press("g")
        assert drawn(devices).startswith("▶0 H100"), drawn(devices)
        await pilot.press("g")
        assert drawn(devices).startswith("▶1 H100"), drawn(devices)
        await pilot.press(*["g"] * 7)  # 2, 3 ... 7, then all eight again
        assert drawn(devices).startswith(" 8 GPUs "), drawn(devices)
        assert len(rows_in_view(app)) == 6


async def test_at_50x15_eight_gpus_keep_their_lines_and_the_table_its_rows():
    app = still_app("training-node", seconds=120)
    async with app.run_test(size=(50, 15)) as pilot:
        await settle(pilot)
        devices = app.screen.query_one(DeviceLines)
        assert devices.region.height == 4  # two GPUs a line: each GPU's own figures still fit
        assert len(rows_in_view(app)) == 8


async def test_a_taller_pane_unfolds_the_gpus():
    app = still_app("training-node", seconds=120)
    async with app.run_test(size=(40, 10)) as pilot:
        await settle(pilot)
        devices = app.screen.query_one(DeviceLines)
        assert len(devices.lines) == 1
        await pilot.resize_terminal(40, 18)
        await pilot.pause()
        assert app.screen.query_one(DeviceList).region.height == 5  # a GPU a line, scrolled (g)
        assert len(devices.lines) == 8 and drawn(devices).startswith(" 0 H100")


def test_the_folded_line_counts_the_lost_and_the_slowed_gpus():
    from gputui.ui.widgets.devices import render_summary

    gpus = (device(0), device(1, throttle_reasons=("hw_thermal",), temperature=91),
            Device(index=2, name="NVIDIA H100 80GB HBM3", lost="GPU is lost"), device(3, gpu_util=None))
    line = plain(render_summary(gpus, 40))
    # Memory and utilisation of the GPUs that answer: 20+27+41 GiB of 3x80, (40+48)/2 %.
    assert line.split() == ["4", "GPUs", "▕███░░░░▏", "88.0G/240G", "44%", "91°C", "1", "LOST", "⚠", "1",
                            "slowed"], line


# -- snapshots ---------------------------------------------------------------------------------------------


def alerting(scenario: str):
    """A still picture of ``scenario`` whose alerts are raised (no bell, no desktop notification)."""
    return still_app(scenario, seconds=120, alerts=AlertSettings(desktop="off", bell=False))


async def with_alerts(pilot) -> None:
    await settle(pilot)
    await wait_for(pilot, lambda: len(pilot.app.notices.newest_first()) == 2)
    await pilot.pause(0.5)  # (the toasts mounted, where there are toasts)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_snapshot_of_the_leaky_demos_alerts(snap_compare, size):
    assert snap_compare(alerting("leaky"), terminal_size=size, run_before=with_alerts)


def test_snapshot_of_the_alert_list_in_a_small_pane(snap_compare):
    async def listed(pilot):
        await with_alerts(pilot)
        await pilot.press("exclamation_mark")
        await pilot.pause(0.2)

    assert snap_compare(alerting("leaky"), terminal_size=(50, 15), run_before=listed)


def test_snapshot_of_eight_gpus_folded_at_40x10(snap_compare):
    assert snap_compare(still_app("training-node", seconds=120), terminal_size=(40, 10), run_before=settle)
