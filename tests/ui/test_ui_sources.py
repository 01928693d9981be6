"""What a monitor's source cannot do, it declares (ui/sources/__init__.py), in the user's words; the app asks its
source and refuses in one place (GpuTuiApp.refused), whichever source feeds it (issue 34)."""

from __future__ import annotations

from record_helpers import recorded_demo
from still import FrozenHosts
from ui_data import ReplaySource, training_snapshot

from gputui.model import HostView
from gputui.record.reader import Recording
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources import INTERVAL, PROBE, RECORD_SITES, SIGNAL
from gputui.ui.sources.hosts_sampler import HostsSampler
from gputui.ui.sources.replay_source import RecordingSource
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.table.rows import Row

EVERYTHING = (SIGNAL, PROBE, RECORD_SITES, INTERVAL)


def row(pid: int, host: str | None) -> Row:
    return Row(f"{pid}/0", pid, 0, lambda: ({}, {}), host=host)


def test_this_machines_sampler_can_do_everything():
    sampler = Sampler(ReplaySource([training_snapshot()]), watch_probes=False)
    assert [sampler.cannot(what, row(2000, None)) for what in EVERYTHING] == [None] * 4


def test_a_recording_declares_all_four_refusals(tmp_path):
    source = RecordingSource(Recording(recorded_demo(tmp_path, 2)))
    assert {what: source.cannot(what, None) for what in EVERYTHING} == {
        SIGNAL: "A recording: there is no process to send {signal} to.",
        PROBE: "A recording: there is no process to attach a probe to or detach one from.",
        RECORD_SITES: "A recording: there is no process to send a request to.",
        INTERVAL: "A recording keeps its own interval: x changes the replay's speed.",
    }


def test_the_many_host_view_refuses_probes_naming_the_selected_process_host():
    sampler = HostsSampler(FrozenHosts((HostView("node1", "live", None, 0.5, training_snapshot()),)))
    assert sampler.cannot(PROBE, row(48231, "node1")) == (
        "Process 48231 runs on node1: the many-host view is read-only and attaches no probe on another machine. "
        "To attach one there: ssh node1 gputui attach 48231")
    assert sampler.cannot(PROBE, None) == ("The many-host view is read-only: it attaches no probe on another "
                                           "machine. Run gputui attach PID on that host.")
    assert sampler.cannot(RECORD_SITES, None).startswith("The many-host view is read-only: no request is sent")
    assert sampler.cannot(SIGNAL, None) is None and sampler.cannot(INTERVAL, None) is None  # (the screen's, and ok)


def test_no_app_class_keeps_refusals_of_its_own():
    assert "CANNOT" not in vars(GpuTuiApp)  # its sources', asked in one place: GpuTuiApp.cannot


def test_one_app_class_for_every_source():
    # The many-host view and the replay were apps of their own; what differs by source is the source's now.
    import importlib
    import pkgutil

    from textual.app import App

    import gputui.ui

    apps = set()
    for found in pkgutil.walk_packages(gputui.ui.__path__, "gputui.ui."):
        module = importlib.import_module(found.name)
        apps |= {value for value in vars(module).values()
                 if isinstance(value, type) and issubclass(value, App) and value.__module__ == module.__name__}
    assert apps == {GpuTuiApp}


def test_a_recording_says_where_steps_jumps_and_seeks_land(tmp_path):
    source = RecordingSource(Recording(recorded_demo(tmp_path, 5)))  # samples at 0, 1, 2, 3, 4 s
    assert (source.last, source.clamp(-3), source.clamp(9)) == (4, 0, 4)
    assert (source.seek(-1), source.seek(2)) == (4, 2)
    assert (source.jump(1, 2.0), source.jump(4, -60.0), source.jump(2, 0.4)) == (3, 0, 3)  # at least one on
    assert (source.wait(0, 1), source.wait(0, 4), source.wait(4, 1)) == (1.0, 0.25, None)
    assert source.position(2, 4) == "replay 2s / 4s  3/5  x4"


def footer_words(app) -> set[str]:
    """The keys' words the footer shows: the bindings live on the screen showing."""
    return {active.binding.description for active in app.active_bindings.values()
            if active.enabled and active.binding.show}


async def test_the_replay_keys_are_a_recordings_only(tmp_path):
    from test_ui_replay import at, recording
    from ui_data import make_app, settle

    from gputui.ui.sources.replay import Replay

    live = make_app()
    async with live.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert {"Pause", "Tree"} <= footer_words(live) and not {"-1 min", "+1 min", "Speed"} & footer_words(live)
        assert live.check_action("speed", ()) is False and live.check_action("jump", (60,)) is False
        await pilot.press("x", "right_square_bracket")  # nothing to play: not a key here
        assert (live.player, live.position) == (None, None)  # no recording: nothing plays
    replay = GpuTuiApp(Replay(recording(tmp_path, samples=5), paused=True), MonitorOptions(me="bob"))
    async with replay.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        assert {"Pause", "-1 min", "+1 min", "Speed"} <= footer_words(replay)
        await pilot.press("x")
        assert replay.source.speed == 2 and replay.position.endswith("x2")
