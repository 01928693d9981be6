"""Where the exporter listens: the address, TLS, and a thread per request.

The stdlib's WSGI server, as prometheus_client's own start_http_server uses it, with what that one
leaves out: a time limit on slow clients, the TLS handshake in the request's thread (a client that
connects and says nothing cannot hold up the others), and a one-line error instead of a traceback.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
import sys
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from gputui.errors import UserError
from gputui.untrusted import visible

CLIENT_TIMEOUT = 10.0  # seconds a client may take to send its request (and to finish TLS's handshake)


@dataclass(frozen=True)
class Address:
    """Where to listen: a host name or address, and a port (0: any free one)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` (every interface) or ``PORT`` (this machine only)."""
    host, colon, port = text.strip().rpartition(":")
    if not colon:
        host = "127.0.0.1"
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif not host:
        host = "0.0.0.0"
    if not port.isdigit() or int(port) > 65535 or not host or any(c in host for c in "[] /"):
        raise UserError(f"--listen {visible(text)}: give ADDRESS:PORT, e.g. 127.0.0.1:9403 or 0.0.0.0:9403")
    return Address(host, int(port))


class _Handler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # here, in this request's thread, under its timeout

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: Prometheus asks every few seconds, for days."""


class Server(ThreadingMixIn, WSGIServer):
    """The stdlib's WSGI server, a thread per request."""

    daemon_threads = True  # a request in flight does not hold up the exit

    def __init__(self, address: Any, family: socket.AddressFamily) -> None:
        self.address_family = family
        super().__init__(address, _Handler)

    @property
    def address(self) -> Address:
        """Where it listens, the port chosen where 0 was asked for."""
        host, port = self.socket.getsockname()[:2]
        return Address(host, port)

    @property
    def url(self) -> str:
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{self.address}"

    @property
    def loopback(self) -> bool:
        """Whether only this machine can connect."""
        return ipaddress.ip_address(self.address.host).is_loopback

    def handle_error(self, request: Any, client_address: Any) -> None:
        failure = sys.exc_info()[1]
        if isinstance(failure, OSError):
            return  # a client that went away, timed out or failed TLS's handshake: its own trouble
        print(f"gputui serve: a request failed: {type(failure).__name__}: {failure}", file=sys.stderr)


def listen(address: Address, tls: ssl.SSLContext | None = None) -> Server:
    """A server bound to ``address``; UserError, in one line, where that cannot be."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {visible(str(address))}: {exc.strerror}") from None
    try:
        server = Server(sockaddr, family)
    except OSError as exc:
        hint = " (another gputui serve? choose a port with --listen)" if exc.errno == errno.EADDRINUSE else ""
        raise UserError(f"cannot listen on {visible(str(address))}: {exc.strerror}{hint}") from None
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


def tls_context(certificate: str, key: str | None = None) -> ssl.SSLContext:
    """A server's TLS context with the certificate (PEM) and its key (in the certificate's file
    unless ``key`` is given), on the ssl module's defaults; UserError where they cannot be loaded."""
    for path in filter(None, (certificate, key)):
        try:
            open(path, "rb").close()  # ssl's own error would not name the file
        except OSError as exc:
            raise UserError(f"cannot read the TLS file {visible(path)}: {exc.strerror}") from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError):  # OpenSSL's words ("[SSL] PEM lib (_ssl.c:3905)") would not help
        files = certificate if key is None else f"{certificate} and {key}"
        raise UserError(f"cannot load the TLS certificate from {visible(files)}: not a PEM certificate "
                        "with its private key (or the key does not match it)") from None
    return context
