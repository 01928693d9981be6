"""Webhook delivery: each delivery POSTed as its JSON document, a Slack message, or an ntfy message.
Its own module so the monitor loads urllib (and with it ssl) only where a webhook is asked for.

A delivery has ``timeout`` seconds in all. urllib's own timeout bounds each socket operation, so a
receiver that trickles its answer a byte at a time never trips it and would hold the channel for good;
so each delivery's connection is also shut down at its deadline, which ends the read or write blocked on
it at once, and the failure is reported. (Looking the host up is left to the resolver's own timeouts.)
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import IO, Any

from gputui.alerts.delivery import TIMEOUT, Delivery
from gputui.untrusted import within

HEADER_VALUE = 250  # characters of an ntfy Title at most: servers refuse headers past 4-8 KiB in all (431)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook's POST is never re-sent elsewhere: a redirect is reported as the failure it is here."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: object, newurl: str) -> None:
        return None


class _Connection(http.client.HTTPConnection):
    """An HTTP connection that hands its socket to ``opened`` once connected (before any TLS handshake)."""

    opened: Callable[[socket.socket], None] | None = None

    def connect(self) -> None:
        super().connect()
        if self.opened is not None:
            self.opened(self.sock)


class _SecureConnection(http.client.HTTPSConnection, _Connection):
    """The same over TLS: HTTPSConnection.connect wraps the socket that _Connection.connect handed on."""


class _Handler(urllib.request.HTTPSHandler, urllib.request.HTTPHandler):
    """urllib's http and https handlers (proxies and TLS verification as usual), with connections that
    tell ``opened`` their socket."""

    def __init__(self, opened: Callable[[socket.socket], None]) -> None:
        super().__init__()
        self._opened = opened

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._maker(_Connection), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._maker(_SecureConnection), req)

    def _maker(self, kind: type[_Connection]) -> Any:
        def connection(host: str, **kwargs: Any) -> _Connection:
            made = kind(host, **kwargs)
            made.opened = self._opened
            return made

        return connection


class WebhookChannel:
    """POSTs each delivery to ``url``: its JSON document, a Slack `{"text": ...}`, or an ntfy message (the
    text as body, the first alert's title and priority as headers). https is verified (urllib's default).
    Raises on a failure, and cuts the connection off ``timeout`` seconds into a delivery."""

    def __init__(self, url: str, form: str = "json", timeout: float = TIMEOUT) -> None:
        self.url, self.form, self.timeout = url, form, timeout
        self._opener = urllib.request.build_opener(_NoRedirects, _Handler(self._opened))
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []  # the delivery's connections (duplicates), to cut at the deadline
        self._cut = False

    def __call__(self, delivery: Delivery) -> None:
        body, headers = webhook_body(delivery, self.form)
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        deadline = threading.Timer(self.timeout, self.stop)
        deadline.daemon = True  # never what keeps gputui from exiting
        deadline.start()
        try:
            failure = self._post(request)
        finally:
            deadline.cancel()
            cut = self._forget()
        if cut:  # whatever came back was cut short too: a plain http answer may even have looked complete
            failure = f"not done after {self.timeout:g} s; cut off"
        if failure is not None:
            raise RuntimeError(f"alert webhook {failure}")

    def _post(self, request: urllib.request.Request) -> str | None:
        """None once the receiver has answered 2xx, else what went wrong."""
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                answer.read(1 << 16)
        except urllib.error.HTTPError as exc:
            return f"answered {exc.code} {exc.reason}"
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            return f"unreachable: {getattr(exc, 'reason', exc)}"
        return None

    def stop(self) -> None:
        """Cuts the delivery under way off now (its deadline, or the channel closing)."""
        with self._lock:
            self._cut = True
            for sock in self._sockets:
                _shut(sock)

    def _opened(self, sock: socket.socket) -> None:
        # A duplicate: TLS takes the original over (and closes it, as a Python object), while a shutdown
        # through any descriptor of a connection ends it for all of them.
        with self._lock:
            self._sockets.append(sock.dup())
            if self._cut:
                _shut(sock)

    def _forget(self) -> bool:
        """Closes the delivery's duplicates; whether it was cut off."""
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()
            cut, self._cut = self._cut, False
        return cut


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed meanwhile, or never connected
        pass


webhook_channel = WebhookChannel


def webhook_body(delivery: Delivery, form: str) -> tuple[bytes, dict[str, str]]:
    if form == "slack":
        return json.dumps({"text": delivery.text()}).encode(), {"Content-Type": "application/json"}
    if form == "ntfy":
        first = delivery.events[0]
        priority = {"critical": "urgent", "warning": "high"}.get(first.alert.severity, "default")
        title = within(f"gputui on {delivery.host}: {first.alert.title}", HEADER_VALUE)
        # HTTP headers are latin-1: anything else in a title is replaced rather than failing the delivery.
        return delivery.text().encode(), {"Title": title.encode("latin-1", "replace").decode("latin-1"),
                                          "Priority": priority, "Content-Type": "text/plain; charset=utf-8"}
    return json.dumps(delivery.document()).encode(), {"Content-Type": "application/json"}
