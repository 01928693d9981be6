"""Lines of text made of styled pieces, cropped to a width and written with or without ANSI colour.

The renderer builds ``Line`` objects and never counts escape codes itself: widths are measured on the
visible text, and colour is added only when the final string is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.untrusted import harmless

# Named styles the renderer uses, as ANSI SGR parameters.
STYLES = {
    "bold": "1",
    "dim": "2",
    "ok": "32",
    "warn": "33",
    "bad": "31",
    "alert": "1;31",
    "title": "1;36",
    "head": "1;4",
    "accent": "35",
}


@dataclass
class Line:
    """One output line: a list of (text, style) pieces; style None is the terminal's default."""

    pieces: list[tuple[str, str | None]] = field(default_factory=list)

    def add(self, text: str, style: str | None = None) -> Line:
        # The renderers show outside strings made visible already (so widths are right); this is
        # the guarantee that no control character reaches the terminal by a path they missed
        # (harmless, not visible: the backslashes visible wrote stay single).
        if text:
            self.pieces.append((harmless(text), style))
        return self

    def extend(self, other: Line) -> Line:
        self.pieces.extend(other.pieces)
        return self

    def __len__(self) -> int:
        return sum(len(text) for text, _ in self.pieces)

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.pieces)

    def cropped(self, width: int, ellipsis: str) -> Line:
        """This line cut to ``width`` visible characters, ending in ``ellipsis`` when cut."""
        if len(self) <= width:
            return self
        room = max(0, width - len(ellipsis))
        out = Line()
        last_style = None
        for text, style in self.pieces:
            if room <= 0:
                break
            out.add(text[:room], style)
            last_style = style
            room -= len(text[:room])
        out.add(ellipsis[:width], last_style)
        return out

    def write(self, color: bool) -> str:
        if not color:
            return self.plain.rstrip()
        parts = []
        for text, style in self.pieces:
            code = STYLES.get(style) if style else None
            parts.append(f"\x1b[{code}m{text}\x1b[0m" if code else text)
        return "".join(parts).rstrip()


def text(value: str, style: str | None = None) -> Line:
    """A one-piece line."""
    return Line().add(value, style)


def flow(chunks: list[Line], width: int, *, first: Line | None = None, indent: int = 4,
         gap: int = 2, ellipsis: str = "...") -> list[Line]:
    """Lay ``chunks`` out left to right after ``first``, starting a new indented line when full.

    Each chunk stays whole when it fits on a line of its own; one that cannot is cropped.
    """
    lines: list[Line] = []
    current = Line().extend(first) if first is not None else Line()
    # A lead-in that ends in a space ("probe ", an indent) needs no gap before the first chunk.
    fresh = first is None or not first.plain or first.plain[-1] == " "
    for chunk in chunks:
        if not len(chunk):
            continue
        needed = len(chunk) + (0 if fresh else gap)
        if len(current) + needed > width and not fresh:
            lines.append(current)
            current = Line().add(" " * indent)
            fresh = True
            needed = len(chunk)
        if not fresh:
            current.add(" " * gap)
        current.extend(chunk)
        fresh = False
    lines.append(current)
    return [line.cropped(width, ellipsis) for line in lines]
