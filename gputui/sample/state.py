"""One machine as a monitor shows it: its recent history and its latest judged Sample. The live monitor
keeps one, the many-host view one per host, a replay one that it builds again where it seeks.

The judging is the Judge's (judge.py), on the sampling thread; this value is the view's side of it, read
on the UI thread only, so the charts never read a history another thread is adding to.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputui.analysis.history import History, ProcessKey
from gputui.model import Snapshot
from gputui.model.judgement import Judgements
from gputui.model.verdicts import LeakVerdict, ProcessTrend
from gputui.model.waste import Waste
from gputui.sample.judge import Sample


class HostState:
    """A machine's history and its latest Sample (snapshot, trends, leak verdicts, judgements)."""

    def __init__(self, history: History | None = None) -> None:
        """``history``: one already recorded (a still picture's, a replay's rebuilt before a seek)."""
        self.history = history if history is not None else History()
        self.latest: Sample | None = None

    def take(self, sample: Sample) -> bool:
        """Take a judged sample in; whether it is news (not the same instant again, nor one before it)."""
        snapshot = sample.snapshot
        news = self.latest is None or snapshot.taken_at > self.latest.snapshot.taken_at
        # The same instant twice (or a clock stepping back) must not skew the history; a still picture's
        # judge shares the history, and has added the instant already.
        if self.history.latest is None or snapshot.taken_at > self.history.latest:
            self.history.add(snapshot)
        self.latest = sample
        return news

    @property
    def snapshot(self) -> Snapshot | None:
        return self.latest.snapshot if self.latest is not None else None

    @property
    def trends(self) -> Mapping[ProcessKey, ProcessTrend]:
        """NVML memory trends by (NVML pid, device index)."""
        return self.latest.trends if self.latest is not None else {}

    @property
    def leaks(self) -> Mapping[int, LeakVerdict]:
        """Probed processes' leak verdicts by pid."""
        return self.latest.leaks if self.latest is not None else {}

    @property
    def judgements(self) -> Judgements | None:
        return self.latest.judgements if self.latest is not None else None

    @property
    def waste(self) -> Waste | None:
        """Who holds the GPUs idle (None: not judged)."""
        judgements = self.judgements
        return judgements.waste if judgements is not None else None
