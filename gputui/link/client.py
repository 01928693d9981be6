"""The monitor's one-shot calls to a probe, for the CLI: ``request``, ``fetch_report``,
``fetch_fresh_report``. The pieces they stand on have modules of their own (discovery.py finds the
probes, connection.py talks to one, watcher.py polls them all for the live monitor); their names are
here too, for the callers that know the wire by this module.
"""

from __future__ import annotations

import pwd
import time
from pathlib import Path
from typing import Any, Mapping

from gputui.link import paths, protocol
from gputui.link.connection import (
    BAD_REPLY,
    BUSY,
    FAILED,
    MISMATCH,
    NO_PROBE,
    NOT_YOURS,
    REFUSED,
    TIMED_OUT,
    ProbeLink,
    ProbeUnavailable,
    decode_report,
    result_of,
)
from gputui.link.discovery import discover, find_socket
from gputui.link.watcher import ProbeWatcher
from gputui.model import ProbeReport
from gputui.pids import pid_exists
from gputui.untrusted import visible

__all__ = [
    "BAD_REPLY", "BUSY", "FAILED", "MISMATCH", "NOT_YOURS", "NO_PROBE", "REFUSED", "TIMED_OUT", "ProbeLink",
    "ProbeUnavailable", "ProbeWatcher", "decode_report", "discover", "fetch_fresh_report", "fetch_report",
    "find_socket", "request",
]

BUSY_RETRY = 0.05  # seconds between tries at a busy probe, within a request's timeout


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
                return result_of(pid, reply, request_id)  # one request per connection: one reply
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
