"""Writing a recording: frames appended to one file, rotated when it reaches its size bound.

Recordings hold every user's command lines, and ``gputui record`` may run as root in a shared
directory, so a recording is created anew (never through a name someone else planted: a symbolic
link, or a file of theirs) and readable by its owner only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any

from gputui import __version__
from gputui.errors import UserError
from gputui.files import check_private, check_regular
from gputui.plain.document import dumps
from gputui.record import delta
from gputui.record.format import CHANGE, HEAD, KEY, KEY_EVERY, KIND, VERSION, compressor
from gputui.untrusted import visible

KEEP = 3  # rotated files kept: FILE.1 (the newest) to FILE.3
WHAT = "recording"
FULL = (errno.ENOSPC, errno.EDQUOT)


class Recorder:
    """Appends samples (a snapshot document and the leak verdicts) to ``path``.

    A file already there is rotated out first, never appended to or overwritten; at ``max_size``
    bytes the file is rotated too (FILE -> FILE.1 -> ... FILE.KEEP) and a new one begun. A write that
    fails (a full disk) cuts the file back to its last whole sample and raises a UserError.
    """

    def __init__(self, path: str | Path, *, interval: float, host: str, max_size: int | None = None,
                 key_every: int = KEY_EVERY) -> None:
        self.path = Path(path)
        self.key_every = key_every
        self.interval = interval
        self.host = host
        self.max_size = max_size
        self._fd: int | None = None
        self._start()

    def _start(self) -> None:
        rotate(self.path)
        self._fd = create(self.path)
        self._size = 0
        self._count = 0
        self._previous: dict[str, Any] | None = None
        self._stream = compressor()
        header = {"schema": KIND, "version": VERSION, "gputui": __version__, "interval": self.interval,
                  "host": self.host}
        self._write(json.dumps(header).encode() + b"\n")

    def add(self, taken_at: float, document: dict[str, Any], leaks: dict[str, Any]) -> None:
        """One sample; it is on disk (in the kernel's hands) when this returns."""
        if self.max_size is not None and self._count and self._size >= self.max_size:
            self.close()
            self._start()
        key = self._count % self.key_every == 0
        if key:
            self._stream = compressor()
            body = {"document": document, "leaks": leaks}
        else:
            body = {"change": delta.diff(self._previous, document), "leaks": leaks}
        payload = self._stream.compress(dumps(body).encode() + b"\n") + self._stream.flush(zlib.Z_SYNC_FLUSH)
        self._write(HEAD.pack(KEY if key else CHANGE, len(payload), zlib.crc32(payload), taken_at) + payload)
        self._count += 1
        # dumps turns NaN into null: the next change is taken from what the reader will see
        self._previous = json.loads(dumps(document))

    def _write(self, data: bytes) -> None:
        """All of ``data`` at the file's end; where the disk refuses, the file is cut back to its last
        whole sample (so it reads back without a note) and the recording stops with a UserError."""
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:  # a write to a nearly full disk may take only part and refuse the rest
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            with contextlib.suppress(OSError):  # a cut that fails leaves a cut-off end, which reads too
                os.ftruncate(self._fd, self._size)
                if not self._count:  # a file without a sample is no recording: it would only confuse
                    os.unlink(self.path)
            self.close()
            raise UserError(self._failed(exc)) from None
        self._size += len(data)

    def _failed(self, exc: OSError) -> str:
        shown = visible(str(self.path))
        why = "the disk is full" if exc.errno in FULL else "it cannot be written"
        kept = f"the {self._count} sample{'s' if self._count != 1 else ''} before kept in it" if self._count \
            else "nothing recorded in it"
        return f"{shown}: {why} ({visible(exc.strerror or str(exc))}): recording stopped, {kept}"

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def create(path: Path) -> int:
    """A new file at ``path``, 0600, opened for writing; never one already there (O_EXCL), and never
    through a symbolic link (O_NOFOLLOW: a dangling link would have root create its target)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        raise UserError(f"{visible(str(path))} appeared as it was moved aside (another gputui record "
                        "on the same FILE?): not recorded") from None
    except OSError as exc:
        raise UserError(f"cannot create {visible(str(path))}: {visible(exc.strerror or str(exc))}") from None


def rotate(path: Path) -> None:
    """FILE -> FILE.1, FILE.1 -> FILE.2 ...; the oldest beyond KEEP goes. Every name is checked
    first: a symbolic link, a file that is not regular or not yours is refused, nothing moved."""
    names = [path] + [path.with_name(f"{path.name}.{n}") for n in range(1, KEEP + 1)]
    there = [name for name in names if _present(name)]
    # (a rename moves a name, never what a link points at: a link planted after the check moves harmlessly)
    moves = [(names[n], names[n + 1]) for n in range(KEEP - 1, -1, -1) if names[n] in there]
    for old, new in moves:
        try:
            os.replace(old, new)
        except OSError as exc:
            raise UserError(f"cannot move {visible(str(old))} aside: {visible(exc.strerror or str(exc))}") from None


def _present(name: Path) -> bool:
    """Whether ``name`` is there, a recording of yours that may be moved; UserError where it is not."""
    shown = visible(str(name))
    try:
        info = os.lstat(name)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UserError(f"cannot record to {shown}: {visible(exc.strerror or str(exc))}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{shown} is a symbolic link: gputui record neither follows nor moves one; "
                        "give another FILE")
    check_regular(info, name, WHAT)
    check_private(info, name, WHAT)
    return True
