"""A recording as a monitor's source (``gputui replay FILE``): each sample with the judgements the
recording monitor made of it, and, where the replay seeks, the history of the span before it read again;
where a step, a jump or a seek lands, how long to wait for the next sample, and where the replay is.
What a recording cannot do (signal, probe, ask a probe, change the interval) it declares here. ui/sources/replay.py's
Replay plays it on the app, in time.

No Textual here: a worker thread decodes, one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gputui import units
from gputui.analysis.history import History
from gputui.record.judged import judged
from gputui.record.reader import Recording
from gputui.sample.judge import Sample
from gputui.ui.sources import INTERVAL, PROBE, RECORD_SITES, SIGNAL, Declared
from gputui.untrusted import visible_all

SPEEDS = (1, 2, 4, 8)
LONGEST_WAIT = 5.0  # seconds: a gap in the recording (a suspended machine) is not waited out in full


class RecordingSource(Declared):
    """The samples of ``recording``, judged as they were recorded and made visible for the screens."""

    CANNOT = {
        SIGNAL: "A recording: there is no process to send {signal} to.",
        PROBE: "A recording: there is no process to attach a probe to or detach one from.",
        RECORD_SITES: "A recording: there is no process to send a request to.",
        INTERVAL: "A recording keeps its own interval: x changes the replay's speed.",
    }

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._lock = threading.Lock()  # the recording decodes in one thread at a time

    def read(self, index: int, like: History | None,
             wanted: Callable[[], bool]) -> tuple[Sample, History | None] | None:
        """Sample ``index``, and where ``like`` is given (a seek) a history of its span and size holding the
        samples of that span before ``index``; None where ``wanted`` turns false meanwhile (asked elsewhere).
        ValueError: a sample that is not one (a crafted file whose CRC is right)."""
        with self._lock:
            history = None if like is None else self._history_before(index, like, wanted)
            if like is not None and history is None:
                return None
            # made visible as the live sampler does: the screens never write a control character
            return visible_all(judged(self.recording.sample(index))), history

    @property
    def last(self) -> int:
        return len(self.recording) - 1

    def clamp(self, index: int) -> int:
        return min(max(index, 0), self.last)

    def jump(self, index: int, seconds: float) -> int:
        """Where a jump of ``seconds`` from sample ``index`` lands: at least one sample on, going forward."""
        target = self.recording.index_at(self.recording.times[index] + seconds)
        return target + 1 if seconds > 0 and target == index else target  # a gap longer than the jump

    def seek(self, index: int) -> int:
        """Sample ``index``, counted from the end where negative (-1: the last)."""
        return index if index >= 0 else len(self.recording) + index

    def wait(self, index: int, speed: int) -> float | None:
        """Seconds to show sample ``index`` at ``speed`` before the next (None: it is the last)."""
        if index + 1 > self.last:
            return None
        times = self.recording.times
        return max(0.02, min(times[index + 1] - times[index], LONGEST_WAIT) / speed)

    def position(self, index: int, speed: int) -> str:
        """The header's word on where the replay is: time into the recording, its length, the speed."""
        times = self.recording.times
        at = times[max(index, 0)] - times[0]
        return (f"replay {units.elapsed(at)} / {units.elapsed(times[-1] - times[0])}"
                f"  {max(index, 0) + 1}/{len(times)}  x{speed}")

    def _history_before(self, index: int, like: History, wanted: Callable[[], bool]) -> History | None:
        recording = self.recording
        history = History(like.span, like.max_points)
        for i in range(recording.index_at(recording.times[index] - like.span), index):
            if not wanted():
                return None
            history.add(recording.sample(i).figures)  # numbers only: nothing to make visible
        return history
