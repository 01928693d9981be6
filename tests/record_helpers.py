"""Recordings made by hand, as someone who means harm would write them (tests of the reader), and
recordings of the demo made as ``gputui record`` makes them."""

from __future__ import annotations

import json
import zlib

from plain_data import judged_document
from ui_data import T0, training_snapshot

from gputui.cli import parse
from gputui.plain.document import dumps
from gputui.record import run
from gputui.record.format import CHANGE, HEAD, KEY, KIND, compressor


def crafted(path, *bodies, times=None):
    """A recording of hand-made frames: each body (JSON, bytes as they are, or a list of bytes) a frame, the first and
    each KEY_BODY a key frame, with right CRCs: what someone who means harm writes."""
    header = {"schema": KIND, "version": 1, "gputui": "x", "interval": 1.0, "host": "h"}
    out, stream = [json.dumps(header).encode() + b"\n"], compressor()
    for i, body in enumerate(bodies):
        key = i == 0 or body is KEY_BODY
        stream = compressor() if key else stream
        chunks = body if isinstance(body, list) else [body if isinstance(body, bytes) else json.dumps(body).encode()]
        payload = b"".join(stream.compress(chunk) for chunk in chunks) + stream.flush(zlib.Z_SYNC_FLUSH)
        taken_at = times[i] if times else T0 + i
        out.append(HEAD.pack(KEY if key else CHANGE, len(payload), zlib.crc32(payload), taken_at) + payload)
    path.write_bytes(b"".join(out))
    return path


DOCUMENT = json.loads(dumps(judged_document(training_snapshot())))
KEY_BODY = {"document": DOCUMENT, "leaks": {}}


def change(patch):
    return {"change": {"k": {"snapshot": {"k": patch}}}, "leaks": {}}


def recorded_demo(tmp_path, seconds=5, *, scenario="training-node", interval=1.0):
    """``gputui record`` of the demo ``scenario`` for ``seconds``, a sample every ``interval``, on a fake
    clock from T0 (the simulated machine's second 0 there: its reports' times and the samples' agree)."""
    now = [T0]

    def pause(s):
        now[0] += s

    path = tmp_path / "demo.rec"
    options = parse(["--demo", scenario, "record", str(path), "--duration", f"{seconds}s",
                     "--interval", str(interval)])
    assert run.record(options, clock=lambda: now[0], pause=pause, quiet=True) == 0
    return path
