"""The probe's side of the wire: a Unix socket served from a daemon thread inside the training job.

Stdlib only. It blocks in select() until a client speaks, answers read-only ops from a fixed table of
handlers, and contains every failure (bad clients, handler exceptions, its own bugs) so that nothing
ever reaches the training loop.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import secrets
import selectors
import socket
import stat
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputui.link import paths, protocol
from gputui.link.peers import peer_allowed, peer_credentials

Handler = Callable[[dict], Any]

# A bound on the file descriptors a probe may take from the training job: a monitor holds one
# connection per probe, and a few monitors at once (panes, hosts' root) is the most seen in use.
MAX_CLIENTS = 16
# A connection must send a whole request this soon after it opens, or it is dropped: a client that
# connects and says nothing holds a descriptor for nothing. (One that has asked is dropped after
# protocol.IDLE_TIMEOUT without asking again or taking its replies.)
SILENT_TIMEOUT = 5.0
# When the table is full, a newcomer takes the place of a connection that has never asked and is at
# least this old (the oldest first), else of one that has asked but not for a quarter of the idle
# timeout (the longest quiet first): a monitor asking at any usual refresh interval keeps its
# connection, and idle connections held open (by mistake or on purpose) never keep a monitor from
# its answer. The grace spares one that has just connected and is about to ask.
EVICT_GRACE = 0.5
# Accepts per second, sustained and in a burst: far above any monitor's need (one connection per
# probe per watcher), far below what lets a connect flood take a share of the job's CPU (an accept,
# with its peer check and hang-up, costs 100-250 us beside a training loop: 200 a second is 2-5 % of
# a core, and no measurable change in the job's step time; bench_flood.py).
# Beyond it the listener is not watched until the budget refills; the kernel's backlog holds or
# refuses the rest, and drains in a fraction of a second once the flood stops.
ACCEPT_RATE = 200.0
ACCEPT_BURST = 50.0
# Requests answered per second, all connections together, sustained and in a burst. A monitor asks
# each probe about once a second; a few monitors, an exporter and a many-host view at once ask ten or
# so. Each answer costs the job 0.3-1 ms of CPU under its GIL (a report is put together and encoded):
# three pollers asking flat out (~180 a second) cost a 3.7 ms/step CUDA job 10-19 % of its step time
# (docs/validation.md), 20 a second bounds that near 2 %. Beyond it a request waits in its
# connection, in order, until the budget refills; nothing more is read from that connection meanwhile.
REQUEST_RATE = 20.0
REQUEST_BURST = 20.0
# How the probe's report says, once each, that it is asked faster than it answers (a connect flood;
# pollers asking flat out).
FLOOD_NOTE = "asked faster than"
# Connections the kernel queues for accept(). Under a flood the queue is full of the flooder's, and a
# monitor's connection waits behind them: BACKLOG / ACCEPT_RATE (80 ms), not longer.
BACKLOG = 16
_RECV_CHUNK = 64 * 1024
_OUTBOX_HIGH = 1 << 20  # stop answering a client's queued requests until it reads this much

# Servers alive in this process, so one fork hook can switch them all off in a child.
_servers: weakref.WeakSet[ProbeServer] = weakref.WeakSet()


class ProbeServer:
    """Serves ``handlers`` (op name -> function of params returning plain JSON data) on a socket.

    ``start()`` and ``stop()`` never raise; when the server cannot run, ``start()`` returns False and
    ``error`` says why. Contained problems are kept, bounded, in ``problems``.
    """

    def __init__(self, handlers: dict[str, Handler], *, path: Path | str | None = None,
                 max_clients: int = MAX_CLIENTS, silent_timeout: float = SILENT_TIMEOUT,
                 idle_timeout: float = protocol.IDLE_TIMEOUT, accept_rate: float = ACCEPT_RATE,
                 accept_burst: float = ACCEPT_BURST, request_rate: float | None = None,
                 request_burst: float = REQUEST_BURST, clock: Callable[[], float] = time.monotonic):
        """``request_rate`` None: REQUEST_RATE as it is when the server is made (the benchmark lifts
        it to measure what the bound saves)."""
        self._handlers = dict(handlers)
        self._requested_path = Path(path) if path is not None else None
        self._max_clients = max_clients
        self._silent_timeout = silent_timeout
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._accepts = _Budget(accept_rate, accept_burst, clock)
        self._requests = _Budget(REQUEST_RATE if request_rate is None else request_rate, request_burst, clock)
        self._listening_paused_until: float | None = None
        self._waiting: dict[int, _Client] = {}  # connections whose next request waits for the budget
        self._told: set[str] = set()  # the flood notes said
        self.clients_dropped_idle = 0
        self.clients_evicted = 0
        self.accepts_deferred = 0
        self.requests_deferred = 0
        self.path: Path | None = None
        self.error: str | None = None
        self.problems: collections.deque[str] = collections.deque(maxlen=20)
        self.requests_answered = 0
        self.clients_accepted = 0
        self._owner_pid: int | None = None
        self._inode: tuple[int, int] | None = None
        self._forked_child = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._clients: dict[int, _Client] = {}

    @property
    def serving(self) -> bool:
        """True while this process answers on the socket."""
        return (self._thread is not None and self._thread.is_alive() and not self._forked_child
                and self._owner_pid == os.getpid() and not self._stopping.is_set())

    def start(self) -> bool:
        """Bind the socket and start serving in a daemon thread; False (and ``error``) on failure."""
        if self._forked_child:
            self.error = "not serving in a forked child: the parent process owns the probe socket"
            return False
        if self._thread is not None:
            return self.serving
        try:
            self._bind()
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            self._selector = selectors.DefaultSelector()
            assert self._listener is not None  # _bind() made it
            self._selector.register(self._listener, selectors.EVENT_READ, None)
            self._selector.register(self._wake_r, selectors.EVENT_READ, None)
            self._thread = threading.Thread(target=self._serve, name="gputui-probe-server",
                                            daemon=True)
            self._thread.start()
        except Exception as exc:  # noqa: BLE001 - the training job must never see our failure
            self.error = _describe(exc)
            self._close_sockets()
            self._remove_socket()
            self._thread = None
            return False
        _servers.add(self)
        atexit.register(self.stop)
        return True

    def stop(self, timeout: float = 1.0) -> None:
        """Stop serving and remove the socket (only the one this process made)."""
        try:
            atexit.unregister(self.stop)
            self._stopping.set()
            thread = self._thread
            if thread is not None and thread.is_alive() and not self._forked_child:
                self._wake()
                if thread is not threading.current_thread():
                    thread.join(timeout)
            if thread is None or not thread.is_alive():
                self._close_sockets()
            self._remove_socket()
        except Exception as exc:  # noqa: BLE001
            self._note(f"stopping the probe server: {_describe(exc)}")

    # --- binding -------------------------------------------------------------------------------

    def _bind(self) -> None:
        if self._requested_path is not None:
            path = self._requested_path
            paths.check_dir(path.parent)
        else:
            path = paths.socket_path(os.getpid())
        _refuse_live_socket(path)
        # Bind under a temporary name, then rename into place: the socket appears already listening
        # and already 0600, so a client never sees (and never removes as stale) a half-made one.
        temp = path.with_name(paths.temp_socket_name(path.name, secrets.token_hex(4)))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.fspath(temp))
            try:
                os.chmod(temp, paths.SOCKET_MODE)
                listener.listen(BACKLOG)
                listener.setblocking(False)
                os.rename(temp, path)
            except BaseException:
                _unlink_quietly(temp)
                raise
        except BaseException:
            listener.close()
            raise
        info = os.lstat(path)
        self._inode = (info.st_dev, info.st_ino)
        self._listener = listener
        self._owner_pid = os.getpid()
        self.path = path

    def _remove_socket(self) -> None:
        # Only the process that bound it removes it, and only if it is still the same file: a forked
        # child or a newer server must keep theirs.
        if self.path is None or self._inode is None or self._forked_child:
            return
        if self._owner_pid != os.getpid():
            return
        try:
            info = os.lstat(self.path)
        except OSError:
            return
        if (info.st_dev, info.st_ino) == self._inode:
            _unlink_quietly(self.path)
        self._inode = None

    # --- the serving thread --------------------------------------------------------------------

    def _serve(self) -> None:
        selector = self._selector
        assert selector is not None
        try:
            while not self._stopping.is_set():
                for key, mask in selector.select(self._housekeeping()):
                    try:
                        if key.fileobj is self._listener:
                            self._accept()
                        elif key.fileobj is self._wake_r:
                            self._drain_wake()
                        else:
                            self._serving(key.data, self._service, mask)
                    except Exception as exc:  # noqa: BLE001
                        self._note(f"serving: {_describe(exc)}")
        except Exception as exc:  # noqa: BLE001
            if not self._stopping.is_set():
                self.error = f"the probe server stopped: {_describe(exc)}"
        finally:
            self._close_sockets()

    def _serving(self, client: _Client, work: Callable[..., None], *args: Any) -> None:
        """``work(client, *args)``; what goes wrong ends that client, never the server."""
        try:
            work(client, *args)
        except Exception as exc:  # noqa: BLE001 - one bad client must not stop the rest
            self._note(f"serving a client: {_describe(exc)}")
            self._drop(client)

    def _accept(self) -> None:
        assert self._listener is not None and self._selector is not None
        while True:
            if not self._take_token():
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                self._accepts.give_back()  # nobody was waiting: the accept is not spent
                return
            except OSError as exc:  # EMFILE and friends: the job is short of fds, not our business
                self._note(f"accepting a client: {_describe(exc)}")
                return
            sock.setblocking(False)
            refusal = self._refusal(sock)
            if refusal is not None:
                code, message = refusal
                _send_and_close(sock, protocol.error_reply(None, code, message))
                continue
            client = _Client(sock, self._clock())
            self.clients_accepted += 1
            self._clients[sock.fileno()] = client
            self._selector.register(sock, selectors.EVENT_READ, client)

    def _refusal(self, sock: socket.socket) -> tuple[str, str] | None:
        try:
            creds = peer_credentials(sock)
        except OSError as exc:
            return protocol.REFUSED, f"cannot check who is connecting: {exc.strerror}"
        # Without SO_PEERCRED (not Linux) the 0700 directory alone keeps other users out.
        if creds is not None and not peer_allowed(creds[1]):
            self._note(f"refused a connection from uid {creds[1]} (pid {creds[0]})")
            return protocol.REFUSED, "this probe only answers its own user (or root)"
        if len(self._clients) >= self._max_clients and not self._evict_one():
            return protocol.BUSY, f"too many clients (limit {self._max_clients})"
        return None

    def _evict_one(self) -> bool:
        """Make room for a newcomer (see EVICT_GRACE); False when every connection is in use."""
        now = self._clock()
        quiet_enough = self._idle_timeout / 4
        idle = [c for c in self._clients.values()
                if now - c.last_seen >= (quiet_enough if c.spoke else EVICT_GRACE)]
        if not idle:
            return False
        # (counted before the drop: whoever sees the connection close sees it counted)
        self.clients_evicted += 1
        self._drop(min(idle, key=lambda c: (c.spoke, c.last_seen)))
        return True

    # --- bounds on what clients may take -------------------------------------------------------

    def _take_token(self) -> bool:
        """One accept from the rate budget; when it is spent, stop watching the listener until it
        refills (False)."""
        if self._accepts.take():
            return True
        if self._listening_paused_until is None:
            assert self._selector is not None and self._listener is not None
            self._selector.unregister(self._listener)
            self._listening_paused_until = self._clock() + self._accepts.refill_in()
            self.accepts_deferred += 1
            self._tell(f"{FLOOD_NOTE} {self._accepts.rate:g} connections/s: accepting at that rate "
                       "(something keeps connecting to the probe's socket)")
        return False

    def _take_request_token(self, client: _Client) -> bool:
        """One answer from the rate budget; when it is spent, the client waits (False)."""
        if self._requests.take():
            return True
        self._waiting[client.sock.fileno()] = client
        self.requests_deferred += 1
        self._tell(f"{FLOOD_NOTE} {self._requests.rate:g} requests/s: answering at that rate "
                   "(monitors polling it very often, or many at once)")
        return False

    def _tell(self, note: str) -> None:
        if note not in self._told:  # once each: a flood is worth knowing of, not counting
            self._told.add(note)
            self._note(note)

    def _housekeeping(self) -> float | None:
        """Drop clients past their time, listen again when the budget allows; the seconds until
        the next such deadline (None: nothing to wait for but clients)."""
        now = self._clock()
        deadlines = []
        if self._listening_paused_until is not None:
            if now >= self._listening_paused_until:
                assert self._selector is not None and self._listener is not None
                self._selector.register(self._listener, selectors.EVENT_READ, None)
                self._listening_paused_until = None
            else:
                deadlines.append(self._listening_paused_until)
        if self._waiting:
            refill = now + self._requests.refill_in()
            if refill <= now:
                waiting, self._waiting = self._waiting, {}
                for client in waiting.values():  # in the order they came to wait
                    if client.sock.fileno() in self._clients:
                        self._serving(client, self._pump)
            if self._waiting:
                deadlines.append(now + self._requests.refill_in())
        for client in list(self._clients.values()):
            # (a client taking a long reply is not idle: each part it takes counts as activity; one
            # that stops reading holds its reply, and its descriptor, only this long)
            limit = self._idle_timeout if client.spoke else self._silent_timeout
            due = client.last_seen + limit
            if now >= due:
                self.clients_dropped_idle += 1
                self._drop(client)
            else:
                deadlines.append(due)
        # (capped: select() refuses a timeout too large for the OS, as a lifted limit would give)
        return min(3600.0, max(0.0, min(deadlines) - now)) if deadlines else None

    def _service(self, client: _Client, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            try:
                data = client.sock.recv(_RECV_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(client)
                return
            if not data:  # the client went away, maybe mid-message: forget what it half-sent
                self._drop(client)
                return
            client.inbox += data
            if b"\n" in data:  # a whole request: this client speaks, and is not idle
                client.spoke = True
                client.last_seen = self._clock()
        self._pump(client)

    def _pump(self, client: _Client) -> None:
        """Answer complete requests and send replies, as far as the client keeps up."""
        assert self._selector is not None
        while True:
            self._answer_lines(client)
            if client.outbox:
                # (the moment read before the send: once the client has its reply, its stamp is made)
                now = self._clock()
                try:
                    sent = client.sock.send(client.outbox)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:  # it hung up without reading its replies
                    self._drop(client)
                    return
                if sent:
                    del client.outbox[:sent]
                    client.last_seen = now
            if (client.outbox or client.closing or b"\n" not in client.inbox
                    or client.sock.fileno() in self._waiting):
                break
        if client.outbox:
            # Read nothing more until the client takes its replies: a client that only writes
            # cannot make the probe buffer without bound.
            self._watch(client, selectors.EVENT_WRITE)
        elif client.closing:
            self._drop(client)
        elif client.sock.fileno() in self._waiting:
            self._watch(client, 0)  # nor while its request waits for the budget
        else:
            self._watch(client, selectors.EVENT_READ)

    def _watch(self, client: _Client, events: int) -> None:
        """Watch the client's socket for ``events`` (0: not at all, for now)."""
        assert self._selector is not None
        try:
            key = self._selector.get_key(client.sock)
        except KeyError:
            if events:
                self._selector.register(client.sock, events, client)
            return
        if not events:
            self._selector.unregister(client.sock)
        elif key.events != events:
            self._selector.modify(client.sock, events, client)

    def _answer_lines(self, client: _Client) -> None:
        while not client.closing and len(client.outbox) < _OUTBOX_HIGH:
            newline = client.inbox.find(b"\n")
            if newline < 0:
                if len(client.inbox) > protocol.MAX_REQUEST:
                    client.reply(protocol.error_reply(
                        None, protocol.TOO_LARGE,
                        f"request exceeds the {protocol.MAX_REQUEST}-byte limit"), close=True)
                return
            if not self._take_request_token(client):
                return
            line = bytes(client.inbox[:newline])
            del client.inbox[: newline + 1]
            reply, close = self._answer(line)
            client.reply(reply, close)

    def _answer(self, line: bytes) -> tuple[bytes, bool]:
        """The reply to one request line, and whether to hang up after it."""
        try:
            request = protocol.decode_request(line)
        except protocol.ProtocolError as exc:
            return protocol.error_reply(exc.request_id, exc.code, str(exc)), True
        handler = self._handlers.get(request.op)
        if handler is None and request.op != "hello":
            known = ", ".join(sorted(set(self._handlers) | {"hello"}))
            return protocol.error_reply(request.id, protocol.UNKNOWN_OP,
                                        f"unknown op {request.op!r}; this probe serves: {known}"), True
        try:
            result = handler(request.params) if handler is not None else None
            if request.op == "hello":
                result = {**self._hello(), **(result if isinstance(result, dict) else {})}
            reply = protocol.ok_reply(request.id, result)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a probe bug becomes an error reply
            self._note(f"op {request.op!r} failed: {_describe(exc)}")
            return protocol.error_reply(request.id, protocol.HANDLER_FAILED,
                                        f"{request.op} failed: {_describe(exc)}"), False
        self.requests_answered += 1
        return reply, False

    def _hello(self) -> dict:
        return {"protocol": protocol.VERSION, "pid": os.getpid(),
                "ops": sorted(set(self._handlers) | {"hello"})}

    def _drop(self, client: _Client) -> None:
        fd = client.sock.fileno()
        if fd >= 0:
            self._clients.pop(fd, None)
            self._waiting.pop(fd, None)
            try:
                assert self._selector is not None
                self._selector.unregister(client.sock)
            except (KeyError, ValueError):
                pass
        client.sock.close()

    # --- housekeeping --------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            assert self._wake_r is not None
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _close_sockets(self) -> None:
        for client in list(self._clients.values()):
            client.sock.close()
        self._clients.clear()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        if self._selector is not None:
            with contextlib.suppress(Exception):
                self._selector.close()

    def _after_fork_in_child(self) -> None:
        # The serving thread does not exist in the child; close our inherited descriptors so a
        # DataLoader worker holds nothing of the parent's socket, and never unlink it.
        self._forked_child = True
        self._stopping.set()
        self._close_sockets()

    def _note(self, problem: str) -> None:
        if not self.problems or self.problems[-1] != problem:  # a repeat (EMFILE) says nothing new
            self.problems.append(problem)


