"""How a host's snapshot documents reach the monitor: an ssh child running ``gputui --json --watch``
(one NDJSON line per sample), or a ``gputui serve`` endpoint's /snapshot asked over HTTP(S).
A URL host's redirects are followed only within its own origin: its credentials go nowhere else.

Every command is an argv list: no host name ever goes through a local shell. Lines are bounded
(MAX_LINE), so a host cannot make the monitor hold more than one document's worth of its output.
"""

from __future__ import annotations

import base64
import collections
import os
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPMessage
from typing import IO
from urllib.parse import urlsplit

from gputui.fleet.entries import HostEntry

MAX_LINE = 16 << 20  # bytes: a snapshot document of thousands of processes is a few MiB
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
    """One ssh child and its output: ``lines()`` yields its NDJSON lines until it ends."""

    def __init__(self, entry: HostEntry, interval: float) -> None:
        self.entry = entry
        self.errors: collections.deque[str] = collections.deque(maxlen=20)  # its stderr's last lines
        try:
            # A session of its own: closing kills ssh and anything it started, never our terminal's job.
            self.process = subprocess.Popen(
                ssh_argv(entry, interval), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise Ended(f"cannot run {entry.ssh[0]}: {exc.strerror}") from None
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
        """Each line ssh prints; raises Ended with the reason when it stops."""
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline(MAX_LINE + 1)
            if not line:
                break
            if len(line) > MAX_LINE:
                raise Ended(f"a line longer than {MAX_LINE >> 20} MiB: not a snapshot")
            yield line
        status = self.process.wait()
        self._stderr.join(timeout=1.0)
        raise Ended(why_ended(list(self.errors), status))

    def close(self) -> None:
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
        return super().redirect_request(req, fp, code, msg, headers, newurl)


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
