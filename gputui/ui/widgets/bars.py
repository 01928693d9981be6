"""Coloured bars and labelled values as styled words: tuples of (text, style) pieces that
``StyledLines`` draws in styles it resolves once, coloured by level from the theme's variables.

The colour names are theme variables ($success, $warning, $error), so light/dark themes and NO_COLOR
apply without a hex literal in the code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard, cast

from gputui import units
from gputui.analysis import vocabulary as vocab

LEVEL_STYLES = {"low": "$success", "mid": "$warning", "high": "$error", "none": "$text-muted"}

Piece = tuple[str, str]  # text and its style in Textual's words ("" for plain)
Words = tuple[Piece, ...]
Part = str | Piece | Words  # what assemble() and join() take


def styled(text: str, style: str = "") -> Words:
    return ((text, style),) if text else ()


def assemble(*parts: Part) -> Words:
    """Words from strings, (text, style) pairs and other Words, in order."""
    pieces: list[Piece] = []
    for part in parts:
        if isinstance(part, str):
            pieces.extend(styled(part))
        elif _is_piece(part):
            pieces.extend(styled(*part))
        else:
            pieces.extend(cast(Words, part))  # (a tuple that is no (text, style) pair: words)
    return merged(pieces)


def _is_piece(part: Piece | Words) -> TypeGuard[Piece]:
    return bool(part) and isinstance(part[0], str)


def merged(pieces: Iterable[Piece]) -> Words:
    """Neighbouring pieces of one style as one: drawn as one segment, as Textual's Content does."""
    out: list[Piece] = []
    for text, style in pieces:
        if not text:
            continue
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return tuple(out)


def plain(words: Words) -> str:
    return "".join(text for text, _ in words)


def meter(value: float | None, width: int, *, ascii: bool = False,
          thresholds: vocab.Thresholds = vocab.LOAD) -> Words:
    """A bar for a 0..1 fraction between two edge marks, its fill coloured by level."""
    filled, empty = vocab.bar(value, width, vocab.glyphs(ascii))
    left, right = ("[", "]") if ascii else ("▕", "▏")
    style = LEVEL_STYLES[vocab.level(value, thresholds)]
    return merged(((left, "$text-muted"), (filled, style), (empty, "$text-muted 50%"),
                   (right, "$text-muted")))


def label(text: str) -> Words:
    return styled(text, "bold $text-muted")


def value(text: str, level: str | None = None) -> Words:
    """A reading; unknown ("n/a") is dimmed, a level colours it (a level of "none": not coloured)."""
    if text == units.NA:
        return styled(text, "$text-muted")
    return styled(text, LEVEL_STYLES[level] if level and level != "none" else "")


def join(parts: Iterable[Words | str], separator: str = " ") -> Words:
    """Join non-empty words or strings with a separator."""
    pieces: list[Piece] = []
    for part in parts:
        if not part:
            continue
        if pieces:
            pieces.append((separator, ""))
        pieces.extend(styled(part) if isinstance(part, str) else part)
    return merged(pieces)
