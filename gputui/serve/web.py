"""What the exporter answers, as a WSGI app: ``/metrics``, ``/snapshot`` and a small index.

Read-only by design: GET and HEAD only (405 for anything else), no query changes anything, and
nothing here can send a signal. With a users file, every path asks for basic auth first (a request in
one of the server's kept places never waits for a check's turn). /metrics is
rendered once per sample (and format) and those bytes served until the next sample: a scrape costs a
copy, not a render, however often it comes.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from gputui import __version__
from gputui.plain.document import SNAPSHOT, VERSION
from gputui.serve.auth import Check, Users
from gputui.serve.sampling import Sample, document
from gputui.serve.server import KEPT_PLACE

StartResponse = Callable[..., Any]
Environ = dict[str, Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]

TEXT = "text/plain; charset=utf-8"
INDEX = f"""gputui {__version__}: a Prometheus exporter of this machine's GPUs and probed PyTorch jobs

/metrics   the last sample's metrics, for Prometheus
/snapshot  the last sample as `gputui --json` prints it (schema {SNAPSHOT}, version {VERSION})
""".encode()


# The two formats served: OpenMetrics 1.0.0 to whoever accepts it (Prometheus asks for it first), else
# the text format 0.0.4. Other versions and escapings in an Accept header would each need a render.
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class Exposition:
    """/metrics's bytes for the latest sample, rendered at the first scrape that asks for each format
    (and compression) and kept until the sample changes. The registry's other collectors (the
    exporter's own CPU and memory) are read at that render, so they are as old as the sample."""

    def __init__(self, latest: Callable[[], Sample | None], registry: CollectorRegistry) -> None:
        self._latest = latest
        self._registry = registry
        self._lock = threading.Lock()  # one render per sample and format, however many scrapes wait for it
        self._sample: Sample | None | object = _NOTHING
        self._bodies: dict[tuple[bool, bool], tuple[str, bytes]] = {}

    def body(self, accept: str, accept_encoding: str) -> tuple[str, bytes, bool]:
        """(content type, bytes, gzipped) for a request's Accept and Accept-Encoding headers."""
        key = ("application/openmetrics-text" in accept, gzip_accepted(accept_encoding))
        sample = self._latest()
        with self._lock:
            if sample is not self._sample:
                self._sample, self._bodies = sample, {}
            if key not in self._bodies:
                self._bodies[key] = self._render(*key)
            content_type, body = self._bodies[key]
        return content_type, body, key[1]

    def _render(self, openmetrics: bool, gzipped: bool) -> tuple[str, bytes]:
        encoder, content_type = choose_encoder(OPENMETRICS if openmetrics else "")
        body = encoder(self._registry)
        return content_type, gzip.compress(body) if gzipped else body


_NOTHING = object()  # no render yet (None is a sample's absence, and has a render of its own)


class SnapshotBody:
    """/snapshot's bytes for the latest sample, made at the first request that asks and kept until the
    sample changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: tuple[Sample, bytes] | None = None

    def of(self, sample: Sample) -> bytes:
        with self._lock:
            if self._made is None or self._made[0] is not sample:
                self._made = (sample, document(sample))
            return self._made[1]


def make_app(latest: Callable[[], Sample | None], registry: CollectorRegistry,
             users: Users | None = None) -> App:
    """The exporter's app: ``latest`` gives the sample to answer from, ``registry`` the metrics."""
    exposition = Exposition(latest, registry)
    snapshot_body = SnapshotBody()

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if users is not None:
            # A kept place is for a client let in at once: held while waiting for a turn, it would be
            # one more place for guessers.
            check = users.check(environ.get("HTTP_AUTHORIZATION"), wait=not environ.get(KEPT_PLACE))
            if check is Check.BUSY:
                return _answer(start_response, "503 Service Unavailable",
                               b"gputui: too many passwords being checked; try again\n", [("Retry-After", "1")])
            if check is not Check.ALLOWED:
                return _answer(start_response, "401 Unauthorized", b"gputui: user name and password, please\n",
                               [("WWW-Authenticate", 'Basic realm="gputui", charset="UTF-8"')])
        method = environ.get("REQUEST_METHOD", "")
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed",
                           b"gputui: this exporter only answers GET and HEAD\n", [("Allow", "GET, HEAD")])
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            content_type, body, gzipped = exposition.body(environ.get("HTTP_ACCEPT", ""),
                                                          environ.get("HTTP_ACCEPT_ENCODING", ""))
            return _answer(start_response, "200 OK", body, [("Content-Encoding", "gzip")] if gzipped else [],
                           content_type=content_type, head=method == "HEAD")
        if path == "/snapshot":
            sample = latest()
            if sample is None:
                return _answer(start_response, "503 Service Unavailable", b"gputui: no sample yet\n")
            return _answer(start_response, "200 OK", snapshot_body.of(sample), content_type="application/json",
                           head=method == "HEAD")
        if path == "/":
            return _answer(start_response, "200 OK", INDEX, head=method == "HEAD")
        return _answer(start_response, "404 Not Found", b"gputui: nothing here; see /\n")

    return app


def _answer(start_response: StartResponse, status: str, body: bytes, headers: Iterable[tuple[str, str]] = (),
            *, content_type: str = TEXT, head: bool = False) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers])
    return [] if head else [body]
