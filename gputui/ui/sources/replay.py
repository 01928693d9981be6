"""``gputui replay FILE``: a recording as the monitor's source, played in time, with time travel.

The recorded samples go through the monitor's own path (its HostState, its screens) in order, with the
judgements the recording monitor made of them, so each position shows what the live monitor showed then.
Seeking anywhere but one sample forward builds the HostState again, its history from the samples of the
history's span before the new position, off the UI thread. Where the replay is (``index``, ``wanted``, ``speed``,
``paused``) is the Replay's own; the header reads it in ``position_words``. The replay's keys (GpuTuiApp's, live
only on a source that PLAYS) come here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.analysis.history import History
from gputui.record.reader import Recording
from gputui.sample.judge import Sample
from gputui.sample.state import HostState
from gputui.ui.app import Delivered, GpuTuiApp
from gputui.ui.sources import REPLAY_KEYS
from gputui.ui.sources.replay_source import SPEEDS, RecordingSource
from gputui.untrusted import visible

if TYPE_CHECKING:
    from textual.timer import Timer


class Replay(RecordingSource):
    """The samples of ``recording`` played on the app it starts on: the sample asked for is decoded in a
    worker, shown, and the next one timed."""

    HELP_SECTION = REPLAY_KEYS
    PLAYS = True

    def __init__(self, recording: Recording, *, start: int = 0, paused: bool = False) -> None:
        """``start``: the sample shown first; ``paused``: stay there (pictures, tests)."""
        super().__init__(recording)
        self.first = start
        self.paused = paused
        # The sample on screen, the one asked for last (a decoded answer for any other is dropped), the speed.
        self.index, self.wanted, self.speed = -1, 0, 1
        self._app: GpuTuiApp | None = None
        self._next: Timer | None = None  # the next sample's timer, while playing

    @property
    def app(self) -> GpuTuiApp:
        assert self._app is not None, "a replay plays once it has started on an app"
        return self._app

    def start(self, app: GpuTuiApp) -> None:
        self._app = app
        self.go(self.first)

    def own_interval(self) -> float | None:
        return self.recording.interval

    def position_words(self, app: GpuTuiApp) -> str | None:
        return self.position(self.index, self.speed)

    # -- moving through the recording ----------------------------------------------------------

    def go(self, index: int) -> None:
        """Show sample ``index`` (clamped to the recording)."""
        app = self.app
        index = self.clamp(index)
        self._stop()
        self.wanted = index  # answers for any other are late, and dropped
        rebuild = index != self.index + 1
        app.run_worker(lambda: self._decode(index, rebuild=rebuild), thread=True, exclusive=True, group="replay",
                       exit_on_error=False)

    def _decode(self, index: int, *, rebuild: bool) -> None:
        app = self.app
        try:
            read = self.read(index, app.history if rebuild else None, lambda: self.wanted == index)
        except ValueError as exc:  # a sample that is not one (a crafted file: its CRC is right): said, not shown
            message = visible(str(exc))
            app.post_message(Delivered(lambda: app.notify(message, severity="error", timeout=8)))
            return
        if read is not None:
            app.post_message(Delivered(lambda: self._show(index, *read)))

    def _show(self, index: int, sample: Sample, history: History | None) -> None:
        """Sample ``index`` decoded and judged as it was recorded, with the history before it where it was
        rebuilt."""
        app = self.app
        if index != self.wanted:
            return
        if history is not None:
            app.state = HostState(history)
        self.index = index
        app.accept(sample)
        if index == self.last and not self.paused:
            self.paused = True
            app.notify("The end of the recording: b goes back to its start.", timeout=4)
            app.main.render_snapshot()
        self._play_on()

    def _play_on(self) -> None:
        wait = None if self.paused else self.wait(self.index, self.speed)
        if wait is not None:
            self._next = self.app.set_timer(wait, lambda: self.go(self.index + 1))

    def _stop(self) -> None:
        if self._next is not None:
            self._next.stop()
            self._next = None

    # -- the keys ------------------------------------------------------------------------------

    def toggle_pause(self, app: GpuTuiApp) -> None:
        """Play or pause (at the end, play starts again from the start)."""
        self.paused = not self.paused
        if self.paused:
            self._stop()
        elif self.index >= self.last:
            self.go(0)
        else:
            self._play_on()

    def step(self, samples: int) -> None:
        self.paused = True
        self.go(self.index + samples)

    def jump_by(self, seconds: float) -> None:
        self.go(self.jump(self.index, seconds))

    def seek_to(self, index: int) -> None:
        self.go(self.seek(index))

    def faster(self) -> None:
        """The next speed (x1, x2, x4, x8, then x1 again)."""
        self.speed = SPEEDS[(SPEEDS.index(self.speed) + 1) % len(SPEEDS)]
        self.app.main.render_snapshot()
        if self._next is not None:  # the next sample comes at the new speed
            self._stop()
            self._play_on()
