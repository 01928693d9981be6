"""The recording file: one line of JSON (the header), then frames, each one sample.

A frame is a fixed head (kind, length, CRC-32 of the payload, the sample's time) and its payload: the
sample as a line of JSON, compressed. Samples share one deflate stream, flushed at the end of each
frame (Z_SYNC_FLUSH: byte-aligned, and the stream's window still remembers the samples before), so a
crash cuts the file at a frame's end or inside the last frame, which the reader leaves out. Every
KEY_EVERY samples a key frame starts a new stream and holds the whole document; the others hold
their change from the sample before (record/delta.py). Seeking decodes from the key frame before.
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


def compressor() -> zlib._Compress:
    return zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the frame head carries the CRC


def decompressor() -> zlib._Decompress:
    return zlib.decompressobj(-15)
