"""One host's connection, in a thread of its own: connect, read snapshot documents, decode the
latest, and on failure wait (backing off) and connect again, until closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Callable, Protocol

from gputui.fleet.entries import HostEntry
from gputui.fleet.status import HostStatus
from gputui.fleet.transport import Ended, SshStream, fetch_snapshot
from gputui.model import HostView
from gputui.model.codec import parse_json
from gputui.plain.document import read_judgements, read_snapshot_document
from gputui.sample.judge import Judge


class Stream(Protocol):
    """What a Link reads a host through: SshStream, a test's fake."""

    def lines(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Link:
    """Keeps one host's latest snapshot and state; ``view()`` may be called from any thread."""

    def __init__(self, entry: HostEntry, interval: float, *, clock: Callable[[], float] = time.monotonic,
                 open_stream: Callable[[HostEntry, float], Stream] = SshStream,
                 fetch: Callable[[HostEntry, float], bytes] = fetch_snapshot) -> None:
        self.entry = entry
        self.interval = interval
        self.answered = threading.Event()  # set at the first snapshot or the first failure
        self._clock = clock
        self._open_stream = open_stream
        self._fetch = fetch
        self._status = HostStatus(entry.name, interval)
        self._judge: Judge | None = None  # for a host whose gputui sends no judgements (an older one)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: Stream | None = None
        self._thread = threading.Thread(target=self._run, name=f"gputui-host {entry.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def view(self) -> HostView:
        with self._lock:
            return self._status.view(self._clock())

    def stop(self) -> None:
        """Stop without waiting: the ssh child is ended now, the thread ends soon after."""
        self._stop.set()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def close(self) -> None:
        """Stop, and wait (a little) for the thread."""
        self.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._status.connecting()
            try:
                self._poll() if self.entry.is_url else self._read_stream()
                reason = "closed"
            except Ended as exc:
                reason = str(exc)
            if self._stop.is_set():
                return
            with self._lock:
                delay = self._status.failed(reason)
            self.answered.set()
            self._stop.wait(delay)

    def _read_stream(self) -> None:
        stream = self._open_stream(self.entry, self.interval)
        with self._lock:
            if self._stop.is_set():
                stream.close()
                return
            self._stream = stream
        try:
            for line in stream.lines():
                if line.lstrip().startswith(b"{"):  # not a shell's greeting on stdout
                    self._take(line)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._take(self._fetch(self.entry, max(5.0, 3 * self.interval)))
            self._stop.wait(self.interval)

    def _take(self, raw: bytes) -> None:
        try:
            document = parse_json(raw)
            snapshot = read_snapshot_document(document)
            judgements = read_judgements(document)
        except ValueError as exc:  # not JSON, nested too deeply, not UTF-8, not a snapshot
            raise Ended(f"refused its answer: {exc}") from None
        if judgements is None:  # an older gputui there: judged here, as its own monitor would have
            self._judge = self._judge or Judge()
            judgements = self._judge(snapshot).judgements
        with self._lock:
            self._status.received(snapshot, self._clock(), judgements)
        self.answered.set()
