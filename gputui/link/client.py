"""The monitor's side of the wire: find this user's probes, ask them for reports.

``fetch_report``/``request`` are one-shot calls for the CLI; ``ProbeWatcher`` keeps connections open
and polls every probe at once for the live monitor, and never raises.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pwd
import selectors
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from gputui.errors import UserError
from gputui.link import paths, protocol
from gputui.link.peers import peer_credentials
from gputui.model import FIRST_STEPS_KEPT, ProbeReport, from_jsonable
from gputui.pids import pid_exists
from gputui.untrusted import visible

# Why a probe could not be reached (ProbeUnavailable.reason).
NO_PROBE = "no_probe"
REFUSED = "refused"
TIMED_OUT = "timed_out"
MISMATCH = "protocol_mismatch"
BAD_REPLY = "bad_reply"
FAILED = "failed"  # the probe answered with an error
BUSY = "busy"  # the probe serves as many connections as it allows
NOT_YOURS = "not_yours"  # the probe is another user's, in a directory closed to this one
BUSY_RETRY = 0.05  # seconds between tries at a busy probe, within a request's timeout

_RECV_CHUNK = 256 * 1024
STALE_AFTER = 0.8  # of the probe's idle timeout: reconnect rather than reuse


class ProbeUnavailable(UserError):
    """A probe could not answer; ``reason`` is one of the module's reason codes."""

    def __init__(self, pid: int, reason: str, detail: str):
        super().__init__(f"process {pid}: {detail}")
        self.pid = pid
        self.reason = reason
        self.detail = detail


def discover(environ: Mapping[str, str] | None = None, *,
             all_users: bool | None = None) -> dict[int, Path]:
    """The probed processes that are alive, by pid as this monitor sees them; sockets of dead pids
    are removed.

    This user's probes only, unless ``all_users`` (default: when running as root, who may talk to
    every probe). Other users' directories are only read, never cleaned. A probe in another PID
    namespace (a container sharing the directory) is listed under the pid it has here, which the
    kernel tells on connecting; one whose process cannot be seen from here is left out.
    """
    if all_users is None:
        all_users = os.getuid() == 0
    own = paths.search_dirs(environ)
    directories = paths.every_users_dirs(environ) if all_users else own
    here = paths.pid_namespace()
    here = None if here == paths.INITIAL_PID_NAMESPACE else here
    found: dict[int, Path] = {}
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            named = paths.parse_socket_name(path)
            if named is None:
                continue
            pid, namespace = named
            if namespace != here:
                pid = _serving_pid(path) or 0
                if pid > 0 and pid not in found:
                    found[pid] = path
                continue
            if pid in found:
                continue
            if pid_exists(pid):
                found[pid] = path
            elif directory in own and not _listening(path):
                # Someone listening under a dead pid is not ours to remove: the connection check
                # (ProbeLink) keeps it from being taken for any other process.
                _remove_stale(path)
    return dict(sorted(found.items()))


def find_socket(pid: int, environ: Mapping[str, str] | None = None) -> Path | None:
    """The socket of process ``pid``'s probe, in this user's directories (every user's for root)."""
    directories = paths.every_users_dirs(environ) if os.getuid() == 0 else paths.search_dirs(environ)
    name = paths.socket_name(pid, paths.pid_namespace())
    for directory in directories:
        path = directory / name
        if path.exists():
            return path
    # A probe in another PID namespace is named by its own pid there: ask who serves each one.
    return discover(environ).get(pid)


def request(pid: int, op: str, params: dict | None = None, *, timeout: float = 2.0,
            environ: Mapping[str, str] | None = None) -> Any:
    """Send one request to ``pid``'s probe and return its result; raises ProbeUnavailable."""
    path = find_socket(pid, environ)
    if path is None:
        if not pid_exists(pid):
            raise ProbeUnavailable(pid, NO_PROBE, "no such process")
        _refuse_another_users_probe(pid)
        raise ProbeUnavailable(pid, NO_PROBE, "no probe is running in this process (start it "
                               "with gputui.probe.start(), gputui run, or GPUTUI_PROBE=1)")
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _ask_once(pid, path, op, params, deadline, timeout)
        except ProbeUnavailable as exc:
            # A probe at its limit of connections frees one as soon as an idle client goes: try
            # again, briefly, rather than give up on a job that is merely being watched a lot.
            if exc.reason != BUSY or time.monotonic() + BUSY_RETRY >= deadline:
                raise
        time.sleep(BUSY_RETRY)


