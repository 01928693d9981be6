"""How a host's snapshot documents reach the monitor: an ssh child running ``gputui --json --watch``
(one NDJSON line per sample), or a ``gputui serve`` endpoint's /snapshot asked over HTTP(S).
A URL host's redirects are followed only within its own origin: its credentials go nowhere else.

Every command is an argv list: no host name ever goes through a local shell. Lines are bounded
(MAX_LINE), so a host cannot make the monitor hold more than one document's worth of its output, and
paced: a host is asked for a document every interval, and one that sends faster (a flood) has only
its newest line handed on, one per interval, the rest dropped unparsed while the pipe holds it back.
"""

from __future__ import annotations

import base64
import collections
import io
import os
import select
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPMessage
from typing import IO, Callable
from urllib.parse import urlsplit

from gputui.fleet.entries import HostEntry

MAX_LINE = 16 << 20  # bytes: a snapshot document of thousands of processes is a few MiB
CHUNK = 1 << 20  # bytes read from ssh at once
BURST = 4  # lines handed on at once before pacing starts: a shell's greeting, a late host catching up
NOT_FOUND = 127  # the shell's status for a command it cannot find
NO_GPUTUI = "no gputui on PATH: set its command in [hosts]"


class Ended(Exception):
    """The connection ended; the message says why, for the host's header line."""


def ssh_argv(entry: HostEntry, interval: float) -> list[str]:
    """The ssh command line that streams ``entry``'s snapshots every ``interval`` seconds."""
    # BatchMode: a password prompt would wait forever on a terminal the user cannot see.
    return [*entry.ssh, "-o", "BatchMode=yes", "--", entry.name,
            f"{entry.command} --json --watch {interval:g}"]


