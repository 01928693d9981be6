"""The exporter's sampling: one thread takes a sample every interval and publishes it whole.

Scrapes and ``/snapshot`` read the last published Sample (one reference, swapped whole), so an
answer never waits for NVML or a probe. The analysis is the live monitor's: each probed process's
leak verdict from its report, and every GPU process's memory trend from a bounded History.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from gputui.analysis.history import History, ProcessKey
from gputui.analysis.leaks import LeakJudge
from gputui.analysis.trends import TrendCache, trends
from gputui.model import Snapshot
from gputui.model.verdicts import LeakVerdict, ProcessTrend
from gputui.options import SERVE_INTERVAL
from gputui.plain.document import dumps, snapshot_document
from gputui.untrusted import visible


class Source(Protocol):
    """What is sampled: gputui.plain.gather.Source, or a test's stand-in."""

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


@dataclass(frozen=True, eq=False)
class Sample:
    """One sample and what the analysis says of it: everything an answer is made from."""

    snapshot: Snapshot
    leaks: Mapping[int, LeakVerdict] = field(default_factory=dict)  # probed processes' verdicts by pid
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)  # by (NVML pid, device index)

    @cached_property
    def document(self) -> bytes:
        """``gputui --json``'s document of this sample, made at the first ``/snapshot`` that asks."""
        return (dumps(snapshot_document(self.snapshot)) + "\n").encode("ascii")


class Sampling:
    """Samples ``source`` every ``interval`` seconds in a thread of its own; ``latest`` is the last."""

    def __init__(self, source: Source, interval: float = SERVE_INTERVAL) -> None:
        self.source = source
        self.interval = interval
        self.latest: Sample | None = None
        self.failure: str | None = None  # why the latest attempt failed, while it keeps failing
        self._history = History()
        self._judge = LeakJudge()
        self._trend_cache = TrendCache()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gputui-sampling", daemon=True)

    def take(self) -> Sample:
        """Sample now, judge, and publish the result."""
        snapshot = self.source.sample()
        try:
            leaks = self._judge(snapshot)
        except Exception as exc:  # noqa: BLE001 - a report the analysis chokes on must not stop sampling
            leaks = {}
            snapshot = dataclasses.replace(snapshot, problems=snapshot.problems + (
                f"leak analysis failed: {type(exc).__name__}: {exc}",))
        last = self.latest
        if last is None or snapshot.taken_at > last.snapshot.taken_at:
            # The same instant twice (or a clock stepping back) must not skew the history.
            self._history.add(snapshot)
            judged = trends(self._history, snapshot, cache=self._trend_cache)
        else:
            judged = dict(last.trends)
        self.latest = Sample(snapshot, leaks, judged)
        return self.latest

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.source.close()

    def _run(self) -> None:
        deadline = time.monotonic()
        while True:
            # A steady rhythm: the time spent sampling counts toward the interval.
            deadline = max(deadline + self.interval, time.monotonic())
            if self._stop.wait(max(0.0, deadline - time.monotonic())):
                return
            try:
                self.take()
            except Exception as exc:  # noqa: BLE001 - keep serving the last sample, and say why once
                self._failed(f"sampling failed: {type(exc).__name__}: {exc}")
            else:
                if self.failure is not None:
                    self._failed(None)

    def _failed(self, why: str | None) -> None:
        if why != self.failure:
            said = why or "sampling works again"
            print(f"gputui serve: {visible(said)}", file=sys.stderr, flush=True)
        self.failure = why
