"""The recording file: one line of JSON (the header), then frames, each one sample.

A frame is a fixed head (kind, length, CRC-32 of the payload, the sample's time) and its payload: the
sample as a line of JSON, compressed. Samples share one deflate stream, flushed at the end of each
frame (Z_SYNC_FLUSH: byte-aligned, and the stream's window still remembers the samples before), so a
crash cuts the file at a frame's end or inside the last frame, which the reader leaves out. Every
KEY_EVERY samples a key frame starts a new stream and holds the whole document; the others hold
their change from the sample before (record/delta.py). Seeking decodes from the key frame before,
and a reader that meets a damaged frame reads on from the next key frame.

A recording may come from anyone, so the reader bounds what it decodes: a frame's length, what one
frame inflates to (its document or change), and what a stream inflates to from its key frame on, in
bytes and in JSON values (a document is built only from that, so this bounds the document as well).
"""

from __future__ import annotations

import struct
import zlib

KIND = "gputui.recording"
VERSION = 1

KEY, CHANGE = b"K", b"C"
HEAD = struct.Struct("<cIId")  # kind, payload length, CRC-32 of the payload, taken_at
KEY_EVERY = 300  # samples between key frames: 5 minutes at 1 s, at most 300 patches to seek through
HEADER_LIMIT = 64 * 1024  # a first line longer than this is not a recording's header

# What a reader takes. A busy 8-GPU node's sample is 30-150 KB of JSON and its change ~6-30 KB, so a
# stream from one key frame to the next inflates to 2-10 MB: these leave room for far bigger boxes.
FILE_LIMIT = 2 << 30  # bytes of a recording file (the recorder rotates at 200 MB unless told otherwise)
FRAME_LIMIT = 16 << 20  # bytes of one frame's payload, compressed
SAMPLE_LIMIT = 16 << 20  # bytes one frame inflates to
STREAM_LIMIT = 64 << 20  # bytes a stream inflates to, its key frame and the changes after it together
# JSON values in a stream, the same way. Memory goes by values more than by bytes: "[]," is 3 bytes and a
# 64-byte list, so 64 MiB of it is 1.5 GB. A busy node's stream holds ~300k values (a document ~3k, a
# change ~1k); 4M values are at most ~300-400 MB of Python objects.
VALUE_LIMIT = 4 << 20
LATEST_TIME = 1e11  # a frame's time (epoch seconds) is at or after 1970 and before this (year 5138)


def compressor() -> zlib._Compress:
    return zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the frame head carries the CRC


class Inflater:
    """One stream of a recording, inflated a frame at a time within SAMPLE_LIMIT and STREAM_LIMIT."""

    def __init__(self) -> None:
        self._stream = zlib.decompressobj(-15)
        self.inflated = 0  # bytes so far, over every frame of the stream
        self.values = 0  # JSON values so far, at most (see _values)

    def frame(self, payload: bytes) -> bytes:
        """The frame's payload inflated; ValueError where it is not deflate or inflates past a bound."""
        try:
            # max_length stops a deflate bomb after one byte more than we take, not after gigabytes
            text = self._stream.decompress(payload, SAMPLE_LIMIT + 1)
        except zlib.error as exc:
            raise ValueError(str(exc)) from None
        if len(text) > SAMPLE_LIMIT:
            raise ValueError(f"it inflates past {SAMPLE_LIMIT >> 20} MiB")
        self.inflated += len(text)
        if self.inflated > STREAM_LIMIT:
            raise ValueError(f"its stream inflates past {STREAM_LIMIT >> 20} MiB since its key frame")
        self.values += _values(text)
        if self.values > VALUE_LIMIT:
            raise ValueError(f"its stream holds over {VALUE_LIMIT} JSON values since its key frame")
        return text


def _values(text: bytes) -> int:
    """At least the number of JSON values and keys in ``text``, counted before it is parsed: each but the
    first follows a comma, a colon or the opening bracket of a container that is not empty (marks
    inside strings, or spaces inside an empty container, only add to the count)."""
    marks = sum(text.count(mark) for mark in (b",", b":", b"[", b"{"))
    return marks - text.count(b"[]") - text.count(b"{}") + 1
