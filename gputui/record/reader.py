"""Reading a recording: its frames indexed by time, any sample decoded on demand.

A damaged frame is read past: the samples up to the next intact key frame are left out, and the note
says how many and where; a damaged or cut-off end (a crash while writing) is left out with a note. A
file that is not a recording, or one from a newer gputui, is a UserError; a sample that a crafted file
makes undecodable (its CRC right, its content not) is a ValueError when it is asked for.
"""

from __future__ import annotations

import bisect
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui import units
from gputui.errors import UserError
from gputui.files import read_small
from gputui.model import LeakVerdict, Snapshot, from_jsonable
from gputui.model.codec import parse_json
from gputui.model.judgement import Judgements
from gputui.model.record import Record
from gputui.plain.document import read_judgements, read_snapshot_document
from gputui.record import delta
from gputui.record.format import (
    CHANGE,
    FILE_LIMIT,
    FRAME_LIMIT,
    HEAD,
    HEADER_LIMIT,
    KEY,
    KIND,
    LATEST_TIME,
    VERSION,
    Inflater,
)
from gputui.untrusted import visible

FIGURES = ("taken_at", "devices", "processes")


@dataclass(frozen=True, eq=False, repr=False)
class Sample(Record):
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

    @property
    def judgements(self) -> Judgements | None:
        """What the recording monitor judged of this sample; None in a recording made before samples
        carried their judgements. ValueError where the field is no judgements."""
        return read_judgements(self.document)


@dataclass(frozen=True, eq=False, repr=False)
class _Frame(Record):
    offset: int  # of the payload
    length: int
    key: bool
    taken_at: float


CUT_HEAD, CUT_LAST, DAMAGED = "cut off in a sample's head", "cut off in its last sample", "damaged"


