"""Strings from outside, made safe to show on a terminal.

Command lines and user names come from other users' processes, device names from the driver, and
every string in a probe report from a socket that anyone may serve in their own runtime directory.
Written raw, an escape sequence in any of them would retitle the terminal, clear it, write the
clipboard (OSC 52) or forge lines, in a monitor that root runs on shared boxes. So every text output
(the live monitor, --once, `gputui probe`, error messages) shows them through ``visible``, which
writes each control character as a Python-style escape, and a backslash as ``\\\\``, so that an escape
shown is never the same as text that was sent literally. ``visible`` is applied once, to the string
as it came; ``harmless`` is the last guard over whole lines that may hold parts already made visible.
``--json`` needs none of this: JSON escapes control characters itself, and scripts get the strings as
they were. Their length is another matter: ``bounded`` cuts a string a process set itself (an
environment value, a name in its runtime's state) once, where the collector takes it in, so that no
output (terminal, JSON, metric labels) carries 128 KiB of it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

# What a terminal may act on or hide rather than print: C0 and C1 controls and DEL (ESC, CSI 0x9b, BEL,
# CR, LF, TAB), Unicode format characters (bidi overrides and isolates, zero-width characters, tags),
# the line and paragraph separators, and lone surrogates (bytes that were not UTF-8, decoded with
# surrogateescape, which would make the write itself fail).
_UNSAFE_CHARS = (
    "\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE = re.compile(f"[{_UNSAFE_CHARS}]")
# visible() also writes a backslash as two: otherwise a literal "\\x1b" sent by another user would show
# the same as an escaped ESC.
_ESCAPED = re.compile(f"[{_UNSAFE_CHARS}\\\\]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8: show the byte
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


TEXT_LIMIT = 256  # characters kept of one name or value a process set: longer than any real pod, unit or job id


def bounded(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` cut to its first ``limit`` characters, the cut marked with how much went
    (``"4444...(cut 130744 characters)"``); the same object when it is short enough."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(cut {len(text) - limit} characters)"


MARK_ROOM = len("...(cut  characters)") + 20  # the most a cut's mark adds (a count of up to 20 digits)
# A command line as /proc has it: longer than any a person types or a launcher writes (a torchrun rank's is
# a few hundred characters), short of what a process may set itself (argv of 128 KiB and more).
COMMAND_LIMIT = 4096


def bounded_command(arguments: Iterable[str], limit: int = COMMAND_LIMIT) -> tuple[str, ...]:
    """A command line's arguments, ``limit`` characters of them in all: the argument that crosses it cut
    (``bounded``), and those after it said in one last argument (``"...(3 more arguments)"``); the same
    arguments when they fit."""
    arguments = tuple(arguments)
    kept: list[str] = []
    left = limit
    for index, argument in enumerate(arguments):
        if len(argument) > left:
            kept.append(bounded(argument, left))
            if index + 1 < len(arguments):
                kept.append(f"...({len(arguments) - index - 1} more arguments)")
            return tuple(kept)
        kept.append(argument)
        left -= len(argument)
    return arguments


def within(text: str, most: int) -> str:
    """``text`` in at most ``most`` characters, its mark included where it is cut (an environment value, an
    HTTP header: places with a hard size limit)."""
    return text if len(text) <= most else bounded(text, max(0, most - MARK_ROOM))


def visible(text: str) -> str:
    """``text`` as it came from outside, with every control or invisible formatting character written
    as an escape (``\\x1b``, ``\\n``, ``\\u202e``) and each backslash doubled; the same object when
    there is nothing to escape. Not for text that holds parts made visible already: see ``harmless``."""
    if not _ESCAPED.search(text):
        return text
    return _ESCAPED.sub(_escape, text)


def harmless(text: str) -> str:
    """``text`` with control and formatting characters escaped as ``visible`` does, backslashes left
    as they are: the last guard on a whole line (an error message, a rendered piece) that may quote
    parts made visible already, which a second ``visible`` would escape again. It leaves anything
    ``visible`` returned unchanged; the same object when there is nothing to escape."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, text)


def visible_all(value: T) -> T:
    """A copy of ``value`` (frozen dataclasses, tuples, lists and dicts, nested) with ``visible``
    applied to every string in it; parts with nothing to change are shared, not copied."""
    return _walk(value)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return value if not _ESCAPED.search(value) else _ESCAPED.sub(_escape, value)
    if kind in (int, float, bool) or value is None:
        return value
    if isinstance(value, tuple):
        try:  # the common case, a command line: all strings and nothing to escape, one search
            if not _ESCAPED.search("".join(value)):
                return value
        except TypeError:
            pass
        items = [_walk(item) for item in value]
        if all(new is old for new, old in zip(items, value)):
            return value
        return kind(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_walk(item) for item in value]
    if isinstance(value, dict):
        return {_walk(key): _walk(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = _text_fields(kind)
        changes = {}
        for name in names:
            old = getattr(value, name)
            new = _walk(old)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


def _text_fields(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` that may hold a string (numbers are skipped: a snapshot of
    a thousand processes is walked every refresh)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation we cannot resolve: walk that field too
        hints = {}
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.init and _may_hold_text(hints.get(f.name, object)))


def _may_hold_text(hint: Any) -> bool:
    if hint in (int, float, bool, type(None)):
        return False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_may_hold_text(arg) for arg in typing.get_args(hint))
    return True
