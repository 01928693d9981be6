"""Reading a recording: its frames indexed by time, any sample decoded on demand.

A damaged or cut-off end (a crash while writing, a full disk) is left out with a note; a file that is
not a recording, or one from a newer gputui, is a UserError.
"""

from __future__ import annotations

import bisect
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.errors import UserError
from gputui.model import LeakVerdict, Snapshot, from_jsonable
from gputui.plain.document import read_snapshot_document
from gputui.record import delta
from gputui.record.format import HEAD, HEADER_LIMIT, KEY, KIND, VERSION, decompressor


FIGURES = ("taken_at", "devices", "processes")


@dataclass(frozen=True)
class Sample:
    """One recorded sample: the ``--json`` document as it was printed, and the leak verdicts."""

    document: dict[str, Any]
    leaks: dict[str, Any]

    @property
    def snapshot(self) -> Snapshot:
        return read_snapshot_document(self.document)

    @property
    def figures(self) -> Snapshot:
        """The snapshot's time, devices and processes only: what the monitor's history keeps. A
        seek reads the history's span of samples (600 at 1 s), four times as fast this way."""
        whole = self.document.get("snapshot") or {}
        return from_jsonable(Snapshot, {key: whole.get(key) for key in FIGURES if key in whole})

    @property
    def verdicts(self) -> dict[int, LeakVerdict]:
        return {int(pid): from_jsonable(LeakVerdict, v) for pid, v in self.leaks.items()}


@dataclass(frozen=True)
class _Frame:
    offset: int  # of the payload
    length: int
    key: bool


class Recording:
    """A recording file, opened: ``header``, ``times`` (one per sample), ``note`` (what was left
    out, or ""), and ``sample(i)``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._data = self.path.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
        self.header = _header(self._data, str(path))
        self.note = ""
        self.times: list[float] = []
        self._frames: list[_Frame] = []
        self._index(self._data.index(b"\n") + 1)
        self._at: tuple[int, Any, Any, Any] | None = None  # the last sample decoded: index, stream, document, leaks
        if self._frames:  # a frame whose payload does not decode is damage too: found now, not mid-replay
            try:
                self.sample(len(self._frames) - 1)
            except ValueError:
                self._cut_at_damage()

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def interval(self) -> float:
        value = self.header.get("interval")
        return float(value) if isinstance(value, (int, float)) and value > 0 else 1.0

    def _index(self, offset: int) -> None:
        data = self._data
        while offset < len(data):
            if len(data) - offset < HEAD.size:
                self._left_out("cut off in a sample's head")
                return
            kind, length, crc, taken_at = HEAD.unpack_from(data, offset)
            start = offset + HEAD.size
            if kind not in (KEY, b"C") or (not self._frames and kind != KEY):
                self._left_out("damaged")
                return
            if start + length > len(data):
                self._left_out("cut off in its last sample")
                return
            if zlib.crc32(data[start:start + length]) != crc:
                self._left_out("damaged")
                return
            self._frames.append(_Frame(start, length, kind == KEY))
            self.times.append(taken_at)
            offset = start + length

    def _left_out(self, why: str) -> None:
        self.note = f"{self.path}: its end is {why}: the {len(self._frames)} samples before it are read"

    def _cut_at_damage(self) -> None:
        """Keep the samples of the last stretch that decode (the CRCs vouch for those before it)."""
        key = max(j for j, frame in enumerate(self._frames) if frame.key)
        good = key
        for i in range(key, len(self._frames)):
            try:
                self.sample(i)
            except ValueError:
                break
            good = i + 1
        del self._frames[good:], self.times[good:]
        self._at = None
        self._left_out("damaged")

    def sample(self, i: int) -> Sample:
        """The ``i``-th sample: the one after the last asked for decodes in one step, any other from
        the key frame before it."""
        if not 0 <= i < len(self._frames):
            raise IndexError(i)
        at = self._at
        if at is None or at[0] > i or any(f.key for f in self._frames[at[0] + 1:i + 1]):
            at = self._key(max(j for j in range(i + 1) if self._frames[j].key))
        index, stream, document, leaks = at
        for j in range(index + 1, i + 1):
            body = self._body(stream, j)
            document, leaks = delta.patch(document, body.get("change")), body.get("leaks", {})
        self._at = (i, stream, document, leaks)
        return Sample(document, leaks)

    def _key(self, i: int) -> tuple[int, Any, Any, Any]:
        stream = decompressor()
        body = self._body(stream, i)
        return i, stream, body.get("document"), body.get("leaks", {})

    def _body(self, stream: Any, i: int) -> dict[str, Any]:
        frame = self._frames[i]
        try:
            text = stream.decompress(self._data[frame.offset:frame.offset + frame.length])
            body = json.loads(text)
        except (zlib.error, ValueError) as exc:
            raise ValueError(f"sample {i} does not decode: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError(f"sample {i} is not an object")
        return body

    def index_at(self, when: float) -> int:
        """The last sample taken at or before ``when`` (the first, before the recording began)."""
        return max(0, bisect.bisect_right(self.times, when) - 1)


def _header(data: bytes, path: str) -> dict[str, Any]:
    end = data.find(b"\n", 0, HEADER_LIMIT)
    not_one = f"{path} is not a gputui recording (gputui record FILE writes one)"
    if end < 0:
        raise UserError(not_one)
    try:
        header = json.loads(data[:end])
    except ValueError:
        raise UserError(not_one) from None
    if not isinstance(header, dict) or header.get("schema") != KIND:
        raise UserError(not_one)
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path}: a recording without a valid version ({version!r})")
    if version > VERSION:
        raise UserError(f"{path} was written by gputui {header.get('gputui', '?')} (recording version "
                        f"{version}); this one reads up to version {VERSION}: upgrade gputui here")
    return header
