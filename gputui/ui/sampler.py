"""What the monitor's worker thread runs: one collector sample, the probe reports, the CLI filters,
and the messages that carry the finished, immutable Snapshot to the app.
"""

from __future__ import annotations

import dataclasses

from textual.message import Message

from gputui.model import ProbeReport, Snapshot


class SnapshotReady(Message):
    """A new Snapshot, and how long it took to take (seconds)."""

    def __init__(self, snapshot: Snapshot, took: float) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.took = took


class SampleFailed(Message):
    """Sampling raised: the monitor keeps the last snapshot and says why."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class Sampler:
    """Turns a collector (anything with .sample() and .probe_reports()) into complete snapshots.

    Only the worker thread calls ``sample``; the collector, the probe watcher and the filters are
    touched nowhere else.
    """

    def __init__(self, collector, *, only=(), only_visible=False, users=(), pids=(),
                 watch_probes: bool = True) -> None:
        self.collector = collector
        self.filters = dict(only=tuple(only), only_visible=only_visible, users=tuple(users),
                            pids=tuple(pids))
        self._watcher = _open_probe_watcher() if watch_probes else None

    def sample(self) -> Snapshot:
        snapshot = self.collector.sample()
        reports = self._probe_reports()
        if reports:
            snapshot = dataclasses.replace(snapshot, probes=reports)
        if any(self.filters.values()):
            from gputui.collect.filters import select

            snapshot = select(snapshot, **self.filters)
        return snapshot

    def _probe_reports(self) -> tuple[ProbeReport, ...]:
        found: dict[int, ProbeReport] = {}
        demo = getattr(self.collector, "probe_reports", None)
        if demo is not None:
            for report in demo():
                found[report.pid] = report
        if self._watcher is not None:
            for report in _watched_reports(self._watcher):
                found.setdefault(report.pid, report)
        return tuple(found[pid] for pid in sorted(found))

    def close(self) -> None:
        close = getattr(self._watcher, "close", None)
        if close is not None:
            close()
        self.collector.close()


def _open_probe_watcher():
    """The link client's watcher of real probes, or None while that module is not available."""
    try:
        from gputui.link.client import ProbeWatcher
    except ImportError:
        return None
    return ProbeWatcher()


def _watched_reports(watcher) -> tuple[ProbeReport, ...]:
    try:
        return tuple(watcher.poll().values())
    except Exception:  # a misbehaving probe must never stop the monitor's sampling
        return ()
