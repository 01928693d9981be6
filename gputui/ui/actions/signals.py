"""Signals: those that end the monitor, and sending one to a process on the user's behalf, with
refusals as words instead of exceptions."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

from gputui.model.record import Record

# Signals that end the monitor: 128 + the signal is its exit status (143 for SIGTERM), as for a
# process the signal killed, so scripts and shells read it the usual way.
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}

WHAT_IT_DOES = {
    "SIGINT": "interrupt it, as Ctrl+C would (PyTorch jobs usually save and stop)",
    "SIGTERM": "ask it to terminate",
    "SIGKILL": "kill it at once; it cannot clean up",
}


def kill_command(name: str, pid: int) -> str:
    """The shell command that sends signal ``name`` ("SIGINT") to ``pid``: ``kill -INT 1234``."""
    return f"kill -{name.removeprefix('SIG')} {pid}"


class StopGuard:
    """Passes SIGCONT on to Textual's driver only when it ends the driver's own SIGTSTP suspend.

    Textual restarts application mode on every SIGCONT, as if each followed its own suspend. After a
    plain SIGSTOP (kill -STOP, a debugger, a job-control shell) nothing was suspended, and the restart
    starts a second keyboard thread beside the first: the two race for each read, and a key that goes
    to one holding half an escape sequence (a terminal's answer to the restart's queries) is swallowed
    until Escape. Such a SIGCONT calls ``reclaim`` instead (from the signal handler: it must only
    schedule work)."""

    def __init__(self, reclaim: Callable[[], object]) -> None:
        self._reclaim = reclaim
        self._suspended = False
        self._before: dict[int, Any] = {}

    def install(self) -> None:
        """Put the guard in front of the handlers in place now (Textual's driver's)."""
        self._before[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._stopping)
        self._before[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._continued)

    def uninstall(self) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before.clear()

    def _stopping(self, signum: int, frame: FrameType | None) -> None:
        self._suspended = True
        before = self._before.get(signum)
        if callable(before):
            before(signum, frame)  # Textual's: leaves application mode, then stops the process
        else:
            os.kill(os.getpid(), signal.SIGSTOP)  # SIGTSTP's default: stop

    def _continued(self, signum: int, frame: FrameType | None) -> None:
        before = self._before.get(signum)
        if self._suspended:
            self._suspended = False
            if callable(before):
                before(signum, frame)
        else:
            self._reclaim()


# Start times are psutil's: the boot time plus the clock ticks (1/100 s) to the process's start, so
# the same process reads the very same value each time, and a new process at the same pid started at
# least a tick later. Half a tick tells them apart (a whole tick, as once here, took one for the other).
SAME_START = 0.5 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, eq=False, repr=False)
class Target(Record):
    """The process a signal would go to: the pid shown, the pid here (None in another PID
    namespace), how to name it in the confirmation, and when it started as read when it was sampled
    (its identity: the pid may name another process by the time the user confirms; None: unknown,
    and then it is not signalled)."""

    pid: int
    local_pid: int | None
    what: str
    started_at: float | None = None


def started_at(pid: int | None) -> float | None:
    """When process ``pid`` (here) started, in seconds since the epoch; None when it is gone."""
    if pid is None:
        return None
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def cannot_signal(target: Target) -> str | None:
    """Why ``target`` cannot be signalled whatever the user answers, in words; None when it may be."""
    pid = target.local_pid
    if pid is None:
        return "this process is not visible from here (another PID namespace): no signal sent"
    if pid <= 1 or pid == os.getpid():
        return f"refusing to signal process {pid}"
    if target.started_at is None:
        # Without the start time read when the row was sampled there is nothing to tell the process
        # shown from one that took its pid since: reading it now would compare the new one with itself.
        return (f"cannot signal process {pid}: its start time was not read when it was sampled, so it "
                "cannot be told from a new process with the same pid; no signal sent")
    return None


def send(target: Target, name: str) -> str | None:
    """Send the named signal to ``target`` if it is still the process sampled; None when sent,
    otherwise why not, in words."""
    why = cannot_signal(target)
    if why is not None:
        return why
    pid = target.local_pid
    assert pid is not None and target.started_at is not None  # cannot_signal() said so
    try:
        # A pidfd holds on to this very process: once its identity is checked, a pid reused by a
        # new process cannot receive the signal. Kernels before 5.3 have none: check, then kill.
        handle = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except ProcessLookupError:
        return f"process {pid} has already exited"
    except OSError:
        handle = None
    try:
        now = started_at(pid)
        if now is None:
            return f"process {pid} has already exited"
        if abs(now - target.started_at) > SAME_START:
            return (f"process {pid} is not the process you chose: that one exited and its pid now "
                    "belongs to another process; no signal sent")
        if handle is not None:
            signal.pidfd_send_signal(handle, SIGNALS[name])
        else:
            os.kill(pid, SIGNALS[name])
    except ProcessLookupError:
        return f"process {pid} has already exited"
    except PermissionError:
        return f"not permitted to signal process {pid} (it belongs to another user)"
    except OSError as exc:
        return f"could not signal process {pid}: {exc.strerror}"
    finally:
        if handle is not None:
            os.close(handle)
    return None
