"""What the plain modes need to know about stdout: colour or not, how wide, which characters, and
a closed pipe.

``gputui --json | head`` closes the pipe early; that is the reader's choice, not an error, so output
goes quietly to /dev/null from then on and the command exits 0. Any other failure to write (a full
disk) is an OutputError: a message and exit status 1.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

from gputui.errors import UserError
from gputui.plain.render import MIN_WIDTH
from gputui.options import Options

# Into a file or a pipe nothing is cut: grep and less get whole command lines and messages.
PIPE_WIDTH = 100_000
# Characters the text output uses besides ASCII; an encoding that cannot carry them gets ASCII.
FANCY = "█░…°"


class OutputError(UserError):
    """Standard output cannot be written (a full disk, a closed descriptor)."""

    exit_code = 1


def use_color(options: Options, stream: TextIO | None = None) -> bool:
    """Colour when asked, or by default when writing to a terminal that wants it."""
    if options.color is not None:
        return options.color
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def width(stream: TextIO | None = None) -> int:
    """$COLUMNS, or the terminal's columns, at least MIN_WIDTH; PIPE_WIDTH when not a terminal."""
    if not os.environ.get("COLUMNS") and not _isatty(stream or sys.stdout):
        return PIPE_WIDTH
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def use_ascii(options: Options, stream: TextIO | None = None) -> bool:
    """ASCII when asked, or when the output's encoding (LANG=C, latin-1) cannot carry FANCY."""
    if options.ascii:
        return True
    encoding = getattr(stream or sys.stdout, "encoding", None) or "ascii"
    try:
        FANCY.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def is_terminal(stream: TextIO | None = None) -> bool:
    return _isatty(stream or sys.stdout)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def emit(text: str) -> None:
    """Write and flush, so a watcher's log sees each snapshot as soon as it is printed.

    Raises BrokenPipeError for a reader that went away, OutputError for any other failure.
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        silence_stdout()  # the flush at exit would fail again, with a traceback
        raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None


def show(text: str) -> int:
    """Print a command's whole output; a reader that went away (`| head`) ends it quietly. Exit code 0."""
    try:
        emit(text)
    except BrokenPipeError:
        silence_stdout()
    return 0


def silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
