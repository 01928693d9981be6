"""The probe's side of the wire: a Unix socket served from a daemon thread inside the training job.

Stdlib only. It blocks in select() until a client speaks, answers read-only ops from a fixed table of
handlers, and contains every failure (bad clients, handler exceptions, its own bugs) so that nothing
ever reaches the training loop. Who may connect, how many, how fast and for how long is
link/admission.py's to decide.
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
from gputui.link.admission import (
    ACCEPT_BURST,
    ACCEPT_RATE,
    MAX_CLIENTS,
    REQUEST_BURST,
    SILENT_TIMEOUT,
    Admission,
    Entry,
)
from gputui.link.peers import peer_credentials

Handler = Callable[[dict], Any]

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
        self._clock = clock
        self._admission = Admission(
            max_clients=max_clients, silent_timeout=silent_timeout, idle_timeout=idle_timeout,
            accept_rate=accept_rate, accept_burst=accept_burst, request_rate=request_rate,
            request_burst=request_burst, clock=clock, note=self._note)
        self._listening = False  # whether the selector watches the listener (not while accepts rest)
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

    # What the admission policy counted, under the names the server has always had for them.
    clients_dropped_idle = property(lambda self: self._admission.dropped_idle)
    clients_evicted = property(lambda self: self._admission.evicted)
    accepts_deferred = property(lambda self: self._admission.accepts_deferred)
    requests_deferred = property(lambda self: self._admission.requests_deferred)

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
            self._listening = True
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
            if not self._admission.may_accept():
                self._listen(False)  # until the budget refills (_housekeeping)
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                self._admission.nobody_came()
                return
            except OSError as exc:  # EMFILE and friends: the job is short of fds, not our business
                self._note(f"accepting a client: {_describe(exc)}")
                return
            sock.setblocking(False)
            entry = self._entry(sock)
            if entry.evict is not None:
                self._drop_key(entry.evict)
            if entry.refused is not None:
                code, message = entry.refused
                _send_and_close(sock, protocol.error_reply(None, code, message))
                continue
            client = _Client(sock)
            self.clients_accepted += 1
            self._clients[sock.fileno()] = client
            self._admission.admit(sock.fileno())
            self._selector.register(sock, selectors.EVENT_READ, client)

    def _entry(self, sock: socket.socket) -> Entry:
        try:
            creds = peer_credentials(sock)
        except OSError as exc:
            return Entry(refused=(protocol.REFUSED, f"cannot check who is connecting: {exc.strerror}"))
        return self._admission.entry(creds)

    def _listen(self, on: bool) -> None:
        """Watch the listener, or stop watching it while the accept budget refills."""
        assert self._selector is not None and self._listener is not None
        if on and not self._listening:
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        elif not on and self._listening:
            self._selector.unregister(self._listener)
        self._listening = on

    def _housekeeping(self) -> float | None:
        """Listen again when the accept budget allows, answer requests that waited for theirs, drop
        clients past their time; the seconds until the next such deadline (None: nothing to wait
        for but clients)."""
        if self._admission.listen_again():
            self._listen(True)
        for key in self._admission.answer_now():  # in the order they came to wait
            client = self._clients.get(key)
            if client is not None:
                self._serving(client, self._pump)
        # (a client taking a long reply is not idle: each part it takes counts as activity; one
        # that stops reading holds its reply, and its descriptor, only this long)
        for key in self._admission.overdue():
            self._drop_key(key)
        return self._admission.timeout()

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
            if b"\n" in data:  # a whole request
                self._admission.asked(client.sock.fileno())
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
                    self._admission.took_reply(client.sock.fileno(), now)
            if (client.outbox or client.closing or b"\n" not in client.inbox
                    or self._admission.waits(client.sock.fileno())):
                break
        if client.outbox:
            # Read nothing more until the client takes its replies: a client that only writes
            # cannot make the probe buffer without bound.
            self._watch(client, selectors.EVENT_WRITE)
        elif client.closing:
            self._drop(client)
        elif self._admission.waits(client.sock.fileno()):
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
            if not self._admission.may_answer(client.sock.fileno()):
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

    def _drop_key(self, key: int) -> None:
        client = self._clients.get(key)
        if client is not None:
            self._drop(client)
        self._admission.leave(key)

    def _drop(self, client: _Client) -> None:
        fd = client.sock.fileno()
        if fd >= 0:
            self._clients.pop(fd, None)
            self._admission.leave(fd)
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
        for fd, client in list(self._clients.items()):
            client.sock.close()
            self._admission.leave(fd)
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


class _Client:
    """One connected monitor: bytes half-received, replies not yet sent."""

    __slots__ = ("closing", "inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closing = False

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
