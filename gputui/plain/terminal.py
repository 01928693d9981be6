"""What the plain modes need to know about stdout: colour or not, how wide, which characters, and
a closed pipe.

``gputui --json | head`` closes the pipe early; that is the reader's choice, not an error, so output
goes quietly to /dev/null from then on and the command exits 0. Any other failure to write (a full
disk) is an OutputError: a message and exit status 1.
"""

from __future__ import annotations

import locale
import os
import shutil
import sys
from collections.abc import Mapping
from typing import TextIO

from gputui.errors import UserError
from gputui.options import Options
from gputui.plain.render import MIN_WIDTH

# Into a file or a pipe nothing is cut: grep and less get whole command lines and messages.
PIPE_WIDTH = 100_000
# Characters the text output uses besides ASCII; an encoding that cannot carry them gets ASCII.
FANCY = "█░…°"
LOCALE_VARIABLES = ("LC_ALL", "LC_CTYPE", "LANG")  # the first one set is the character set's locale


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
    """ASCII when asked, when the locale says the terminal cannot show Unicode (LANG=C, latin-1), or
    when the output's encoding (PYTHONIOENCODING) cannot carry FANCY. For --once and the monitor alike."""
    if options.ascii or locale_is_ascii(locale_environ()):
        return True
    encoding = getattr(stream or sys.stdout, "encoding", None) or "ascii"
    try:
        FANCY.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def locale_is_ascii(environ: Mapping[str, str]) -> bool:
    """Whether the locale in ``environ`` leaves the terminal without Unicode, read as terminals and
    curses read it: the first of LC_ALL, LC_CTYPE and LANG that is set, when it is C or POSIX or
    names a codeset other than UTF-8 (en_US is ISO-8859-1). None set says nothing: Unicode."""
    value = next((environ[name] for name in LOCALE_VARIABLES if environ.get(name)), None)
    if value is None:
        return False
    name = locale.normalize(value)  # en_US.utf8 -> en_US.UTF-8, en_US -> en_US.ISO8859-1
    if name in ("C", "POSIX"):
        return True
    codeset = name.partition(".")[2].partition("@")[0] if "." in name else name  # LC_CTYPE=UTF-8 (macOS)
    return codeset.replace("-", "").lower() != "utf8"


def locale_environ() -> Mapping[str, str]:
    """The environment gputui was started with, for its locale: Python sets LC_CTYPE=C.UTF-8 in
    os.environ when it starts in the C locale (PEP 538) and writes UTF-8 regardless (PEP 540), so
    only what the kernel kept of the start (/proc/self/environ) still says LANG=C."""
    try:
        with open("/proc/self/environ", "rb") as start:
            pairs = [entry.partition(b"=") for entry in start.read().split(b"\0") if entry]
    except OSError:
        return os.environ
    return {os.fsdecode(key): os.fsdecode(value) for key, _, value in pairs}


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
