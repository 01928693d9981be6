"""gputui replay: the live monitor on a recording, driven by Textual's pilot: position, play/pause,
step, jump, seek, speed, and what a recording refuses."""

from __future__ import annotations

import dataclasses

import pytest
from plain_data import judged_document
from record_helpers import KEY_BODY, change, crafted, recorded_demo
from ui_data import GIB, T0, table_keys, training_snapshot

from gputui.model import to_jsonable
from gputui.model.verdicts import LeakVerdict
from gputui.record.reader import Recording
from gputui.record.writer import Recorder
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.replay import Replay
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.header import HostHeader
from gputui.ui.widgets.processes import ProcessTable

SAMPLES = 150  # 2.5 minutes, one a second


def snapshot_at(i: int):
    """Sample i: rank 0's memory grows by a GiB every 10 seconds (what is on screen tells the time)."""
    snap = training_snapshot(T0 + i)
    procs = tuple(dataclasses.replace(p, gpu_memory=(10 + i // 10) * GIB) if p.pid == 2000 else p
                  for p in snap.processes)
    return dataclasses.replace(snap, processes=procs)


def recording(tmp_path, samples=SAMPLES):
    path = tmp_path / "r.rec"
    recorder = Recorder(path, interval=1.0, host="dgx-test-01", key_every=40)
    leaks = {"2000": to_jsonable(LeakVerdict(state="ok", reason="steady"))}
    for i in range(samples):
        recorder.add(T0 + i, judged_document(snapshot_at(i)), leaks)
    recorder.close()
    return Recording(path)


def screen_text(widget) -> str:
    return "\n".join(strip.text for strip in widget.render_lines(widget.size.region))


def table(app) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


def rank0(app) -> str:
    return next(key for key in table_keys(app) if key.startswith("2000"))


async def at(pilot, index):
    """Wait until the replay shows sample ``index``."""
    for _ in range(200):
        if pilot.app.source.index == index and pilot.app.snapshot is not None:
            break
        await pilot.pause(0.02)
    assert pilot.app.source.index == index
    await pilot.pause()



async def test_it_plays_from_the_start_and_pauses_at_the_end(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path, samples=5)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        assert app.snapshot.taken_at == T0 and not app.source.paused
        assert app.position.startswith("replay 0s / 4s  1/5  x1")
        await at(pilot, 4)  # one a second
        assert app.source.paused and app.snapshot.taken_at == T0 + 4
        assert app.history.device(0, "gpu_util").times == tuple(T0 + i for i in range(5))


async def test_step_jump_seek_and_speed(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        await pilot.press("p")
        assert app.source.paused
        await pilot.press("full_stop", "full_stop")
        await at(pilot, 2)
        await pilot.press("right_square_bracket")
        await at(pilot, 62)
        assert app.snapshot.taken_at == T0 + 62
        assert app.position.startswith("replay 1:02 / 2:29  63/150")
        # on screen: the recorded time and position in the header, rank 0's memory at second 62
        header = screen_text(app.screen.query_one(HostHeader))
        assert "09:01:02" in header and "replay 1:02 / 2:29" in header
        assert "16.0G" in str(table(app).rows_by_key[rank0(app)].cells["gpu_memory"])
        # its history rebuilt: the span before 62, every sample once, in order
        assert app.history.process((2000, 0), "gpu_memory").times == tuple(T0 + i for i in range(63))
        await pilot.press("comma")
        await at(pilot, 61)
        assert app.history.process((2000, 0), "gpu_memory").times[-1] == T0 + 61
        await pilot.press("left_square_bracket")
        await at(pilot, 1)
        await pilot.press("e")
        await at(pilot, SAMPLES - 1)
        await pilot.press("b")
        await at(pilot, 0)
        assert app.history.process((2000, 0), "gpu_memory").times == (T0,)
        for speed in (2, 4, 8, 1):
            await pilot.press("x")
            assert app.source.speed == speed and app.position.endswith(f"x{speed}")
        assert table_keys(app)  # the process table is there, as live


async def test_playing_at_x8_moves_eight_times_as_fast(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        for _ in range(3):
            await pilot.press("x")
        assert app.source.speed == 8
        await pilot.pause(1.0)
        assert 4 <= app.source.index <= 12  # about 8 samples in a second (x1 would be 1)


async def test_signals_and_probe_requests_are_refused(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path, samples=3)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        await pilot.press("K")
        await pilot.pause()
        app.record_sites(2000, on=True, steps=10)
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("no process to send SIGKILL" in m for m in said)
        assert any("no process to send a request" in m for m in said)
        assert app.screen_stack == [app.main]  # no confirmation asked: nothing to confirm


async def test_the_help_says_which_keys_this_view_refuses(tmp_path):
    """The help lists every key, as the footer does not: those a recording refuses (signals, attach) are
    said to be refused here; the live monitor's are not (gputui web's tabs refuse the same way)."""
    app = GpuTuiApp(Replay(recording(tmp_path, samples=3)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        app.action_help()
        await pilot.pause()
        refused = {binding_id for _, rows in app.screen.sections for _, does, binding_id in rows
                   if does.endswith("(not in this view: pressed, it says why)")}
        assert {"signal.interrupt", "signal.terminate", "signal.kill", "probe.attach", "probe.detach"} <= refused
        assert "quit" not in refused and "help" not in refused


async def test_what_a_recording_cannot_do_is_refused_alike(tmp_path):
    # The replay declares what it cannot do; the app refuses each the same way, in one place: a
    # warning saying why, and nothing opened (the detail screen asks for sites with a Message).
    from gputui.ui.requests import RecordSites

    app = GpuTuiApp(Replay(recording(tmp_path, samples=3)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        for key in ("plus", "K", "A"):
            await pilot.press(key)
            await pilot.pause()
        app.screen.post_message(RecordSites(2000, on=True, steps=16))
        await pilot.pause()
        notes = [(n.title, n.message, n.severity) for n in app._notifications][-4:]
        assert notes == [
            ("", "A recording keeps its own interval: x changes the replay's speed.", "warning"),
            ("", "A recording: there is no process to send SIGKILL to.", "warning"),
            ("Probe not attached", "A recording: there is no process to attach a probe to or detach one from.",
             "warning"),
            ("Allocation sites", "A recording: there is no process to send a request to.", "warning"),
        ]
        assert app.screen_stack == [app.main]  # nothing to confirm


async def test_a_sample_that_does_not_decode_is_said_and_the_replay_stays(tmp_path):
    # a crafted file: its CRCs right, a patch not
    path = crafted(tmp_path / "c.rec", KEY_BODY, change({"devices": {"n": 10 ** 9, "i": {}}}), KEY_BODY)
    app = GpuTuiApp(Replay(Recording(path), paused=True), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        await pilot.press("full_stop")
        for _ in range(100):
            if app._notifications:
                break
            await pilot.pause(0.02)
        said = [n.message for n in app._notifications]
        assert said == ["sample 1 does not decode: a change to an array of 4 items that asks for 1000000000"]
        assert app.source.index == 0 and app.snapshot.taken_at == T0  # still showing what it showed


@pytest.mark.usefixtures("utc")
async def test_a_process_an_oom_ended_keeps_its_row_in_a_replay(tmp_path, monkeypatch):
    """The leaky demo's job runs out at 09:03:09 and is gone 3 s later: replayed after that, its ✗ row is
    there with its report, as it was in the live monitor."""
    monkeypatch.setenv("GPUTUI_OOM_DIR", str(tmp_path / "oom"))
    recording = Recording(recorded_demo(tmp_path, 198, scenario="leaky", interval=3))
    app = GpuTuiApp(Replay(recording, start=len(recording) - 1, paused=True), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, len(recording) - 1)
        assert "51200/0" not in table(app).rows_by_key
        ended = table(app).rows_by_key["51200/oom"]
        assert (ended.cells["pid"], ended.cells["probe"], ended.cells["gpu"], ended.cells["type"]) == (
            "51200", "✗", "0", "end")
        assert ended.cells["gpu_memory"] == "34.6G" and ended.cells["trend"] == "✗ OOM 09:03:09"
        assert ended.report.last_oom.line == "model.py:41 in forward"


async def test_ctrl_c_quits_the_replay(tmp_path):
    app = GpuTuiApp(Replay(recording(tmp_path, samples=5), paused=True), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        assert app.return_code is None
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0


async def test_the_footer_offers_only_the_keys_a_replay_takes(tmp_path):
    # Issue 47 item 5: replay's footer listed "A Attach", which replay refuses. Left out of the footer, the
    # key still says why when pressed (test_what_a_recording_cannot_do_is_refused_alike).
    from test_ui_app import key_bar_text

    app = GpuTuiApp(Replay(recording(tmp_path, samples=3)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        text = key_bar_text(app)
        assert "Attach" not in text and "Pause" in text and "Speed" in text, text
        await pilot.press("enter")  # the detail screen: its "Record sites" is refused too
        await pilot.pause()
        text = key_bar_text(app)
        assert "Record sites" not in text and "Back" in text, text
