"""The first sample on screen before Textual has loaded: the ``--once`` picture, drawn on the
alternate screen, which the live monitor then paints over.

Importing Textual alone takes about 0.3 s; the driver, the first sample and the plain renderer are
ready well before. So the user sees the GPUs and processes as soon as they are known instead of a
blank pane. The alternate screen is the one the live monitor uses, so nothing is left behind in the
scrollback, and the frame is written only until the monitor takes the terminal over.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gputui.model import Snapshot
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.render import render
from gputui.ui.actions.signals import EXIT_SIGNALS

# alternate screen, no cursor, cleared; lines are not wrapped while the frame is written (a line a
# column too long must not scroll the screen) and wrapping is back on when it is done
ENTER = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J\x1b[?7l"
DONE = "\x1b[?7h"
LEAVE = "\x1b[?25h\x1b[?1049l"


class EarlyFrame:
    """Draws one snapshot while nobody else owns the terminal; ``hand_over`` ends that."""

    def __init__(self, options: Options, fd: int):
        self._options = options
        self._fd = fd
        self._lock = threading.Lock()
        self._open = True
        self.drawn = False

    @classmethod
    def for_terminal(cls, options: Options) -> EarlyFrame | None:
        """One for standard output when it is a terminal; None otherwise (nothing to draw on)."""
        if not terminal.is_terminal():
            return None
        try:
            return cls(options, sys.stdout.fileno())
        except (AttributeError, ValueError, OSError):  # a stand-in stdout with no descriptor
            return None

    def draw(self, snapshot: Snapshot) -> None:
        """Draw ``snapshot`` as ``--once`` would, cut to the window, unless the monitor has taken over."""
        size = shutil.get_terminal_size((80, 24))
        text = render(snapshot, color=terminal.use_color(self._options),
                      ascii=terminal.use_ascii(self._options), width=size.columns)
        lines = text.rstrip("\n").split("\n")[:size.lines]
        with self._lock:
            if not self._open:
                return
            self._write(ENTER + "\r\n".join(lines) + DONE)
            self.drawn = True

    def hand_over(self) -> None:
        """The live monitor owns the terminal from now on (it paints over the frame)."""
        with self._lock:
            self._open = False

    def undo(self) -> None:
        """The monitor is not coming after all: leave the alternate screen if the frame entered it."""
        with self._lock:
            self._open = False
            if self.drawn:
                self._write(LEAVE)
                self.drawn = False

    def _write(self, text: str) -> None:
        data = text.encode(sys.stdout.encoding or "utf-8", "replace")
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:
            pass  # a terminal gone away: the monitor will find out and say so


@contextmanager
def until_the_monitor_starts(frame: EarlyFrame | None) -> Iterator[None]:
    """While ``frame`` may be on screen and the monitor is not yet running: a signal that ends
    gputui, or any error, leaves the alternate screen before the process goes (exit status 128 +
    the signal, as the monitor gives); without either, the monitor takes the terminal over."""
    if frame is None:
        yield
        return

    def end(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, end) for signum in EXIT_SIGNALS}
    try:
        yield
    except BaseException:
        frame.undo()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    frame.hand_over()