def _refuse_another_users_probe(pid: int) -> None:
    """Raise ProbeUnavailable naming the owner where ``pid``'s probe listens in another user's
    directory, which this user cannot enter: not "no probe is running"."""
    theirs = paths.other_users_probe(pid)
    if theirs is None:
        return
    directory, uid = theirs
    try:
        owner = f"{visible(pwd.getpwuid(uid).pw_name)} (uid {uid})"
    except KeyError:  # a uid with no passwd entry (a container's, an LDAP user's offline)
        owner = f"uid {uid}"
    raise ProbeUnavailable(pid, NOT_YOURS, f"its probe belongs to {owner}, in "
                           f"{visible(str(directory))}, which other users cannot enter; run gputui probe "
                           "as that user or as root")


def _ask_once(pid: int, path: Path, op: str, params: dict | None, deadline: float,
              timeout: float) -> Any:
    link = ProbeLink(pid, path, timeout=max(0.01, deadline - time.monotonic()))
    try:
        request_id = link.send(op, params)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProbeUnavailable(pid, TIMED_OUT, f"the probe did not answer within {timeout:g} s")
            link.wait(remaining)
            for reply in link.receive():
                return _result(pid, reply, request_id)  # one request per connection: one reply
    finally:
        link.close()


def fetch_report(pid: int, timeout: float = 2.0, *,
                 environ: Mapping[str, str] | None = None) -> ProbeReport:
    """``pid``'s probe report right now; raises ProbeUnavailable saying why not."""
    return decode_report(pid, request(pid, "report", timeout=timeout, environ=environ))


FRESH_WAIT = 1.0  # seconds a one-shot report may wait for figures read after it asked
FRESH_RETRY = 0.1  # seconds between its tries


def fetch_fresh_report(pid: int, timeout: float = 2.0, *, environ: Mapping[str, str] | None = None,
                       wait: float = FRESH_WAIT) -> ProbeReport:
    """``pid``'s report with figures read after it was asked for, where the job steps within ``wait``.

    A report that finds the figures older than protocol.FRESH_FOR leaves a request that the job takes
    up at its next step: a one-shot caller (``gputui probe PID``) asks again until the figures are fresh,
    and otherwise (a job in a long step) prints the last answer, which says how old its figures are.
    """
    report = fetch_report(pid, timeout, environ=environ)
    deadline = time.monotonic() + wait
    while _figures_stale(report) and time.monotonic() < deadline:
        time.sleep(FRESH_RETRY)
        report = fetch_report(pid, timeout, environ=environ)
    return report


def _figures_stale(report: ProbeReport) -> bool:
    return report.read_at is None or report.taken_at - report.read_at > protocol.FRESH_FOR


def decode_report(pid: int, result: Any) -> ProbeReport:
    """The report in ``result``, as process ``pid``'s: a probe in a container numbers itself in its
    own PID namespace, the monitor by the pid it has here."""
    try:
        report = from_jsonable(ProbeReport, result)
        return report if report.pid == pid else dataclasses.replace(report, pid=pid)
    except ValueError as exc:
        raise ProbeUnavailable(pid, BAD_REPLY, f"the probe sent a report this monitor cannot read "
                               f"({exc}); is gputui the same version in both places?") from None


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
            _remove_stale(path)
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
        serving = _peer_pid(sock)
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


def _result(pid: int, reply: dict, request_id: int | None = None) -> Any:
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
                self._take_report(pid, _result(pid, reply))
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


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end in this PID namespace (0: not visible from here),
    or None where the system cannot say."""
    try:
        creds = peer_credentials(sock)
    except OSError:
        return None
    return None if creds is None else creds[0]


def _serving_pid(path: Path) -> int | None:
    """The pid (here) of the process listening on ``path``, or None when nobody answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        sock.connect(os.fspath(path))
        return _peer_pid(sock)
    except OSError:
        return None
    finally:
        sock.close()


def _listening(path: Path) -> bool:
    """True if a server accepts connections on the socket at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        sock.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # busy or not ours to reach: leave it be
    finally:
        sock.close()
    return True


def _remove_stale(path: Path) -> None:
    """Remove a socket file left by a dead process (only a socket, only ours)."""
    try:
        info = os.lstat(path)
        if stat.S_ISSOCK(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(path)
    except OSError:
        pass
