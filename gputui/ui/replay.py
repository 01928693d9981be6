"""``gputui replay FILE``: the live monitor on a recording, with time travel.

The recorded samples go through the monitor's own path (its HostState, its screens) in order, with the
judgements the recording monitor made of them, so each position shows what the live monitor showed then.
Seeking anywhere but one sample forward builds the HostState again, its history from the samples of the
history's span before the new position, off the UI thread.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.message import Message

from gputui.analysis.history import History
from gputui.record.reader import Recording
from gputui.sample.judge import Sample
from gputui.sample.state import HostState
from gputui.ui import bindings
from gputui.ui.app import GpuTuiApp
from gputui.ui.replay_source import SPEEDS, RecordingSource
from gputui.untrusted import visible


class Replayed(Message):
    """The sample at ``index`` decoded and judged as it was recorded, with the history before it where it
    was rebuilt."""

    def __init__(self, index: int, sample: Sample, history: History | None) -> None:
        super().__init__()
        self.index, self.sample, self.history = index, sample, history


class ReplayApp(GpuTuiApp):
    """The live monitor's screens and keys on a recording, plus play/pause, step, jump and speed."""

    HELP_SECTION = bindings.REPLAY_KEYS
    BINDINGS = bindings.REPLAY

    def __init__(self, recording: Recording, *, start: int = 0, paused: bool = False, **options: Any) -> None:
        """``start``: the sample shown first; ``paused``: stay there (pictures, tests)."""
        source = RecordingSource(recording)
        super().__init__(None, interval=recording.interval, autostart=False, readonly=True, source=source,
                         **options)
        self.recording, self.recording_source = recording, source
        self.paused = paused
        self.index = -1  # the sample on screen
        self.wanted = start  # the sample asked for last: answers for any other are late, and dropped
        self.speed = SPEEDS[0]

    @property
    def position(self) -> str:
        """The header's word on where the replay is (the recording's words for it)."""
        return self.recording_source.position(self.index, self.speed)

    def on_mount(self) -> None:
        # (Textual calls the monitor's own on_mount too, first: it sets up the screens.)
        self.go(self.wanted)

    # -- moving through the recording ----------------------------------------------------------

    def go(self, index: int) -> None:
        """Show sample ``index`` (clamped to the recording)."""
        index = self.recording_source.clamp(index)
        if self._next is not None:
            self._next.stop()
            self._next = None
        self.wanted = index
        self._decode(index, rebuild=index != self.index + 1)

    @work(thread=True, exclusive=True, group="replay", exit_on_error=False)
    def _decode(self, index: int, *, rebuild: bool) -> None:
        try:
            read = self.recording_source.read(index, self.history if rebuild else None, lambda: self.wanted == index)
        except ValueError as exc:  # a sample that is not one (a crafted file: its CRC is right): said, not shown
            self.call_from_thread(self.notify, visible(str(exc)), severity="error", timeout=8)
            return
        if read is not None:
            self.post_message(Replayed(index, *read))

    def on_replayed(self, message: Replayed) -> None:
        if message.index != self.wanted:
            return
        if message.history is not None:
            self.state = HostState(message.history)
        self.index = message.index
        self.accept(message.sample)
        if self.index == self.recording_source.last and not self.paused:
            self.paused = True
            self.notify("The end of the recording: b goes back to its start.", timeout=4)
            self.main.render_snapshot()
        self._play_on()

    def _play_on(self) -> None:
        wait = None if self.paused else self.recording_source.wait(self.index, self.speed)
        if wait is not None:
            self._next = self.set_timer(wait, lambda: self.go(self.index + 1))

    def action_toggle_pause(self) -> None:
        """Play or pause (at the end, play starts again from the start)."""
        self.paused = not self.paused
        if self.paused and self._next is not None:
            self._next.stop()
            self._next = None
        elif not self.paused:
            if self.index >= self.recording_source.last:
                self.go(0)
            else:
                self._play_on()
        self.main.render_snapshot()

    def action_step(self, samples: int) -> None:
        self.paused = True
        self.go(self.index + samples)

    def action_jump(self, seconds: float) -> None:
        self.go(self.recording_source.jump(self.index, seconds))

    def action_seek(self, index: int) -> None:
        self.go(self.recording_source.seek(index))

    def action_speed(self) -> None:
        self.speed = SPEEDS[(SPEEDS.index(self.speed) + 1) % len(SPEEDS)]
        self.main.render_snapshot()
        if self._next is not None:  # the next sample comes at the new speed
            self._next.stop()
            self._next = None
            self._play_on()

