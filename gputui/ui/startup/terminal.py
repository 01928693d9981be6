"""The terminal the live monitor draws on.

Textual writes its screen to standard error. Sent elsewhere (``gputui 2>log``, ``2>/dev/null``, a
common habit), the screen would stay on the early frame for good while the keys still worked, blind.
The monitor only starts where standard output is a terminal (cli.py), so while it runs standard error
is pointed at that terminal, and given back to where it pointed once the monitor has closed: what is
said after (a refusal, an error) still goes to the log it was sent to.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from gputui.errors import UserError

STDOUT, STDERR = 1, 2


@contextmanager
def drawing_on_the_terminal() -> Iterator[None]:
    """Standard error on standard output's terminal while the block runs, where it is not already a
    terminal. Standard error closed at start (``2>&-``): UserError (the CLI says it on standard output)."""
    if sys.__stderr__ is None:  # Python found no descriptor 2: there is no stream for Textual to draw on
        raise UserError("the live monitor draws on standard error, which is closed (2>&-): "
                        "send it somewhere instead, as 2>/dev/null does")
    if _is_terminal(STDERR):
        yield
        return
    sys.__stderr__.flush()
    saved = os.dup(STDERR)
    os.dup2(STDOUT, STDERR)
    try:
        yield
    finally:
        try:
            sys.__stderr__.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, STDERR)
        os.close(saved)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False
