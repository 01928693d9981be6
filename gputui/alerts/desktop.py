"""A desktop notification through the terminal's own escape sequence: it works over SSH, since the
terminal on the user's desk shows it. OSC 777 (rxvt, foot, VTE terminals, WezTerm, Ghostty) or OSC 9
(iTerm2, Windows Terminal); inside tmux, wrapped for its passthrough when asked (tmux must also allow it:
``set -g allow-passthrough on``), since tmux hides which terminal is outside it.
"""

from __future__ import annotations

from collections.abc import Mapping

OSC_777_PROGRAMS = ("WezTerm", "ghostty")
OSC_9_PROGRAMS = ("iTerm.app", "WindowsTerminal")


def flavour(environ: Mapping[str, str]) -> str | None:
    """"777", "9", or None where the terminal (as its environment says) shows neither."""
    program = environ.get("TERM_PROGRAM", "")
    if program in OSC_9_PROGRAMS or environ.get("WT_SESSION"):
        return "9"
    term = environ.get("TERM", "")
    if program in OSC_777_PROGRAMS or environ.get("VTE_VERSION") or term.startswith(("rxvt", "foot")):
        return "777"
    return None


def sequence(title: str, body: str, environ: Mapping[str, str], *, setting: str = "auto",
             tmux_passthrough: bool = False) -> str | None:
    """The escape sequence that shows ``title`` and ``body`` on the desktop, or None where none should be
    sent. ``setting``: "auto" (only where the terminal is known to show one), "on" (OSC 777 when unknown),
    "off"."""
    if setting == "off":
        return None
    in_tmux = bool(environ.get("TMUX"))
    if in_tmux and not tmux_passthrough:
        return None  # tmux would swallow it (or show it as garbage in older versions)
    kind = flavour(environ) if not in_tmux else None
    if kind is None:
        if setting != "on" and not in_tmux:
            return None
        kind = "777"  # asked for, or through tmux, where the outer terminal cannot be known: the common one
    title, body = _clean(title), _clean(body)
    osc = f"\x1b]9;{title}: {body}\x07" if kind == "9" else f"\x1b]777;notify;{title};{body}\x07"
    if in_tmux:
        return "\x1bPtmux;" + osc.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return osc


def _clean(text: str) -> str:
    """Text that cannot end or split the sequence: no control characters, no ``;`` (OSC 777's separator)."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 or 0x80 <= ord(c) < 0xA0 else c for c in text).replace(";", ",")