class Recording:
    """A recording file, opened: ``header``, ``times`` (one per sample), ``note`` (what was left
    out, or ""), and ``sample(i)``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._data = read_small(path, FILE_LIMIT, "recording")
        self.header = _header(self._data, str(path))
        self.times: list[float] = []
        self._frames: list[_Frame] = []
        self._losses: list[tuple[int, int]] = []  # (samples read before, samples lost) for each damage
        self._end = ""  # why the end was left out, or ""
        self._index(self._data.index(b"\n") + 1)
        self._at: tuple[int, Inflater, Any, Any] | None = None  # the last decoded: index, stream, document, leaks
        if self._frames and not self._decodes(len(self._frames) - 1):
            # A frame whose payload does not decode is damage too: found now, not mid-replay.
            self._cut_at_damage()

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def interval(self) -> float:
        value = self.header.get("interval")
        # (a header may say Infinity: json reads it)
        return float(value) if isinstance(value, (int, float)) and 0 < value < math.inf else 1.0

    @property
    def note(self) -> str:
        """What was left out and where, or "" (made visible: it quotes the path)."""
        if not self._losses and not self._end:
            return ""
        parts = [f"damaged {self._where(before)}: {lost} sample{'s' if lost != 1 else ''} lost, read on from "
                 "the next key frame" for before, lost in self._losses]
        if self._end:
            parts.append(f"its end is {self._end}")
        read = "before it" if not self._losses else "left"
        return visible(f"{self.path}: {'; '.join(parts)}: the {len(self._frames)} samples {read} are read")

    def _where(self, before: int) -> str:
        if not before:
            return "at its start"
        return f"after sample {before} (at {units.elapsed(self.times[before - 1] - self.times[0])})"

    def _index(self, offset: int) -> None:
        """Index the frames from ``offset`` on; at a damaged frame, on from the next intact key frame."""
        while offset < len(self._data):
            found = self._frame_at(offset)
            if isinstance(found, _Frame) and (found.key or self._frames):
                self._frames.append(found)
                self.times.append(found.taken_at)
                offset = found.offset + found.length
                continue
            key, skipped = self._next_key(offset + 1)
            if key is None:  # no key frame after it: the end is lost
                self._end = found if isinstance(found, str) else DAMAGED
                return
            # The damaged frame, and the intact changes after it: each is a change from the one before.
            self._losses.append((len(self._frames), 1 + skipped))
            offset = key

    def _frame_at(self, offset: int) -> _Frame | str:
        """The intact frame whose head is at ``offset``, or why there is none."""
        data = self._data
        if len(data) - offset < HEAD.size:
            return CUT_HEAD
        kind, length, crc, taken_at = HEAD.unpack_from(data, offset)
        start = offset + HEAD.size
        # (not 0 <= nan: a time that is not a number is damage too)
        if kind not in (KEY, CHANGE) or length > FRAME_LIMIT or not 0 <= taken_at < LATEST_TIME:
            return DAMAGED
        if start + length > len(data):
            return CUT_LAST
        if zlib.crc32(data[start:start + length]) != crc:
            return DAMAGED
        return _Frame(start, length, kind == KEY, taken_at)

    def _next_key(self, offset: int) -> tuple[int | None, int]:
        """The offset of the first intact key frame at or after ``offset`` (None: there is none), and
        how many intact change frames came before it. A frame starts where a head checks out, its
        CRC included: a chance match in damaged bytes is one in four billion."""
        skipped = 0
        while (match := _KINDS.search(self._data, offset)) is not None:
            found = self._frame_at(match.start())
            if not isinstance(found, _Frame):
                offset = match.start() + 1
            elif found.key:
                return match.start(), skipped
            else:
                skipped += 1
                offset = found.offset + found.length
        return None, skipped

    def _cut_at_damage(self) -> None:
        """Keep the samples of the last stretch that decode (the CRCs vouch for those before it)."""
        key = max(j for j, frame in enumerate(self._frames) if frame.key)
        good = key
        while good < len(self._frames) and self._decodes(good):
            good += 1
        del self._frames[good:], self.times[good:]
        self._at = None
        self._end = DAMAGED

    def _decodes(self, i: int) -> bool:
        """Whether sample ``i`` decodes. (Not a try around the caller's work: the exception's frames would
        keep the half-decoded documents alive meanwhile.)"""
        try:
            self.sample(i)
        except ValueError:
            return False
        return True

    def sample(self, i: int) -> Sample:
        """The ``i``-th sample: the one after the last asked for decodes in one step, any other from
        the key frame before it. ValueError where the file holds something else than a sample there
        (its CRC is right, so it was written so: a crafted file)."""
        if not 0 <= i < len(self._frames):
            raise IndexError(i)
        at = self._at
        if at is None or at[0] > i or any(f.key for f in self._frames[at[0] + 1:i + 1]):
            at = self._key(max(j for j in range(i + 1) if self._frames[j].key))
        index, stream, document, leaks = at
        for j in range(index + 1, i + 1):
            body = self._body(stream, j)
            try:
                document = delta.patch(document, body.get("change"))
            except ValueError as exc:
                raise ValueError(f"sample {j} does not decode: {exc}") from None
            leaks = body.get("leaks", {})
        self._at = (i, stream, document, leaks)
        return Sample(document, leaks)

    def _key(self, i: int) -> tuple[int, Inflater, Any, Any]:
        stream = Inflater()
        body = self._body(stream, i)
        if not isinstance(body.get("document"), dict):
            raise ValueError(f"sample {i} does not decode: a key frame without a document")
        return i, stream, body["document"], body.get("leaks", {})

    def _body(self, stream: Inflater, i: int) -> dict[str, Any]:
        frame = self._frames[i]
        try:
            body = parse_json(stream.frame(self._data[frame.offset:frame.offset + frame.length]))
        except ValueError as exc:
            raise ValueError(f"sample {i} does not decode: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("leaks", {}), dict):
            raise ValueError(f"sample {i} does not decode: not a sample's object")
        return body

    def index_at(self, when: float) -> int:
        """The last sample taken at or before ``when`` (the first, before the recording began)."""
        return max(0, bisect.bisect_right(self.times, when) - 1)


_KINDS = re.compile(b"[" + KEY + CHANGE + b"]")  # where a frame's head may start


def _header(data: bytes, path: str) -> dict[str, Any]:
    end = data.find(b"\n", 0, HEADER_LIMIT)
    not_one = f"{path} is not a gputui recording (gputui record FILE writes one)"
    if end < 0:
        raise UserError(not_one)
    try:
        header = parse_json(data[:end])
    except ValueError:
        raise UserError(not_one) from None
    if not isinstance(header, dict) or header.get("schema") != KIND:
        raise UserError(not_one)
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path}: a recording without a valid version ({repr(version)[:40]})")
    if version > VERSION:
        raise UserError(f"{path} was written by gputui {str(header.get('gputui', '?'))[:40]} (recording version "
                        f"{version}); this one reads up to version {VERSION}: upgrade gputui here")
    return header
