"""Writing a recording: frames appended to one file, rotated when it reaches its size bound."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from gputui import __version__
from gputui.plain.document import dumps
from gputui.record import delta
from gputui.record.format import CHANGE, HEAD, KEY, KEY_EVERY, KIND, VERSION, compressor

KEEP = 3  # rotated files kept: FILE.1 (the newest) to FILE.3


class Recorder:
    """Appends samples (a snapshot document and the leak verdicts) to ``path``.

    A file already there is rotated out first, never appended to or overwritten; at ``max_size``
    bytes the file is rotated too (FILE -> FILE.1 -> ... FILE.KEEP) and a new one begun.
    """

    def __init__(self, path: str | Path, *, interval: float, host: str, max_size: int | None = None,
                 key_every: int = KEY_EVERY) -> None:
        self.path = Path(path)
        self.key_every = key_every
        self.interval = interval
        self.host = host
        self.max_size = max_size
        self._file: Any = None
        self._start()

    def _start(self) -> None:
        if self.path.exists():
            rotate(self.path)
        self._file = open(self.path, "wb")  # noqa: SIM115 - kept open across samples, closed in close()
        header = {"schema": KIND, "version": VERSION, "gputui": __version__, "interval": self.interval,
                  "host": self.host}
        self._file.write(json.dumps(header).encode() + b"\n")
        self._file.flush()
        self._size = self._file.tell()
        self._count = 0
        self._previous: dict[str, Any] | None = None
        self._stream = compressor()

    def add(self, taken_at: float, document: dict[str, Any], leaks: dict[str, Any]) -> None:
        """One sample; it is on disk (in the kernel's hands) when this returns."""
        if self.max_size is not None and self._count and self._size >= self.max_size:
            self._file.close()
            self._start()
        key = self._count % self.key_every == 0
        if key:
            self._stream = compressor()
            body = {"document": document, "leaks": leaks}
        else:
            body = {"change": delta.diff(self._previous, document), "leaks": leaks}
        payload = self._stream.compress(dumps(body).encode() + b"\n") + self._stream.flush(zlib.Z_SYNC_FLUSH)
        frame = HEAD.pack(KEY if key else CHANGE, len(payload), zlib.crc32(payload), taken_at) + payload
        self._file.write(frame)
        self._file.flush()
        self._size += len(frame)
        self._count += 1
        # dumps turns NaN into null: the next change is taken from what the reader will see
        self._previous = json.loads(dumps(document))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def rotate(path: Path) -> None:
    """FILE -> FILE.1, FILE.1 -> FILE.2 ...; the oldest beyond KEEP goes."""
    for n in range(KEEP - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
    os.replace(path, path.with_name(f"{path.name}.1"))
