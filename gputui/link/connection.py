"""One open connection to one probe (ProbeLink), and what its replies mean: a result, or
ProbeUnavailable saying why the probe could not answer, as one of the reason codes below.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import selectors
import socket
import time
from pathlib import Path
from typing import Any

from gputui.errors import UserError
from gputui.link import protocol
from gputui.link.discovery import remove_stale
from gputui.link.peers import peer_pid
from gputui.model import ProbeReport, from_jsonable

# Why a probe could not be reached (ProbeUnavailable.reason).
NO_PROBE = "no_probe"
REFUSED = "refused"
TIMED_OUT = "timed_out"
MISMATCH = "protocol_mismatch"
BAD_REPLY = "bad_reply"
FAILED = "failed"  # the probe answered with an error
BUSY = "busy"  # the probe serves as many connections as it allows
NOT_YOURS = "not_yours"  # the probe is another user's, in a directory closed to this one

_RECV_CHUNK = 256 * 1024


class ProbeUnavailable(UserError):
    """A probe could not answer; ``reason`` is one of the module's reason codes."""

    def __init__(self, pid: int, reason: str, detail: str):
        super().__init__(f"process {pid}: {detail}")
        self.pid = pid
        self.reason = reason
        self.detail = detail


class ProbeLink:
    """One open connection to one probe; non-blocking after connect, so many can be polled at once."""

    _ids = itertools.count(1)

    def __init__(self, pid: int, path: Path, *, timeout: float = 1.0):
        self.pid = pid
        self.path = path
        self.pending: set[int] = set()  # request ids not yet answered
        self.sent_at = 0.0  # time.monotonic() since when we have been waiting for a reply
        self.used_at = time.monotonic()  # opened, or last sent a request
        self._inbox = bytearray()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            _connect(sock, path, timeout)
        except FileNotFoundError:
            sock.close()
            raise ProbeUnavailable(pid, NO_PROBE, "the probe has gone away") from None
        except ConnectionRefusedError:
            sock.close()
            remove_stale(path)
            raise ProbeUnavailable(pid, NO_PROBE, "the probe has gone away (stale socket removed)"
                                   ) from None
        except PermissionError:
            sock.close()
            raise ProbeUnavailable(pid, REFUSED, f"permission denied on {path}") from None
        except (socket.timeout, BlockingIOError):
            sock.close()
            raise ProbeUnavailable(pid, TIMED_OUT, "the probe did not accept the connection "
                                   "(too busy)") from None
        except OSError as exc:
            sock.close()
            raise ProbeUnavailable(pid, NO_PROBE, f"cannot connect: {exc.strerror}") from None
        # The kernel says which process serves the socket, as this monitor numbers it: a report is
        # only ever taken as process ``pid``'s when ``pid`` itself answers. Not a reused pid, not
        # a job with that number in another container, not a socket planted under its name.
        serving = peer_pid(sock)
        if serving is not None and serving != pid:
            sock.close()
            who = f"process {serving}" if serving else "a process in another PID namespace"
            raise ProbeUnavailable(pid, REFUSED, f"the socket {path.name} is served by {who}, not "
                                   f"by process {pid}: ignored") from None
        sock.setblocking(False)
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, op: str, params: dict | None = None) -> int:
        self.used_at = time.monotonic()
        request_id = next(self._ids)
        data = protocol.request_line(request_id, op, params)
        self.sock.settimeout(1.0)  # requests are small; a probe that cannot take them is stuck
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise ProbeUnavailable(self.pid, TIMED_OUT, "the probe is not reading") from None
        except OSError:
            # It may have hung up after an error reply (a refusal): that reply says more.
            pass
        finally:
            self.sock.setblocking(False)
        if not self.pending:
            self.sent_at = time.monotonic()
        self.pending.add(request_id)
        return request_id

    def wait(self, timeout: float) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.select(timeout)

    def receive(self) -> list[dict]:
        """Replies complete so far (may be none); raises ProbeUnavailable if the probe hung up."""
        closed = False
        while True:
            try:
                data = self.sock.recv(_RECV_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionResetError:
                closed = True  # a probe that hangs up after an error reply may reset: read what came
                break
            except OSError as exc:
                raise ProbeUnavailable(self.pid, NO_PROBE, f"the connection failed: {exc}") from None
            if not data:
                closed = True
                break
            self._inbox += data
            if len(self._inbox) - (self._inbox.rfind(b"\n") + 1) > protocol.MAX_REPLY:
                raise ProbeUnavailable(self.pid, BAD_REPLY,
                                       f"reply exceeds the {protocol.MAX_REPLY}-byte limit")
        replies = []
        while (newline := self._inbox.find(b"\n")) >= 0:
            line = bytes(self._inbox[:newline])
            del self._inbox[: newline + 1]
            try:
                reply = protocol.parse_object(line, protocol.MAX_REPLY)
            except protocol.ProtocolError as exc:
                raise ProbeUnavailable(self.pid, BAD_REPLY, f"unreadable reply: {exc}") from None
            if isinstance(reply.get("id"), int):
                self.pending.discard(reply["id"])
            if self.pending:
                self.sent_at = time.monotonic()
            replies.append(reply)
        if closed and not replies:
            raise ProbeUnavailable(self.pid, NO_PROBE, "the probe closed the connection")
        return replies

    def close(self) -> None:
        self.sock.close()


def result_of(pid: int, reply: dict, request_id: int | None = None) -> Any:
    """The result of a reply, or ProbeUnavailable with the probe's reason."""
    if not protocol.is_version(reply.get("v")):
        raise ProbeUnavailable(pid, MISMATCH, f"the probe speaks protocol version {reply.get('v')!r}"
                               f", this monitor version {protocol.VERSION}; use the same gputui "
                               "version for both")
    if reply.get("ok") is True:
        if request_id is not None and reply.get("id") != request_id:
            raise ProbeUnavailable(pid, BAD_REPLY, f"the probe answered request {reply.get('id')!r}"
                                   f", not the one sent ({request_id})")
        return reply.get("result")
    code = reply.get("code")
    error = str(reply.get("error") or "unknown error")
    if code == protocol.REFUSED:
        raise ProbeUnavailable(pid, REFUSED, f"the probe refused the connection: {error}")
    if code == protocol.WRONG_VERSION:
        raise ProbeUnavailable(pid, MISMATCH, error)
    if code == protocol.BUSY:
        raise ProbeUnavailable(pid, BUSY, f"the probe is busy: {error}")
    if reply.get("ok") is not False:
        raise ProbeUnavailable(pid, BAD_REPLY, "the reply has no 'ok' field")
    raise ProbeUnavailable(pid, FAILED, f"the probe could not answer: {error}")


def decode_report(pid: int, result: Any) -> ProbeReport:
    """The report in ``result``, as process ``pid``'s: a probe in a container numbers itself in its
    own PID namespace, the monitor by the pid it has here."""
    try:
        report = from_jsonable(ProbeReport, result)
        return report if report.pid == pid else dataclasses.replace(report, pid=pid)
    except ValueError as exc:
        raise ProbeUnavailable(pid, BAD_REPLY, f"the probe sent a report this monitor cannot read "
                               f"({exc}); is gputui the same version in both places?") from None


def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
    """Connect, waiting up to ``timeout`` while the probe's backlog is full (a Unix socket says
    EAGAIN at once rather than queue the caller; the probe takes connections at a bounded rate)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(os.fspath(path))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
