"""A one-line text widget that repaints without asking for a new layout.

Static.update() re-lays out the screen (its size may change); titles and status lines that change
every second but never change size use this instead, which keeps a refresh cheap.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


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