class SshStream:
    """One ssh child and its output: ``lines()`` yields its NDJSON lines, paced, until it ends."""

    def __init__(self, entry: HostEntry, interval: float) -> None:
        self.entry = entry
        self.interval = interval
        self.errors: collections.deque[str] = collections.deque(maxlen=20)  # its stderr's last lines
        self._closed = threading.Event()
        try:
            # A session of its own: closing kills ssh and anything it started, never our terminal's job.
            self.process = subprocess.Popen(
                ssh_argv(entry, interval), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise Ended(f"cannot run {entry.ssh[0]}: {exc.strerror}") from None
        assert isinstance(self.process.stdout, io.BufferedReader)  # (Popen's default buffering)
        self._stdout = self.process.stdout  # read in chunks with read1 (one system call), never by lines
        self._output = select.poll()
        self._output.register(self._stdout.fileno(), select.POLLIN)
        self._stderr = threading.Thread(target=self._read_errors, name=f"gputui-ssh-err {entry.name}",
                                        daemon=True)
        self._stderr.start()

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for raw in iter(lambda: self.process.stderr.readline(4096), b""):  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self.errors.append(line)

    def lines(self) -> Iterator[bytes]:
        """ssh's newest line, at most one an interval after the first BURST; raises Ended when it stops.

        While a line waits for its turn nothing is read, so a flooding host is held back by the pipe
        rather than costing the monitor a core; before the line goes, what came meanwhile is read and
        only the newest complete line kept, so a host that was held up does not fall behind.
        """
        newest, pace = NewestLine(), Pace(self.interval, BURST)
        more = True
        while more:
            if newest.line is None:
                more = self._read(newest, CHUNK)  # waits for ssh
            elif self._has_output():
                more = self._read(newest, MAX_LINE)
            if newest.line is None:
                continue
            delay = pace.delay()
            if delay and more:
                if self._closed.wait(delay):
                    break
                continue
            yield newest.take()
        status = self.process.wait()
        self._stderr.join(timeout=1.0)
        raise Ended(why_ended(list(self.errors), status))

    def _has_output(self) -> bool:
        return bool(self._output.poll(0))

    def _read(self, newest: NewestLine, budget: int) -> bool:
        """Read ssh's output into ``newest``: one chunk, then more while there is more, up to about
        ``budget`` bytes. False once the output has ended."""
        got = 0
        while True:
            try:
                chunk = self._stdout.read1(CHUNK)
            except (OSError, ValueError):  # closed by close() from another thread
                chunk = b""
            if not chunk:
                newest.end()
                return False
            newest.feed(chunk)
            got += len(chunk)
            if got >= budget or not self._has_output():
                return True

    def close(self) -> None:
        self._closed.set()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


class NewestLine:
    """Output read in chunks, reduced to its newest complete line (``line``, until taken) and the
    start of the next; a line may be MAX_LINE bytes at most."""

    def __init__(self) -> None:
        self.line: bytes | None = None
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        if end < 0:
            self._partial += chunk
        else:
            start = chunk.rfind(b"\n", 0, end) + 1
            self._keep(bytes(self._partial + chunk[:end + 1]) if start == 0 else chunk[start:end + 1])
            self._partial = bytearray(chunk[end + 1:])
        if len(self._partial) > MAX_LINE:
            raise Ended(f"a line longer than {MAX_LINE >> 20} MiB: not a snapshot")

    def end(self) -> None:
        """The output ended: a last line without its newline still counts."""
        if self._partial:
            self._keep(bytes(self._partial))
            self._partial.clear()

    def take(self) -> bytes:
        assert self.line is not None
        line, self.line = self.line, None
        return line

    def _keep(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            raise Ended(f"a line longer than {MAX_LINE >> 20} MiB: not a snapshot")
        self.line = line


class Pace:
    """A token bucket: ``burst`` at once, then one every ``gap`` seconds."""

    def __init__(self, gap: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.gap, self.burst, self._clock = gap, burst, clock
        self._tokens, self._at = float(burst), clock()

    def delay(self) -> float:
        """0 when one may go now (and it is counted), else the seconds until one may."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) / self.gap)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) * self.gap


def why_ended(errors: list[str], status: int) -> str:
    """Why an ssh child stopped, from its stderr's last lines and its exit status."""
    last = errors[-1] if errors else ""
    if status == NOT_FOUND or "command not found" in last or (
            "gputui" in last and "No such file or directory" in last):
        return NO_GPUTUI
    if last:
        return last.removeprefix("ssh: ")
    return f"ssh ended with status {status}" if status else "the remote gputui stopped"


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """``url``'s scheme, host and port: where a request (and its credentials) goes."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: an origin of its own, never ours
        port = -1
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), DEFAULT_PORTS.get(scheme) if port is None else port


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the origin asked (same scheme, host and port).

    urllib's own handler copies every header, Authorization included, to wherever a host points
    it, and follows https to plain http: a host (or whoever answers for it) could collect the
    password that way. Refusing another scheme also refuses every https -> http downgrade.
    """

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: HTTPMessage, newurl: str) -> urllib.request.Request | None:
        if origin(newurl) != origin(req.full_url):
            fp.close()
            parts = urlsplit(newurl)
            where = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # any userinfo left out
            raise Ended(f"redirected to another origin ({where}); not followed")
        # Python 3.10's handler knows 301, 302, 303 and 307 only (308 came in 3.11); a 308 is a 307
        # that is permanent, which a GET of /snapshot follows alike.
        return super().redirect_request(req, fp, 307 if code == 308 else code, msg, headers, newurl)

    http_error_308 = urllib.request.HTTPRedirectHandler.http_error_302


# One opener for every host's thread, as urlopen's own is: it keeps no state between requests.
_OPENER = urllib.request.build_opener(SameOriginRedirects)


def fetch_snapshot(entry: HostEntry, timeout: float) -> bytes:
    """The body of ``entry``'s /snapshot; raises Ended with the reason."""
    assert entry.url is not None
    request = urllib.request.Request(f"{entry.url}/snapshot")
    if entry.auth is not None:
        token = base64.b64encode(f"{entry.auth[0]}:{entry.auth[1]}".encode()).decode("ascii")
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            body: bytes = answer.read(MAX_LINE + 1)
    except urllib.error.HTTPError as exc:
        raise Ended(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise Ended(str(getattr(exc.reason, "strerror", None) or exc.reason)) from None
    except (OSError, ValueError) as exc:  # timeouts, resets, a bad status line
        raise Ended(str(exc) or type(exc).__name__) from None
    if len(body) > MAX_LINE:
        raise Ended(f"an answer longer than {MAX_LINE >> 20} MiB: not a snapshot")
    return body
