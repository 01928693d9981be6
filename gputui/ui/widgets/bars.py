"""Coloured bars and labelled values as Textual Content, coloured by level from the theme's variables.

The colour names are theme variables ($success, $warning, $error), so light/dark themes and NO_COLOR
apply without a hex literal in the code.
"""

from __future__ import annotations

from textual.content import Content

from gputui.ui import format as fmt

LEVEL_STYLES = {"low": "$success", "mid": "$warning", "high": "$error", "none": "$text-muted"}


def meter(value: float | None, width: int, *, ascii: bool = False, warn: float = 0.7,
          high: float = 0.9) -> Content:
    """A bar for a 0..1 fraction between two edge marks, its fill coloured by level."""
    filled, empty = fmt.bar(value, width, ascii=ascii)
    left, right = ("[", "]") if ascii else ("▕", "▏")
    style = LEVEL_STYLES[fmt.level(value, warn=warn, high=high)]
    return Content.assemble((left, "$text-muted"), (filled, style), (empty, "$text-muted 50%"),
                            (right, "$text-muted"))


def label(text: str) -> Content:
    return Content.styled(text, "bold $text-muted")


def value(text: str, level: str | None = None) -> Content:
    """A reading; unknown ("n/a") is dimmed, a level colours it."""
    if text == fmt.NA:
        return Content.styled(text, "$text-muted")
    return Content.styled(text, LEVEL_STYLES[level]) if level else Content(text)


def join(parts, separator: str = " ") -> Content:
    """Join non-empty Content/str parts with a separator."""
    pieces = [p if isinstance(p, Content) else Content(p) for p in parts if p]
    return Content(separator).join(pieces)
