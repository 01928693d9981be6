"""What the plain modes need to know about stdout: colour or not, how wide, and a closed pipe.

``gputui --json | head`` closes the pipe early; that is the reader's choice, not an error, so output
goes quietly to /dev/null from then on and the command exits 0.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, TextIO

from gputui.plain.render import MIN_WIDTH

FALLBACK_WIDTH = 120  # piped into a file or a log: no terminal to ask


def use_color(options: Any, stream: TextIO | None = None) -> bool:
    """Colour when asked, or by default when writing to a terminal that wants it."""
    if options.color is not None:
        return options.color
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def width() -> int:
    """Terminal columns (or $COLUMNS, or FALLBACK_WIDTH when not a terminal), at least MIN_WIDTH."""
    return max(MIN_WIDTH, shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns)


def is_terminal(stream: TextIO | None = None) -> bool:
    return _isatty(stream or sys.stdout)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def emit(text: str) -> None:
    """Write and flush, so a watcher's log sees each snapshot as soon as it is printed."""
    sys.stdout.write(text)
    sys.stdout.flush()


def silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
