"""The bounds of one ``gputui attach``/``detach``: a time limit, and the signals that end it early.

Left to their default actions, SIGTERM and SIGHUP would end gputui on the spot: its files left in
the temp directory, gdb perhaps mid-call. Inside ``bounded()`` they, SIGINT and the time limit
raise instead, so every ``finally`` runs: gdb is interrupted as its own time bound does it, the job
let go, the files removed. ``held()`` keeps them waiting while that clean-up runs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from gputui.errors import UserError
from gputui.launch.preflight import Refused

STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LET_GO = "the job was let go and runs on"


class Stopped(UserError):
    """gputui was told to stop (a signal); it exits as the signal would have it, 128 + its number."""

    def __init__(self, signum: int, what: str):
        super().__init__(f"{what} stopped by {signal.Signals(signum).name}: {LET_GO}")
        self.exit_code = 128 + signum


@contextmanager
def bounded(seconds: float, what: str) -> Iterator[None]:
    """Within the block, the signals that stop gputui raise Stopped, and past ``seconds`` Refused:
    both name ``what`` ("gputui attach 1234"). The main thread only (signal handlers)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum, what)

    def time_up(signum: int, frame: FrameType | None) -> None:
        raise Refused(f"{what} did not finish within {seconds:g} s: {LET_GO}")

    previous = {signum: signal.signal(signum, stop) for signum in STOPPING}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def held() -> Iterator[None]:
    """The stopping signals and the time limit wait (blocked) until the block is done: a clean-up
    is not cut short. One that came meanwhile is raised after it."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {*STOPPING, signal.SIGALRM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
