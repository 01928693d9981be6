"""The first sample on screen while Textual loads (ui/startup/early_frame.py): what it writes, that it stops
once the monitor takes over, and that a signal in between leaves the terminal as it found it."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
from ui_data import training_snapshot

from gputui.ui.actions.signals import EXIT_SIGNALS
from gputui.ui.startup.early_frame import DONE, ENTER, LEAVE, EarlyFrame, until_the_monitor_starts

PLAIN = SimpleNamespace(color=False, ascii=False)


@pytest.fixture
def pipe():
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    os.close(read)
    os.close(write)


def written(fd: int) -> str:
    try:
        return os.read(fd, 1 << 20).decode()
    except BlockingIOError:
        return ""


def test_the_frame_is_the_plain_picture_cut_to_the_window(pipe, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("LINES", "12")
    frame = EarlyFrame(PLAIN, pipe[1])
    frame.draw(training_snapshot())
    out = written(pipe[0])
    assert out.startswith(ENTER) and out.endswith(DONE) and frame.drawn
    lines = out[len(ENTER):-len(DONE)].split("\r\n")
    assert len(lines) == 12  # the window's height, no more: nothing scrolls
    assert all(len(line) <= 60 for line in lines)
    assert "H100" in out and "\x1b[3" not in out  # devices drawn, no colour when asked for none


def test_after_the_hand_over_nothing_is_written(pipe):
    frame = EarlyFrame(PLAIN, pipe[1])
    frame.hand_over()
    frame.draw(training_snapshot())
    frame.undo()
    assert written(pipe[0]) == "" and not frame.drawn


def test_undo_leaves_the_alternate_screen_only_if_the_frame_entered_it(pipe):
    frame = EarlyFrame(PLAIN, pipe[1])
    frame.undo()
    assert written(pipe[0]) == ""
    frame = EarlyFrame(PLAIN, pipe[1])
    frame.draw(training_snapshot())
    written(pipe[0])
    frame.undo()
    assert written(pipe[0]) == LEAVE
    frame.draw(training_snapshot())  # too late: the process is on its way out
    assert written(pipe[0]) == ""


def test_a_signal_before_the_monitor_starts_restores_the_terminal(pipe):
    before = {s: signal.getsignal(s) for s in EXIT_SIGNALS}
    frame = EarlyFrame(PLAIN, pipe[1])
    with pytest.raises(SystemExit) as ended:
        with until_the_monitor_starts(frame):
            frame.draw(training_snapshot())
            os.kill(os.getpid(), signal.SIGTERM)
            pytest.fail("SIGTERM did not end it")
    assert ended.value.code == 128 + signal.SIGTERM
    assert written(pipe[0]).endswith(LEAVE)
    assert {s: signal.getsignal(s) for s in EXIT_SIGNALS} == before


def test_without_trouble_the_monitor_takes_over(pipe):
    frame = EarlyFrame(PLAIN, pipe[1])
    with until_the_monitor_starts(frame):
        frame.draw(training_snapshot())
    written(pipe[0])
    frame.draw(training_snapshot())
    assert written(pipe[0]) == ""  # handed over: the monitor paints from now on


def _first_sample_drawn(**filters) -> tuple[list, object]:
    """What the early frame is shown of the first sample of the torchrun demo, in order, with "proc"
    where /proc is read for the processes' details; and the first sample the monitor gets."""
    from gputui.collect import open_collector
    from gputui.ui.sources.sampler import Sampler
    from gputui.ui.startup.launch import open_ahead

    now = [0.0]
    collector = open_collector("torchrun", clock=lambda: now[0])
    now[0] = 60.0  # the job is running
    events: list = []
    inspect = collector.processes.inspect

    def inspecting(pids):
        events.append("proc")
        return inspect(pids)

    collector.processes.inspect = inspecting
    try:
        sampler = Sampler(collector, watch_probes=False, **filters)
        _, first = open_ahead(lambda: (sampler, None), events.append)
        return events, first.result(timeout=30)
    finally:
        collector.close()


def test_the_gpus_are_drawn_before_the_processes_are_looked_up_in_proc():
    """Issue 31 item 21: the first frame comes from NVML's answers alone; each process's user, command
    and host figures (psutil, /proc: the slower part of a first sample) are drawn when read."""
    events, full = _first_sample_drawn()
    outline, proc, last = events
    assert proc == "proc" and last is full
    assert outline.devices == full.devices and len(outline.devices) == 8
    pids = sorted(p.pid for p in full.processes)
    assert len(pids) == 8 and sorted(p.pid for p in outline.processes) == pids
    assert all(p.user is None and p.command == () and p.host_memory is None for p in outline.processes)
    assert all(p.user and p.command and p.host_memory for p in full.processes)
    assert outline.jobs == () and len(full.jobs) == 1


def test_a_filter_by_what_proc_says_is_drawn_once_it_is_read():
    events, full = _first_sample_drawn(users=("alice",))
    assert events == ["proc", full]  # an outline could show another user's processes


def test_a_driver_that_fails_to_open_is_said_at_once():
    """The main thread waits for the first sample before importing Textual: a failed opening ends
    that wait at once, and is raised where the opening's result is asked for."""
    from gputui.ui.startup.launch import open_ahead

    def opener():
        raise RuntimeError("no driver")

    opened, first = open_ahead(opener)
    assert first.done(timeout=10) and opened.done(timeout=0)
    with pytest.raises(RuntimeError, match="no driver"):
        opened.result()
