"""The exporter's sampling: one thread takes a sample every interval and publishes it whole.

Scrapes and ``/snapshot`` read the last published Sample (one reference, swapped whole), so an
answer never waits for NVML or a probe. The samples are the sampling pipeline's (gputui/sample/):
gathered and judged as the live monitor's are.
"""

from __future__ import annotations

import sys
import threading
import time

from gputui.alerts.alerting import Alerting
from gputui.options import SERVE_INTERVAL
from gputui.plain.document import dumps, snapshot_document
from gputui.sample.judge import Sample
from gputui.sample.pipeline import Pipeline
from gputui.untrusted import visible

__all__ = ["Sample", "Sampling", "document"]


def document(sample: Sample) -> bytes:
    """``gputui --json``'s document of a sample: what ``/snapshot`` answers."""
    return (dumps(snapshot_document(sample.snapshot, sample.judgements)) + "\n").encode("ascii")


class Sampling:
    """Samples ``pipeline`` every ``interval`` seconds in a thread of its own; ``latest`` is the last."""

    def __init__(self, pipeline: Pipeline, interval: float = SERVE_INTERVAL, alerting: Alerting | None = None) -> None:
        """``alerting``: judges each sample for alerts and sends them (its channels run on their own threads)."""
        self.pipeline = pipeline
        self.alerting = alerting
        self.interval = interval
        self.latest: Sample | None = None
        self.failure: str | None = None  # why the latest attempt failed, while it keeps failing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gputui-sampling", daemon=True)

    def take(self) -> Sample:
        """Sample now, judged, and publish the result."""
        self.latest = sample = self.pipeline.sample()
        if self.alerting is not None:
            self.alerting(sample.snapshot, sample.judgements)
        return sample

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.pipeline.close()
        if self.alerting is not None:
            self.alerting.close()

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
