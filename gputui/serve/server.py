"""Where the exporter listens: the address, TLS, and a thread per connection, up to a bound.

The stdlib's WSGI server, as prometheus_client's own start_http_server uses it, with what that one
leaves out: at most MAX_CONNECTIONS at once, shared so that idle clients cannot crowd out scrapes
(Places: a newcomer takes the place of the oldest connection still waiting for its request; when every
place is answering, KEPT_PLACES more for requests let in without waiting, then 503), a first byte
within FIRST_BYTE_TIMEOUT and a whole request within REQUEST_TIMEOUT or nothing (a client trickling a
byte at a time, or closing halfway, never gets its request run), the TLS handshake in the connection's
thread (a client that connects and says nothing holds up no one), and a one-line error instead of a
traceback.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import io
import ipaddress
import select
import socket
import ssl
import sys
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import IO, Any, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from gputui.errors import UserError
from gputui.files import read_small
from gputui.model.record import Record
from gputui.untrusted import visible

# Seconds from the connection to its first byte (a TLS client's hello, or the request's): Prometheus
# and the kubelet's probes send theirs the moment they connect, so a connection silent this long is
# dropped, and a flood of idle connections holds each place a second at most.
FIRST_BYTE_TIMEOUT = 1.0
# Seconds from the connection to the request's last header, TLS's handshake included: Prometheus
# sends its request at once; a client that takes longer is cut off without an answer.
REQUEST_TIMEOUT = 5.0
SEND_TIMEOUT = 10.0  # seconds for the answer to leave, to a client that reads slowly
# Connections served at once (a thread and a socket each: 128 trickling clients held cost 2 MB); when
# they are all taken, a newcomer takes the place of the oldest still waiting for its request. Room for
# 64 clients guessing passwords and a scraper beside.
MAX_CONNECTIONS = 128
# Places beyond MAX_CONNECTIONS, given only when every place is answering a request (clients guessing
# passwords, each waiting for a check's turn): a request there is answered only if it is let in without
# waiting (a password that passed before), so a logged-in Prometheus still gets in. More: 503 at once.
KEPT_PLACES = 8
KEPT_PLACE = "gputui.kept_place"  # in a request's WSGI environ: True when it came in a kept place
BACKLOG = 128  # connections the kernel holds for accept(): a burst of scrapes is not reset
TLS_FILE_LIMIT = 1 << 20  # bytes: a certificate chain or a key is a few kB
_BUSY_TEXT = b"gputui: too many connections; try again\n"
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT))


@dataclass(frozen=True, eq=False, repr=False)
class Address(Record):
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


class _Deadline(io.RawIOBase):
    """A connection's incoming bytes under one deadline for all of them (a socket's own timeout is per
    read, so a byte every few seconds would keep it for ever); ``ended`` once the client closed its side.
    Each read is a wait on the client, as ``places`` sees it."""

    def __init__(self, connection: socket.socket, deadline: float, places: Places) -> None:
        self._connection = connection
        self._deadline = deadline
        self._places = places
        self.ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not come whole in time")
        self._connection.settimeout(left)
        with self._places.awaiting(self._connection):
            count = self._connection.recv_into(buffer)
        self.ended = self.ended or count == 0
        return count


class Place(enum.Enum):
    """Where a connection is served: in one of MAX_CONNECTIONS, or one of the KEPT_PLACES."""

    ORDINARY = "ordinary"
    KEPT = "kept"


class Places:
    """The connections served at once, and which of them are still waiting for their request (oldest
    first). A newcomer may push out an idle one: its thread waiting on the client, and nothing come (a
    request that has come, or is being read, is served). A client that reopens idle connections as fast
    as they are dropped can then only push out its own, never a scrape, whose request comes with its
    connection."""

    def __init__(self, ordinary: int, kept: int) -> None:
        self._lock = threading.Lock()
        self._room = {Place.ORDINARY: ordinary, Place.KEPT: kept}
        self._held: dict[socket.socket, Place] = {}
        # in the order they came; True while the connection's thread waits on the client
        self._waiting: dict[socket.socket, bool] = {}

    def take(self, connection: socket.socket) -> Place | None:
        """A place for ``connection``: a free one, else the oldest idle connection's (dropped), else a
        kept one; None when every place is answering a request or reading one."""
        with self._lock:
            place = self._free(Place.ORDINARY)
            if place is None:
                idle = next((c for c, waits in self._waiting.items() if waits and not _unread(c)), None)
                place = None if idle is None else self._drop(idle)
            place = place or self._free(Place.KEPT)
            if place is not None:
                self._held[connection] = place
                self._waiting[connection] = False  # its thread is yet to start
            return place

    @contextmanager
    def awaiting(self, connection: socket.socket) -> Iterator[None]:
        """Around a wait for ``connection``'s client (its first byte, TLS's handshake, a read): the
        time it may be pushed out, if nothing has come."""
        self.mark(connection, True)
        try:
            yield
        finally:
            self.mark(connection, False)

    def answering(self, connection: socket.socket) -> Place | None:
        """``connection``'s request came whole: from now on it keeps its place. None: it was dropped
        before (its place is someone else's) and is not to be answered."""
        with self._lock:
            if self._waiting.pop(connection, None) is None:
                return None
            return self._held[connection]

    def give_back(self, connection: socket.socket) -> None:
        """``connection`` is done (a dropped one gave its place back already)."""
        with self._lock:
            self._held.pop(connection, None)
            self._waiting.pop(connection, None)

    def mark(self, connection: socket.socket, waits: bool) -> None:
        """Whether ``connection`` waits on its client now, nothing come (it may be pushed out), or not."""
        with self._lock:
            if connection in self._waiting:
                self._waiting[connection] = waits

    def _free(self, place: Place) -> Place | None:
        return place if sum(p is place for p in self._held.values()) < self._room[place] else None

    def _drop(self, connection: socket.socket) -> Place:
        """End ``connection`` from here: its thread, waiting on it, sees the end and finishes."""
        del self._waiting[connection]
        try:
            # The socket's own shutdown, not SSLSocket's, which would take TLS's state from under the
            # thread reading it.
            socket.socket.shutdown(connection, socket.SHUT_RDWR)
        except OSError:
            pass  # the client is gone already
        return self._held.pop(connection)


def _unread(connection: socket.socket) -> bool:
    """Whether bytes have come on ``connection`` that its thread has not read yet (in the kernel's
    queue: TLS's records unread, not their contents). Asked of the kernel, not with a peeking recv,
    which Python would make wait for the socket's timeout."""
    try:
        queued = fcntl.ioctl(connection.fileno(), termios.FIONREAD, bytes(4))
    except OSError:  # the client is gone
        return False
    return int.from_bytes(queued, sys.byteorder) > 0


def _first_byte(connection: socket.socket, seconds: float) -> None:
    """Wait until ``connection`` has something to read (or has ended); TimeoutError after ``seconds``."""
    poller = select.poll()
    poller.register(connection, select.POLLIN)
    if not poller.poll(seconds * 1000):
        raise TimeoutError("the client sent nothing")


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT
    server: Server

    def setup(self) -> None:
        started = time.monotonic()
        super().setup()
        places = self.server.places
        with places.awaiting(self.connection):
            _first_byte(self.connection, FIRST_BYTE_TIMEOUT)
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()  # here, in this connection's thread, under its timeout
        self._reader = _Deadline(self.connection, started + REQUEST_TIMEOUT, places)
        self.rfile = io.BufferedReader(self._reader)
        self._place: Place | None = None

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self._reader.ended:
            # The headers ended with the connection, not with their blank line: a request cut short
            # is not run (the stdlib's parser would take it as whole).
            self.close_connection = True
            return False
        self._place = self.server.places.answering(self.connection)
        if self._place is None:  # pushed out by a newcomer while its request came
            self.close_connection = True
            return False
        self.connection.settimeout(SEND_TIMEOUT)
        return True

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ[KEPT_PLACE] = self._place is Place.KEPT
        return environ

    def handle(self) -> None:
        """WSGIRequestHandler's, answering through _Answer."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        answer = _Answer(self.rfile, cast(IO[bytes], self.wfile), self.get_stderr(), self.get_environ(),
                         multithread=False)
        answer.request_handler = self  # type: ignore[attr-defined]  # as the stdlib's sets it, for its logging
        app = self.server.get_app()
        assert app is not None  # set before the server serves
        answer.run(app)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: Prometheus asks every few seconds, for days."""


class _Answer(ServerHandler):
    """The stdlib's WSGI handler, whose failures are said as the server's are (report_failure): a TLS
    client gone mid-answer (ssl's SSLEOFError, which it takes for a failure of the app) is no traceback."""

    def log_exception(self, exc_info: Any) -> None:
        report_failure(exc_info[1])


def report_failure(failure: BaseException | None) -> None:
    """One line on stderr for a request that failed; nothing for a client that went away, timed out or
    failed TLS's handshake: its own trouble."""
    if not isinstance(failure, OSError):
        print(f"gputui serve: a request failed: {type(failure).__name__}: {failure}", file=sys.stderr)


class Server(ThreadingMixIn, WSGIServer):
    """The stdlib's WSGI server, a thread per connection, in one of its Places."""

    daemon_threads = True  # a request in flight does not hold up the exit
    request_queue_size = BACKLOG

    def __init__(self, address: Any, family: socket.AddressFamily) -> None:
        self.address_family = family
        self.places = Places(MAX_CONNECTIONS, KEPT_PLACES)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.places.take(request) is None:
            self._turn_away(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Every connection's end, served or not: its place is free before its client sees the end."""
        self.places.give_back(request)
        super().shutdown_request(request)

    def _turn_away(self, request: socket.socket) -> None:
        """503 and close, in the accepting thread, so without waiting on the client: what it has sent
        is read first (unread bytes would make the close a reset that loses the 503). A TLS connection
        is only closed: an answer would need a handshake."""
        if not isinstance(request, ssl.SSLSocket):
            try:
                request.setblocking(False)
                request.recv(1 << 16)
            except OSError:
                pass
            try:
                request.send(BUSY)
            except OSError:
                pass
        self.shutdown_request(request)

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
        return loopback(self.address.host)

    def handle_error(self, request: Any, client_address: Any) -> None:
        report_failure(sys.exc_info()[1])


def loopback(host: str) -> bool:
    """Whether a server bound to the address ``host`` is reached from this machine only (::ffff:127.0.0.1 too:
    IPv4's loopback written as IPv6)."""
    address = ipaddress.ip_address(host)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def exposure_warnings(local: bool, auth: bool, tls: bool) -> list[str]:
    """What a server of gputui's (the exporter, the browser view) warns of where it listens (``local``: on
    loopback only): open to the network without a password, or with passwords sent in the clear."""
    if local:
        return []
    if not auth:
        return ["no basic auth (--basic-auth-file), and this address is open to the network: whoever reaches "
                "it sees the GPUs, the processes and their command lines"]
    if not tls:
        return ["basic auth without TLS (--tls-cert) sends passwords over the network as they are"]
    return []


def listen(address: Address, tls: ssl.SSLContext | None = None) -> Server:
    """A server bound to ``address``; UserError, in one line, where that cannot be."""
    family, sockaddr = resolved(address)
    try:
        server = Server(sockaddr, family)
    except OSError as exc:
        raise cannot_listen(address, exc, "serve") from None
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


def resolved(address: Address) -> tuple[socket.AddressFamily, Any]:
    """The family and socket address to bind for ``address``; UserError where its name does not resolve."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {visible(str(address))}: {exc.strerror}") from None
    return family, sockaddr


def cannot_listen(address: Address, exc: OSError, command: str) -> UserError:
    """Why ``gputui COMMAND`` cannot listen on ``address`` (binding it raised ``exc``), in one line."""
    hint = f" (another gputui {command}? choose a port with --listen)" if exc.errno == errno.EADDRINUSE else ""
    return UserError(f"cannot listen on {visible(str(address))}: {exc.strerror}{hint}")


def tls_context(certificate: str, key: str | None = None) -> ssl.SSLContext:
    """A server's TLS context with the certificate (PEM) and its key (in the certificate's file
    unless ``key`` is given), on the ssl module's defaults; UserError where they cannot be loaded."""
    for path in filter(None, (certificate, key)):
        # ssl's own error would not name the file, and ssl would wait for ever on a FIFO.
        read_small(path, TLS_FILE_LIMIT, "the TLS file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError):  # OpenSSL's words ("[SSL] PEM lib (_ssl.c:3905)") would not help
        files = certificate if key is None else f"{certificate} and {key}"
        raise UserError(f"cannot load the TLS certificate from {visible(files)}: not a PEM certificate "
                        "with its private key (or the key does not match it)") from None
    return context
