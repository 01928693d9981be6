"""Hostile strings, as another user on a shared box would plant them, and the checks that none of
them reaches a terminal raw.

``python tests/hostile.py`` serves a fake probe: any user can bind a socket in their own runtime
directory and answer with whatever report they like. Started with a hostile argv[0], its /proc
command line is hostile too. ``python tests/hostile.py nested`` answers every op with JSON nested
far deeper than a parser's recursion allows.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time

# Retitle the terminal, clear it, write the clipboard (OSC 52), forge a line, CSI in its 8-bit form,
# reverse the text after it (bidi override), and a byte that is not UTF-8.
ATTACK = ("evil\x1b]0;PWNED\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07\r\nFORGED\x9b31m\u202eesrever"
          "\udcff\x00end")
# The same, as every text mode must show it.
SHOWN = ("evil\\x1b]0;PWNED\\x07\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07\\r\\nFORGED\\x9b31m\\u202eesrever"
         "\\xff\\x00end")

# Fields whose strings come from outside: command lines, names, users, what a probe says.
OUTSIDE_FIELDS = {"command", "name", "user", "hostname", "torch_version", "problems", "message",
                  "where", "stack", "settings", "note"}


def poison(value, fields=OUTSIDE_FIELDS):
    """``value`` (model dataclasses, nested) with ATTACK appended to each outside string."""
    if isinstance(value, tuple):
        return tuple(poison(item, fields) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            if f.name in fields and isinstance(old, str):
                changes[f.name] = old + ATTACK
            elif f.name in fields and isinstance(old, tuple) and all(isinstance(s, str) for s in old):
                changes[f.name] = tuple(s + ATTACK for s in old) or (ATTACK,)
            elif isinstance(old, tuple) or dataclasses.is_dataclass(old):
                changes[f.name] = poison(old, fields)
        return dataclasses.replace(value, **changes)
    return value


# Escape sequences a text mode may write itself: colour (SGR) only.
_OWN_ESCAPE = re.compile(rb"\x1b\[[0-9;]*m")
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]")


def assert_plain_output_safe(out: bytes) -> None:
    """Text-mode output: no control byte but newlines and our own colour codes, and the attack
    shown in its escaped form (so the test saw it go through)."""
    bare = _OWN_ESCAPE.sub(b"", out)
    found = _CONTROL.search(bare)
    assert found is None, (
        f"control byte {found.group()!r} in output near {bare[max(0, found.start() - 40):found.end() + 40]!r}")
    assert not re.search(rb"(^|\n)FORGED", bare), "a forged line"
    assert SHOWN.encode() in bare, "the hostile string is not shown"


def assert_terminal_output_safe(out: bytes) -> None:
    """A full-screen app's output: it writes its own escapes (OSC 22 ends in BEL), none of the attack's."""
    for raw in (b"\x1b]0;PWNED", b"\x1b]52;", b"cHduZWQ=\x07", b"\xc2\x9b", "\u202e".encode(), b"\x00",
                b"\rFORGED", b"\nFORGED", b"\xff"):
        at = out.find(raw)
        assert at < 0, f"{raw!r} reached the terminal: {out[max(0, at - 80):at + 40]!r}"
    assert b"\\x1b]0;PWNED" in out, "the hostile string is not shown"


def hostile_report(pid: int):
    """A leaky simulated job's probe report with every outside string poisoned, as pid ``pid``."""
    from gputui.collect.collector import open_collector

    with open_collector("leaky", clock=lambda: time.time()) as collector:
        collector.sample()
        report = collector.probe_reports()[0]
    return poison(dataclasses.replace(report, pid=pid))


# A reply's result nested this deep: json.loads raises RecursionError at about a thousand levels.
NESTING = 100_000


def serve(nested: bool = False) -> None:
    """Serve hostile reports (or, ``nested``, deeply nested JSON) on this process's probe socket
    until killed."""
    from gputui.link.protocol import RawJSON
    from gputui.link.server import ProbeServer
    from gputui.model import to_jsonable

    if nested:
        deep = RawJSON(b"[" * NESTING + b"]" * NESTING)
        handlers = {op: (lambda params: deep) for op in ("hello", "report", "record_sites")}
    else:
        report = to_jsonable(hostile_report(os.getpid()))
        handlers = {
            "hello": lambda params: {"probe_version": 1, "torch_version": ATTACK, "steps": 1},
            "report": lambda params: {**report, "taken_at": time.time()},
            "record_sites": lambda params: {"recording": ATTACK, "steps": ATTACK, "starts_at_step": ATTACK},
        }
    server = ProbeServer(handlers)
    if not server.start():
        print(f"cannot serve: {server.error}", flush=True)
        sys.exit(1)
    print("ready", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    serve(nested=sys.argv[1:] == ["nested"])
