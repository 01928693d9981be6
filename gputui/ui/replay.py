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

from gputui import units
from gputui.analysis.history import History
from gputui.record.reader import Recording
from gputui.sample.judge import Sample
from gputui.sample.state import HostState
from gputui.ui import bindings
from gputui.ui.app import GpuTuiApp
from gputui.ui.replay_source import RecordingSource
from gputui.untrusted import visible

SPEEDS = (1, 2, 4, 8)
LONGEST_WAIT = 5.0  # seconds: a gap in the recording (a suspended machine) is not waited out in full


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
        """The header's word on where the replay is: time into the recording, its length, the speed."""
        times = self.recording.times
        at = times[max(self.index, 0)] - times[0]
        return (f"replay {units.elapsed(at)} / {units.elapsed(times[-1] - times[0])}"
                f"  {max(self.index, 0) + 1}/{len(times)}  x{self.speed}")

    def on_mount(self) -> None:
        # (Textual calls the monitor's own on_mount too, first: it sets up the screens.)
        self.go(self.wanted)

    # -- moving through the recording ----------------------------------------------------------

    def go(self, index: int) -> None:
        """Show sample ``index`` (clamped to the recording)."""
        index = min(max(index, 0), len(self.recording) - 1)
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
        if self.index == len(self.recording) - 1 and not self.paused:
            self.paused = True
            self.notify("The end of the recording: b goes back to its start.", timeout=4)
            self.main.render_snapshot()
        self._play_on()

    def _play_on(self) -> None:
        if self.paused or self.index + 1 >= len(self.recording):
            return
        times = self.recording.times
        gap = min(times[self.index + 1] - times[self.index], LONGEST_WAIT)
        self._next = self.set_timer(max(0.02, gap / self.speed), lambda: self.go(self.index + 1))

    def action_toggle_pause(self) -> None:
        """Play or pause (at the end, play starts again from the start)."""
        self.paused = not self.paused
        if self.paused and self._next is not None:
            self._next.stop()
            self._next = None
        elif not self.paused:
            if self.index + 1 >= len(self.recording):
                self.go(0)
            else:
                self._play_on()
        self.main.render_snapshot()

    def action_step(self, samples: int) -> None:
        self.paused = True
        self.go(self.index + samples)

    def action_jump(self, seconds: float) -> None:
        times = self.recording.times
        target = self.recording.index_at(times[self.index] + seconds)
        if seconds > 0 and target == self.index:
            target += 1  # a gap longer than the jump: at least one sample on
        self.go(target)

    def action_seek(self, index: int) -> None:
        self.go(index if index >= 0 else len(self.recording) - 1)

    def action_speed(self) -> None:
        self.speed = SPEEDS[(SPEEDS.index(self.speed) + 1) % len(SPEEDS)]
        self.main.render_snapshot()
        if self._next is not None:  # the next sample comes at the new speed
            self._next.stop()
            self._next = None
            self._play_on()

