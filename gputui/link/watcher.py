"""The live monitor's probe watcher: every probe of this user polled for reports at once, over
connections kept open between polls, only the steps since the last report asked for.
"""

from __future__ import annotations

import dataclasses
import selectors
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from gputui.link import protocol
from gputui.link.connection import TIMED_OUT, ProbeLink, ProbeUnavailable, decode_report, result_of
from gputui.link.discovery import discover
from gputui.model import FIRST_STEPS_KEPT, ProbeReport
from gputui.pids import pid_exists

STALE_AFTER = 0.8  # of the probe's idle timeout: reconnect rather than reuse


class ProbeWatcher:
    """Polls every probe of this user for reports, over connections kept open between polls.

    Call ``poll()`` from one worker thread each refresh; it waits at most ``timeout`` seconds and
    never raises. A probe slow to answer keeps its last report; reasons for probes that cannot be
    reached are in ``unavailable``. ``all_users`` is as for :func:`discover`.

    After the first whole report, each poll asks only for the steps since the last one it has and
    merges them in, keeping at most ``keep_steps`` per process, and before those up to
    ``keep_measured`` older steps the probe measured (a probe sampling its readings may measure
    one step in fifty: leak verdicts need a few dozen): the probe encodes, sends and this side
    decodes a second's worth of steps, not the whole history, at every refresh.
    """

    def __init__(self, *, timeout: float = 0.25, rediscover_every: float = 2.0,
                 give_up_after: float = 10.0, environ: Mapping[str, str] | None = None,
                 all_users: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 keep_steps: int = 600, keep_measured: int = 128):
        self.timeout = timeout
        self.rediscover_every = rediscover_every
        self.give_up_after = give_up_after
        self.keep_steps = keep_steps
        self.keep_measured = keep_measured
        self.unavailable: dict[int, str] = {}
        self.error: str | None = None  # a fault of the watcher itself, contained
        self._environ = environ
        self._all_users = all_users
        self._clock = clock
        self._sockets: dict[int, Path] = {}
        self._links: dict[int, ProbeLink] = {}
        self._reports: dict[int, ProbeReport] = {}
        self._retry_at: dict[int, float] = {}
        self._since: dict[int, dict] = {}  # pid -> params asking for the steps after the last one held
        self._discovered_at: float | None = None
        self._lock = threading.Lock()

    def poll(self) -> dict[int, ProbeReport]:
        """The newest report of each reachable probe, by pid."""
        with self._lock:
            try:
                self._poll()
                self.error = None
            except Exception as exc:  # noqa: BLE001 - the monitor must keep drawing
                self.error = f"probe watcher: {type(exc).__name__}: {exc}"
            return {pid: self._reports[pid] for pid in self._sockets if pid in self._reports}

    def close(self) -> None:
        with self._lock:
            for pid in list(self._links):
                self._hang_up(pid)

    def _poll(self) -> None:
        now = self._clock()
        if self._discovered_at is None or now - self._discovered_at >= self.rediscover_every:
            self._rediscover(now)
        asked = self._ask_all(now)
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as selector:
            for pid in asked:
                selector.register(self._links[pid].sock, selectors.EVENT_READ, pid)
            waiting = set(asked)
            while waiting:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, _ in selector.select(remaining):
                    pid = key.data
                    self._take_replies(pid)
                    link = self._links.get(pid)
                    if link is None or not link.pending:
                        selector.unregister(key.fileobj)
                        waiting.discard(pid)
        for pid, link in list(self._links.items()):
            if link.pending and time.monotonic() - link.sent_at > self.give_up_after:
                self._fail(pid, ProbeUnavailable(pid, TIMED_OUT, "the probe stopped answering"))

    def _rediscover(self, now: float) -> None:
        self._discovered_at = now
        self._sockets = discover(self._environ, all_users=self._all_users)
        for pid in set(self._links) | set(self._reports) | set(self.unavailable):
            if pid not in self._sockets:
                self._forget(pid)

    def _ask_all(self, now: float) -> list[int]:
        """Send a report request to every probe without one outstanding; the pids asked."""
        asked = []
        for pid, path in self._sockets.items():
            link = self._links.get(pid)
            if link is not None and not link.pending and \
                    time.monotonic() - link.used_at > STALE_AFTER * protocol.IDLE_TIMEOUT:
                # Polled less often than the probe keeps idle connections: a fresh one, not a
                # write into one the probe has closed.
                self._hang_up(pid)
                link = None
            if link is None:
                if now < self._retry_at.get(pid, 0.0):
                    continue
                try:
                    link = self._links[pid] = ProbeLink(pid, path, timeout=self.timeout)
                except ProbeUnavailable as exc:
                    self._fail(pid, exc)
                    continue
            if not link.pending:
                try:
                    link.send("report", self._since.get(pid))
                except (ProbeUnavailable, OSError) as exc:
                    self._fail(pid, exc)
                    continue
            asked.append(pid)
        return asked

    def _take_replies(self, pid: int) -> None:
        link = self._links.get(pid)
        if link is None:
            return
        try:
            for reply in link.receive():
                self._take_report(pid, result_of(pid, reply))
                self.unavailable.pop(pid, None)
        except (ProbeUnavailable, OSError) as exc:
            self._fail(pid, exc)

    def _take_report(self, pid: int, result: Any) -> None:
        report = decode_report(pid, result)
        held = self._reports.get(pid)
        since = result.get("since_step") if isinstance(result, dict) else None
        if isinstance(since, int) and held is not None:
            # Only the steps after ``since``: the ones held up to there, then the new ones.
            held_steps = tuple(s for s in held.steps if s.step <= since)
            report = dataclasses.replace(report, steps=held_steps + report.steps)
        if len(report.steps) > self.keep_steps:
            older, recent = report.steps[:-self.keep_steps], report.steps[-self.keep_steps:]
            measured = [s for s in older if s.allocated is not None]
            kept = measured[-self.keep_measured:] if self.keep_measured > 0 else []
            # The first measured steps stay (what the job's start added), as on the probe's board.
            first = [s for s in older if s.categories is not None][:FIRST_STEPS_KEPT]
            first = [s for s in first if s not in kept]
            report = dataclasses.replace(report, steps=tuple(first + kept) + recent)
        self._reports[pid] = report
        started_at = result.get("probe_started_at") if isinstance(result, dict) else None
        if report.steps and isinstance(started_at, (int, float)):
            # One step back: the probe revises its latest measured record once, a step later (what
            # that step kept), so the last step held is asked for again.
            self._since[pid] = {"since_step": report.steps[-1].step - 1, "started_at": started_at}
        else:
            self._since.pop(pid, None)  # an older probe, or no steps yet: whole reports

    def _fail(self, pid: int, exc: Exception) -> None:
        self._hang_up(pid)
        path = self._sockets.get(pid)
        if not pid_exists(pid) or path is None or not path.exists():
            self._forget(pid)  # the process or its probe has ended
            return
        reason = exc.detail if isinstance(exc, ProbeUnavailable) else str(exc)
        self.unavailable[pid] = reason
        self._retry_at[pid] = self._clock() + self.rediscover_every
        if not (isinstance(exc, ProbeUnavailable) and exc.reason == TIMED_OUT):
            self._reports.pop(pid, None)  # only a slow probe's last report is worth showing
            self._since.pop(pid, None)

    def _forget(self, pid: int) -> None:
        self._hang_up(pid)
        self._sockets.pop(pid, None)
        self._reports.pop(pid, None)
        self._since.pop(pid, None)
        self._retry_at.pop(pid, None)
        self.unavailable.pop(pid, None)

    def _hang_up(self, pid: int) -> None:
        link = self._links.pop(pid, None)
        if link is not None:
            link.close()
