"""The probe wire format: one JSON object per line, versioned, size-bounded, plain data only.

A request is ``{"v": 1, "id": n, "op": "report", "params": {...}}``; a reply is
``{"v": 1, "id": n, "ok": true, "result": ...}`` or ``{"v": 1, "id": n, "ok": false, "error": "...",
"code": "..."}``. Nothing on the wire is ever executed or unpickled: ops name read-only handlers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gputui.model.codec import dump_json, parse_json
from gputui.model.record import Record

VERSION = 1
MAX_REQUEST = 1 << 20  # bytes in one request line, enforced by the probe
MAX_REPLY = 64 << 20  # bytes in one reply line, enforced by the monitor (reports with many sites)
# The probe hangs up on a connection idle this long (seconds); a monitor that polls less often opens a
# new one instead of writing into a closed one.
IDLE_TIMEOUT = 60.0
# A report whose figures are older than this (seconds) leaves a request that the job's training thread
# takes up at its next step or forward pass: the probe's desk asks, a one-shot client asks again.
FRESH_FOR = 1.0

# Error codes in failed replies, so the monitor can tell the user what went wrong.
BAD_JSON = "bad_json"
TOO_LARGE = "too_large"
BAD_REQUEST = "bad_request"
WRONG_VERSION = "wrong_version"
UNKNOWN_OP = "unknown_op"
HANDLER_FAILED = "handler_failed"
REFUSED = "refused"
BUSY = "busy"


class ProtocolError(ValueError):
    """A line that is not a valid message; ``code`` is one of the error codes above."""

    def __init__(self, message: str, code: str = BAD_REQUEST, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.request_id = request_id


@dataclass(frozen=True, eq=False, repr=False)
class Request(Record):
    """One decoded request."""

    id: int | str | None
    op: str
    params: dict = field(default_factory=dict)


class RawJSON(bytes):
    """A result already encoded as JSON (by :func:`dumps`), spliced into the reply as it is.

    Lets a handler keep the encoded form of parts that do not change between requests (a probe's
    step records) instead of encoding them again for every reply.
    """


def dumps(value: Any) -> bytes:
    """Compact JSON as bytes for the socket; NaN and infinities become null (model.codec.dump_json)."""
    return dump_json(value).encode()


def encode(message: dict) -> bytes:
    """One message as a JSON line."""
    return dumps(message) + b"\n"


def request_line(request_id: int | str, op: str, params: dict | None = None) -> bytes:
    """The bytes a client sends for one request."""
    return encode({"v": VERSION, "id": request_id, "op": op, "params": params or {}})


def ok_reply(request_id: Any, result: Any) -> bytes:
    if isinstance(result, RawJSON):
        head = dumps({"v": VERSION, "id": request_id, "ok": True})
        return head[:-1] + b',"result":' + result + b"}\n"
    return encode({"v": VERSION, "id": request_id, "ok": True, "result": result})


def error_reply(request_id: Any, code: str, error: str) -> bytes:
    return encode({"v": VERSION, "id": request_id, "ok": False, "code": code, "error": error})


def parse_object(line: bytes, limit: int) -> dict:
    """A line (without its newline) as a JSON object, or ProtocolError."""
    if len(line) > limit:
        raise ProtocolError(f"message of {len(line)} bytes exceeds the {limit}-byte limit", TOO_LARGE)
    try:
        # parse_json, not json.loads: deep nesting from a hostile peer is a ValueError like any
        # bad line, never a RecursionError that escapes the callers' handling as a traceback.
        message = parse_json(line)
    except ValueError as exc:
        raise ProtocolError(f"not valid JSON: {exc}", BAD_JSON) from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}", BAD_REQUEST)
    return message


def decode_request(line: bytes) -> Request:
    """Check one request line's shape and version; ProtocolError says what is wrong."""
    message = parse_object(line, MAX_REQUEST)
    request_id = message.get("id")
    if not (request_id is None or isinstance(request_id, str) or _is_int(request_id)):
        raise ProtocolError("'id' must be an integer or a string", BAD_REQUEST)
    version = message.get("v")
    if not is_version(version):
        import json

        raise ProtocolError(
            f"protocol version {json.dumps(version)} is not supported; this probe speaks version "
            f"{VERSION}",
            WRONG_VERSION, request_id,
        )
    op = message.get("op")
    if not isinstance(op, str) or not op:
        raise ProtocolError("'op' must be a non-empty string", BAD_REQUEST, request_id)
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError("'params' must be a JSON object", BAD_REQUEST, request_id)
    return Request(request_id, op, params)


def is_version(value: Any) -> bool:
    """True for our protocol version (and not for ``true``, which Python calls equal to 1)."""
    return _is_int(value) and value == VERSION


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

