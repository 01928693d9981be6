"""Attaching the PyTorch probe to a running process from the monitor, and detaching it: which process,
why not, and running ``gputui attach PID`` / ``gputui detach PID`` as a command with a time limit.

The monitor runs the CLI's own verbs (a subprocess, in a worker thread), so the UI never blocks on gdb
and the one-line refusal the CLI gives is the one the user sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from gputui.model.record import Record
from gputui.ui.actions.signals import SAME_START, Target, started_at

# Runs a command with a time limit (seconds): its exit status and the line it said (stdout when it
# succeeded, stderr when not). Raises subprocess.TimeoutExpired past the limit. Tests inject one.
Runner = Callable[[list[str], float], tuple[int, str]]

TIME_LIMIT = 60.0  # seconds: gdb loads the target's symbols first, which takes a few on a big job


@dataclass(frozen=True, eq=False, repr=False)
class ProbeTarget(Record):
    """The process a probe key would act on: who it is (as sampled), whether it has a probe now, and
    whether it has loaded PyTorch (None: cannot tell)."""

    target: Target
    probed: bool
    uses_torch: bool | None


def verb(attach: bool) -> str:
    return "attach" if attach else "detach"


def command(pid: int, attach: bool) -> list[str]:
    """``gputui attach PID`` (or detach) with this very gputui."""
    return [sys.executable, "-m", "gputui", verb(attach), str(pid)]


def why_not(found: ProbeTarget, attach: bool, detach_key: str = "D") -> str | None:
    """Why the probe cannot be attached to (or detached from) ``found``, in words; None when it may be.
    ``detach_key``: the key that detaches, as the config maps it."""
    target = found.target
    pid = target.pid
    if attach and found.probed:
        return f"Process {pid} has a probe already ({detach_key} detaches it)."
    if not attach and not found.probed:
        return f"Process {pid} has no probe to detach."
    if attach and found.uses_torch is False:
        return (f"Process {pid} has not loaded PyTorch (no libtorch in its memory map): "
                "the probe would have nothing to watch.")
    if attach and found.uses_torch is None:
        return (f"gputui cannot tell whether process {pid} uses PyTorch: its memory map is not readable "
                f"from here (another user's process?). Its owner can run: gputui attach {pid}")
    local = target.local_pid
    if local is None:
        return f"Process {pid} is not visible from here (another PID namespace): no probe {verb(attach)}ed."
    if local <= 1 or local == os.getpid():
        return f"Refusing to {verb(attach)} a probe in process {local}."
    if target.started_at is None:
        return (f"Cannot {verb(attach)} process {local}: its start time was not read when it was sampled, so "
                "it cannot be told from a new process with the same pid.")
    return None


def what_happens(pid: int, attach: bool, detach_key: str = "D") -> str:
    """The confirmation's words on what the command will do to the job."""
    if attach:
        return (f"gputui will pause process {pid} for a moment (gdb) to start the PyTorch probe inside it. "
                "The job then keeps training; the probe's hooks take a small share of each step. "
                f"{detach_key} detaches it again.")
    return (f"gputui will pause process {pid} for a moment (gdb) to stop its probe: its hooks and socket go, "
            "the job keeps training.")


def act(target: Target, attach: bool, runner: Runner, limit: float = TIME_LIMIT) -> tuple[bool, str]:
    """Run ``gputui attach`` (or detach) on ``target`` if it is still the process sampled: whether it
    succeeded, and its words (or why it did not run)."""
    pid = target.local_pid
    assert pid is not None and target.started_at is not None  # why_not() said so
    now = started_at(pid)
    if now is None:
        return False, f"process {pid} has already exited"
    if abs(now - target.started_at) > SAME_START:
        return False, (f"process {pid} is not the process you chose: that one exited and its pid now belongs to "
                       f"another process; no probe {verb(attach)}ed")
    try:
        status, said = runner(command(pid, attach), limit)
    except subprocess.TimeoutExpired:
        return False, f"gputui {verb(attach)} {pid} did not finish within {limit:g} s: it was stopped"
    except OSError as exc:
        return False, f"could not run gputui {verb(attach)}: {exc.strerror or exc}"
    if status == 0:
        return True, said or f"gputui {verb(attach)} {pid}: done"
    return False, said or f"gputui {verb(attach)} {pid} failed (exit status {status})"


def run_command(argv: list[str], limit: float) -> tuple[int, str]:
    """Run ``argv`` with no input, within ``limit`` seconds: its exit status and its last line."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                          timeout=limit, check=False)
    first, second = (done.stdout, done.stderr) if done.returncode == 0 else (done.stderr, done.stdout)
    return done.returncode, last_line(first) or last_line(second)


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""
