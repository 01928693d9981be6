"""Sending a signal to a process on the user's behalf, with refusals as words instead of exceptions."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}

WHAT_IT_DOES = {
    "SIGINT": "interrupt it, as Ctrl+C would (PyTorch jobs usually save and stop)",
    "SIGTERM": "ask it to terminate",
    "SIGKILL": "kill it at once; it cannot clean up",
}


@dataclass(frozen=True)
class Target:
    """The process a signal would go to: the pid shown, the pid here (None in another PID
    namespace), and how to name it in the confirmation."""

    pid: int
    local_pid: int | None
    what: str


def send(pid: int | None, name: str) -> str | None:
    """Send the named signal; None when it was sent, otherwise why not, in words."""
    if pid is None:
        return "this process is not visible from here (another PID namespace): no signal sent"
    if pid <= 1 or pid == os.getpid():
        return f"refusing to signal process {pid}"
    try:
        os.kill(pid, SIGNALS[name])
    except ProcessLookupError:
        return f"process {pid} has already exited"
    except PermissionError:
        return f"not permitted to signal process {pid} (it belongs to another user)"
    except OSError as exc:
        return f"could not signal process {pid}: {exc.strerror}"
    return None