class _Budget:
    """A token bucket: ``rate`` a second, ``burst`` at once."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]):
        self.rate = rate
        self._burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self) -> bool:
        """One token, if there is one."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        self._tokens += 1.0

    def refill_in(self) -> float:
        """Seconds until the next token (0 when there is one)."""
        tokens = min(self._burst, self._tokens + (self._clock() - self._at) * self.rate)
        return max(0.0, (1.0 - tokens) / self.rate)


class _Client:
    """One connected monitor: bytes half-received, replies not yet sent, and when it last asked."""

    __slots__ = ("closing", "inbox", "last_seen", "outbox", "sock", "spoke")

    def __init__(self, sock: socket.socket, now: float):
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closing = False
        self.spoke = False  # has sent a whole request
        self.last_seen = now  # when it connected, sent its latest request or took part of a reply

    def reply(self, data: bytes, close: bool) -> None:
        self.outbox += data
        if close:
            self.closing = True
            self.inbox.clear()


def _refuse_live_socket(path: Path) -> None:
    """Raise if a live server listens at ``path``; remove it if it is a stale socket."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise FileExistsError(f"{path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        _unlink_quietly(path)  # nobody listens: a stale socket from a dead process
        return
    except OSError:
        pass  # timed out or similar: somebody is there, busy
    finally:
        probe.close()
    raise FileExistsError(f"another live probe is listening on {path}")


def _send_and_close(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass
    sock.close()


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _disable_servers_in_child() -> None:
    for server in list(_servers):
        with contextlib.suppress(Exception):
            server._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disable_servers_in_child)
