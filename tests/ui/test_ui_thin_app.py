"""A thin app (issue 46): GpuTuiApp composes, its source keeps its own state. The replay's position and the many-host
view's hosts are the source's, read by the screens through it; the app takes a handful of arguments, the user's
options as one MonitorOptions."""

from __future__ import annotations

import inspect

from still import still_hosts_app
from test_ui_replay import at, recording
from ui_data import make_app, settle

from gputui.options import Options
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.replay import Replay
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.table.columns import DEFAULT

# What the replay and the many-host view wrote into the app, before their sources kept it.
REPLAYS = {"index", "wanted", "speed", "playback", "paused"}
MANY_HOSTS = {"hosts", "states", "sampled_at", "cost"}


def own_attributes(app: GpuTuiApp) -> set[str]:
    """The attributes the app has beyond Textual's App: its instance's and its class's."""
    from textual.app import App

    return (set(vars(app)) | set(dir(GpuTuiApp))) - set(dir(App))


def test_the_app_takes_a_handful_of_arguments():
    assert list(inspect.signature(GpuTuiApp.__init__).parameters) == [
        "self", "source", "options", "banner", "first_sample", "requester", "attacher"]


def test_the_monitors_options_are_the_users_options():
    options = Options(interval=2.0, readonly=True, demo="leaky", ascii=True, theme="light", keys={"quit": "x"},
                      columns=("pid", "user"))
    asked = MonitorOptions.of(options, handle_signals=True)
    assert asked == MonitorOptions(interval=2.0, readonly=True, simulated=True, ascii=True, theme="light",
                                   columns=("pid", "user"), keymap={"quit": "x"}, alerts=options.alerts,
                                   handle_signals=True)
    assert MonitorOptions.of(Options()) == MonitorOptions(alerts=Options().alerts, columns=DEFAULT)
    assert MonitorOptions.of(Options(), alerts=None, readonly=True).alerts is None


async def test_the_replays_position_is_the_replays(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path, samples=5), paused=True), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        await pilot.press("x", "full_stop")  # faster, then one sample on
        await at(pilot, 1)
        assert (app.source.index, app.source.wanted, app.source.speed, app.source.paused) == (1, 1, 2, True)
        assert app.position.endswith("2/5  x2")
        assert not (REPLAYS | MANY_HOSTS) & own_attributes(app)


async def test_the_many_host_views_hosts_are_its_samplers():
    app = still_hosts_app({"node1": "training-node", "node2": None}, seconds=30, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        source = app.source
        assert [h.name for h in source.hosts] == ["node1", "node2"] and set(source.states) == {"node1"}
        assert source.cost.cpu_percent == 1.0 and source.sampled_at is not None
        assert app.source.host_state("node1") is source.states["node1"]
        assert not (REPLAYS | MANY_HOSTS) & own_attributes(app)


async def test_pausing_the_live_monitor_pauses_its_sampler():
    app = make_app(interval=0.25)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        assert app.source.paused
        await pilot.press("p")
        assert not app.source.paused
        assert not (REPLAYS | MANY_HOSTS) & own_attributes(app)
