"""Signals: those that end the monitor, and sending one to a process on the user's behalf, with
refusals as words instead of exceptions."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

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


# Start times are psutil's (boot time plus clock ticks): the same process reads the same to well
# under this, and a pid reused by a new process cannot have started within it of the old one.
SAME_START = 0.01


@dataclass(frozen=True)
class Target:
    """The process a signal would go to: the pid shown, the pid here (None in another PID
    namespace), how to name it in the confirmation, and when it started (its identity: a pid can
    be reused by another process before the user confirms)."""

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


def send(target: Target, name: str) -> str | None:
    """Send the named signal to ``target`` if it is still the same process; None when sent,
    otherwise why not, in words."""
    pid = target.local_pid
    if pid is None:
        return "this process is not visible from here (another PID namespace): no signal sent"
    if pid <= 1 or pid == os.getpid():
        return f"refusing to signal process {pid}"
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
        if target.started_at is None or abs(now - target.started_at) > SAME_START:
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
