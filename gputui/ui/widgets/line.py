"""Text widgets that repaint cheaply: ``Line`` (one line that never asks for a new layout) and
``StyledLines`` (lines of styled pieces drawn in styles resolved once, for readings that change every
sample). Static.update() re-lays out the screen (its size may change); these do not.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import get_character_cell_size
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget

from gputui.analysis.vocabulary import glyphs


def cell_width(text: str) -> int:
    """The cells ``text`` takes on a terminal, as Rich's cell_len says, without Rich's cache of whole
    strings: readings change every sample, so its 4096 places filled with old ones within minutes
    (about 0.5 MB). Characters are cached, and they are few."""
    if text.isascii() and text.isprintable():
        return len(text)
    return sum(map(get_character_cell_size, text))


class Line(Widget):
    """Exactly one line of Content; ``show`` repaints only when the text changed."""

    DEFAULT_CSS = "Line { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }"

    def __init__(self, content: Content | str = "", *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.content = Content(content) if isinstance(content, str) else content

    def show(self, content: Content | str) -> None:
        content = Content(content) if isinstance(content, str) else content
        if content != self.content:
            self.content = content
            self.refresh()

    def render(self) -> Content:
        return self.content


# A piece of a line: its text and a style in Textual's words ("bold $text-muted", "" for plain).
Piece = tuple[str, str]


def pieces_of(content: Content) -> tuple[tuple[Piece, ...], ...]:
    """Content as lines of (text, style) pieces; where spans overlap, their styles are joined in
    order, so a later style wins as it does when Content renders."""
    lines: list[tuple[Piece, ...]] = []
    for line in content.split("\n", allow_blank=True):
        text = line.plain
        spans = [s for s in line.spans if s.end > s.start]
        if not spans:
            lines.append(((text, ""),) if text else ())
            continue
        cuts = sorted({0, len(text), *(s.start for s in spans), *(s.end for s in spans)})
        pieces: list[Piece] = []
        for start, end in zip(cuts, cuts[1:]):
            style = " ".join(str(s.style) for s in spans if s.start <= start and s.end >= end)
            if pieces and pieces[-1][1] == style:
                pieces[-1] = (pieces[-1][0] + text[start:end], style)
            else:
                pieces.append((text[start:end], style))
        lines.append(tuple(pieces))
    return tuple(lines)


class StyledLines(Widget):
    """Lines of styled pieces drawn straight into strips, for text that changes every sample.

    Textual's Content path builds a fresh Rich style (with an offset for mouse selection) for every
    span of every line on each repaint, which made ten lines of readings cost as much as the whole
    process table. Here each piece's style is resolved once per theme and reused; a repaint only makes
    the segments. Lines may have a background style of their own (a selected row).
    Text cannot be selected with the mouse in these widgets; clicks work as usual.
    """

    DEFAULT_CSS = "StyledLines { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.lines: tuple[tuple[str, tuple[Piece, ...]], ...] = ()  # (line background, pieces)
        self._styles: dict[tuple[str, str], RichStyle] = {}  # (background, style) -> resolved
        self._styles_for: tuple | None = None
        self._width = 0  # the content's width, read once a repaint (Textual asks it through the screen)

    def show_lines(self, lines: Iterable[tuple[str, tuple[Piece, ...]]]) -> None:
        """Draw these lines: ``(background style, pieces)`` each. Repaints only the lines that changed
        (Textual's own work on a line costs several times ours), and asks for a new layout only when
        the number of lines changes."""
        lines = tuple(lines)
        if lines == self.lines:
            return
        before, self.lines = self.lines, lines
        if len(lines) != len(before):
            self.refresh(layout=True)
            return
        width = self.size.width
        self.refresh(*(Region(0, y, width, 1) for y, (new, old) in enumerate(zip(lines, before)) if new != old))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines)

    def render(self) -> Content:
        """The lines as Content (what they say; drawing goes through ``render_line``)."""
        return Content("\n").join(Content.assemble(*pieces) for _, pieces in self.lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((sum(cell_width(t) for t, _ in pieces) for _, pieces in self.lines), default=0)

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every line of this repaint needs, found once: the width, and the styles if the theme or
        # the CSS changed (then the colours are resolved again).
        self._width = self.content_size.width
        key = (self.app.theme, self.visual_style)
        if key != self._styles_for:
            self._styles.clear()
            self._styles_for = key
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self._width or self.content_size.width  # (asked directly, before any repaint)
        if y >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        background, pieces = self.lines[y]
        resolve = self._style
        segments = [Segment(text, resolve(background, style)) for text, style in pieces]
        length = cell_width("".join(text for text, _ in pieces))
        strip = Strip(segments, length)
        if length > width:
            # Cut with an ellipsis that keeps the style of the cell it replaces, as Content does
            # ("..." in the ASCII look, where there is room for it).
            mark = glyphs(getattr(self.app, "ascii", False)).ellipsis
            mark = mark if len(mark) < width else ""
            kept = strip.crop(0, width - len(mark))
            last = strip.crop(width - len(mark), width)
            style = next((s.style for s in last), None)
            return Strip([*kept, Segment(mark, style)], width).simplify() if width else Strip([], 0)
        if length < width and background:  # a line with a background of its own fills the width
            return Strip([*segments, Segment(" " * (width - length), resolve(background, ""))], width)
        return strip  # Textual pads a short line with the widget's own background

    def _style(self, background: str, style: str) -> RichStyle:
        """A piece's style resolved against the theme, once per (background, style): readings change
        every sample, the few styles they are drawn in do not."""
        key = (background, style)
        found = self._styles.get(key)
        if found is None:
            base = self.visual_style
            layers = [base] + [_parse(s) for s in (background, style) if s]
            found = self._styles[key] = (base + VisualStyle.combine(layers)).rich_style
        return found


def _parse(style: str) -> VisualStyle:
    """A style in Textual's words ("bold $text-muted") against the running app's theme; one that
    does not parse draws plain, as in Content."""
    try:
        return VisualStyle.parse(style)
    except Exception:  # noqa: BLE001 - Textual raises several kinds for a bad style string
        return VisualStyle.null()
