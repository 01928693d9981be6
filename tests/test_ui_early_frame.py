"""The first sample on screen while Textual loads (ui/early_frame.py): what it writes, that it stops
once the monitor takes over, and that a signal in between leaves the terminal as it found it."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from gputui.ui.early_frame import DONE, ENTER, LEAVE, EarlyFrame, until_the_monitor_starts
from gputui.ui.signals import EXIT_SIGNALS
from ui_data import training_snapshot

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
