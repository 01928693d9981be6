"""What the exporter answers, as a WSGI app: ``/metrics``, ``/snapshot`` and a small index.

Read-only by design: GET and HEAD only (405 for anything else), no query changes anything, and
nothing here can send a signal. With a users file, every path asks for basic auth first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from gputui import __version__
from gputui.plain.document import SNAPSHOT, VERSION
from gputui.serve.auth import Users
from gputui.serve.sampling import Sample

StartResponse = Callable[..., Any]
Environ = dict[str, Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]

TEXT = "text/plain; charset=utf-8"
INDEX = f"""gputui {__version__}: a Prometheus exporter of this machine's GPUs and probed PyTorch jobs

/metrics   the last sample's metrics, for Prometheus
/snapshot  the last sample as `gputui --json` prints it (schema {SNAPSHOT}, version {VERSION})
""".encode()


def make_app(latest: Callable[[], Sample | None], registry: CollectorRegistry,
             users: Users | None = None) -> App:
    """The exporter's app: ``latest`` gives the sample to answer from, ``registry`` the metrics."""
    metrics = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if users is not None and not users.allow(environ.get("HTTP_AUTHORIZATION")):
            return _answer(start_response, "401 Unauthorized", b"gputui: user name and password, please\n",
                           [("WWW-Authenticate", 'Basic realm="gputui", charset="UTF-8"')])
        method = environ.get("REQUEST_METHOD", "")
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed",
                           b"gputui: this exporter only answers GET and HEAD\n", [("Allow", "GET, HEAD")])
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            # prometheus_client answers GET only: a HEAD gets its GET's headers, without the body.
            body = metrics({**environ, "REQUEST_METHOD": "GET"}, start_response)
            return [] if method == "HEAD" else body
        if path == "/snapshot":
            sample = latest()
            if sample is None:
                return _answer(start_response, "503 Service Unavailable", b"gputui: no sample yet\n")
            return _answer(start_response, "200 OK", sample.document, content_type="application/json",
                           head=method == "HEAD")
        if path == "/":
            return _answer(start_response, "200 OK", INDEX, head=method == "HEAD")
        return _answer(start_response, "404 Not Found", b"gputui: nothing here; see /\n")

    return app


def _answer(start_response: StartResponse, status: str, body: bytes, headers: Iterable[tuple[str, str]] = (),
            *, content_type: str = TEXT, head: bool = False) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers])
    return [] if head else [body]
