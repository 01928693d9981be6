"""The bottom line of every screen: its keys, as Textual's Footer shows them, drawn by one widget.

Textual's Footer makes a widget of each key (its styles, its message queue, its regions for the
compositor): on the main screen's ten keys that was 1.8 MiB of the monitor's resident memory, more than
a quarter of all it costs above a bare Textual app (bench/bench_rss.py). Here the keys are pieces of
one line; a click on a key presses it, and hovering over one shows what it does, as in the Footer.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.events import MouseDown, MouseMove
from textual.reactive import reactive

from gputui.ui.widgets.line import Piece, StyledLines

KEY = "bold $footer-key-foreground"
DESCRIPTION = "$footer-description-foreground"


class KeyBar(StyledLines):
    """The keys the screen it is on answers to (those its bindings show), in the screen's order, with
    the command palette's key at the right where there is room. ``compact``: less space between keys,
    for narrow panes."""

    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
    }
    """

    compact = reactive(False)
    show_command_palette = reactive(True)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._spans: list[tuple[int, int, str, str]] = []  # (first cell, past the last, key, tooltip)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self.draw())
        self.draw()

    def on_resize(self) -> None:
        self.draw()

    def watch_compact(self) -> None:
        self.draw()

    def watch_show_command_palette(self) -> None:
        self.draw()

    def draw(self) -> None:
        """Lay the keys out again: the bindings changed (focus moved, a key was remapped or hidden)."""
        if not self.is_mounted:
            return
        pieces: list[Piece] = []
        self._spans = []
        x = 0
        for key, display, description, enabled, tooltip in self.keys():
            dim = "" if enabled else " dim"
            shown = (display, f" {description} ") if self.compact else (f" {display} ", f"{description} ")
            pieces += [(shown[0], KEY + dim), (shown[1], DESCRIPTION + dim)]
            width = cell_len(shown[0]) + cell_len(shown[1])
            self._spans.append((x, x + width, key, tooltip))
            x += width
        palette = self.palette_key()
        if palette is not None:
            key, display, description = palette
            rule = "|" if getattr(self.app, "ascii", False) else "▏"
            hint: list[Piece] = [(rule, "$foreground-muted"), (display, KEY), (f" {description} ", DESCRIPTION)]
            room = self.size.width - x - sum(cell_len(text) for text, _ in hint)
            if room >= 0:
                pieces += [(" " * room, ""), *hint]
                self._spans.append((x + room, self.size.width, key, "Open the command palette"))
        self.show_lines([("", tuple(pieces))])

    def keys(self) -> list[tuple[str, str, str, bool, str]]:
        """(key, how it is shown, description, enabled, tooltip) of each action the screen shows a key
        for, the first of its keys where it has several."""
        seen: set[str] = set()
        found = []
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            found.append((binding.key, self.app.get_key_display(binding), binding.description, enabled,
                          tooltip or binding.tooltip or binding.description))
        return found

    def palette_key(self) -> tuple[str, str, str] | None:
        """The command palette's (key, how it is shown, description), where it is shown and bound."""
        if not (self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE):
            return None
        active = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if active is None:
            return None
        binding = active.binding
        return binding.key, self.app.get_key_display(binding), binding.description

    def key_at(self, x: int) -> tuple[str, str] | None:
        """The (key, tooltip) drawn at column ``x``, if any."""
        return next(((key, tip) for start, end, key, tip in self._spans if start <= x < end), None)

    def on_mouse_down(self, event: MouseDown) -> None:
        found = self.key_at(event.x)
        if found is not None:
            self.app.simulate_key(found[0])

    def on_mouse_move(self, event: MouseMove) -> None:
        found = self.key_at(event.x)
        self.tooltip = found[1] if found is not None else None
