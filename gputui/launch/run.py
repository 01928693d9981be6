"""``gputui run -- python train.py``: run a command with the probe started inside its Python processes.

The command gets GPUTUI_PROBE=1 and a sitecustomize shim first on PYTHONPATH, so any Python in it
starts the probe once it imports torch; no code change, no installed .pth needed. Signals are passed
on to the command and its exit status comes back as ours. Importing this module does not import torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Union

from gputui.errors import UserError
from gputui.launch import GPUTUI_HOME
from gputui.launch.preflight import stat_fields
from gputui.options import Options

# What signal.signal() returns: the handler that was there (a function, SIG_DFL/SIG_IGN, or None).
_Handler = Union[Callable[[int, FrameType | None], object], int, signal.Handlers, None]

# The sitecustomize shim runs inside the job, so it lives with the probe; found by path, not imported.
BOOTSTRAP = Path(__file__).resolve().parents[1] / "probe" / "bootstrap"
_FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGINT")


class CommandNotFound(UserError):
    """The command to run does not exist (exit status 127, as a shell would say)."""

    exit_code = 127


class CommandNotRunnable(UserError):
    """The command exists but cannot be run (exit status 126, as a shell would say)."""

    exit_code = 126


def probe_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the command runs in: ours, plus the probe switched on."""
    env = dict(os.environ if environ is None else environ)
    env["GPUTUI_PROBE"] = "1"
    env["GPUTUI_PROBE_VIA"] = "run"
    env["GPUTUI_HOME"] = GPUTUI_HOME
    path = [str(BOOTSTRAP)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_command(options: Options) -> int:
    """Run ``options.command`` with the probe; return its exit status (128+N if killed by signal N)."""
    command = list(options.command)
    if not command:
        raise UserError("give the command to run, e.g. gputui run -- python train.py")
    try:
        child = subprocess.Popen(command, env=probe_environment())
    except FileNotFoundError:
        raise CommandNotFound(f"command not found: {command[0]}") from None
    except PermissionError:
        raise CommandNotRunnable(f"permission denied: {command[0]}") from None
    except OSError as exc:
        raise CommandNotRunnable(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    name = Path(command[0]).name
    sys.stderr.write(
        f"gputui: running {name} (pid {child.pid}) with the probe armed: it starts in each Python "
        "process of the command that imports torch, and this says so when one does\n"
    )
    previous = _forward_signals(child)
    announced: set[int] = set()
    try:
        while True:
            try:
                status = child.wait(timeout=ANNOUNCE_EVERY)
                break
            except subprocess.TimeoutExpired:
                _announce_new_probes(child.pid, announced)
            except KeyboardInterrupt:
                continue  # the child got the same Ctrl-C from the terminal; wait for it to finish
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not announced:
        sys.stderr.write(f"gputui: no probe started: {name} ran no Python process that imported "
                         "torch (or it ended too soon to be seen)\n")
    _remove_socket_of(child.pid)
    return 128 - status if status < 0 else status


ANNOUNCE_EVERY = 0.5  # seconds between looks for probes that started in the command


def _announce_new_probes(root: int, announced: set[int]) -> None:
    """Say once for each probe that started in ``root`` or one of its descendants."""
    try:
        from gputui.link.client import discover

        found = discover(all_users=False)
    except Exception:  # looking is a courtesy: never let it stop the command
        return
    for pid in sorted(set(found) - announced):
        if _descends_from(pid, root):
            announced.add(pid)
            sys.stderr.write(f"gputui: probe started in pid {pid}{_rank_of(pid)}; watch it with `gputui` "
                             f"or `gputui probe {pid}` in another pane\n")


def _rank_of(pid: int) -> str:
    """" (rank 1 of 2)" for a rank of a distributed job, as its probe reports; "" otherwise."""
    try:
        from gputui.link.client import fetch_report

        placement = fetch_report(pid, timeout=1.0).placement
    except Exception:  # naming the rank is a courtesy too
        return ""
    if placement is None or placement.rank is None:
        return ""
    of = f" of {placement.world_size}" if placement.world_size is not None else ""
    return f" (rank {placement.rank}{of})"


def _descends_from(pid: int, root: int) -> bool:
    """Whether ``root`` is ``pid`` or one of its ancestors (read from /proc)."""
    for _ in range(64):  # a chain of parents is short; this bounds a race with pid reuse
        if pid == root:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(stat_fields(pid)[1])  # its parent
        except (OSError, IndexError, ValueError):
            return False
    return False


def _forward_signals(child: subprocess.Popen[bytes]) -> dict[int, _Handler]:
    """Pass termination signals on to the child; returns the handlers to restore."""
    previous = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and _child_shares_terminal():
            return  # Ctrl-C at the terminal already reached the child's process group
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for name in _FORWARDED:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, forward)
        except (ValueError, OSError):  # not the main thread, or not allowed
            continue
    return previous


def _child_shares_terminal() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _remove_socket_of(pid: int) -> None:
    """A command killed by a signal never ran its exit handlers: remove its socket for it."""
    try:
        from gputui.link import client

        path = client.find_socket(pid)
        if path is not None:
            path.unlink()
    except Exception:
        pass
