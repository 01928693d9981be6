"""The bottom line of every screen: its keys, as Textual's Footer shows them, drawn by one widget.

Textual's Footer makes a widget of each key (its styles, its message queue, its regions for the
compositor) and reads Screen.active_bindings, which looks up each key's character by Unicode name: on
the main screen's ten keys that was 1.8 MiB of the monitor's resident memory (1 MiB the widgets, 0.75
the lookups), more than a quarter of all it cost above a bare Textual app (bench/bench_rss.py). Here
the keys are pieces of one line; a click on a key presses it, and hovering over one shows what it does,
as in the Footer.
"""

from __future__ import annotations

from textual.actions import parse as parse_action
from textual.binding import Binding
from textual.events import MouseDown, MouseMove
from textual.reactive import reactive

from gputui.ui.bindings import PUNCTUATION_KEYS, class_bindings, remapped
from gputui.ui.widgets.line import Piece, StyledLines, cell_width

KEY = "bold $footer-key-foreground"
DESCRIPTION = "$footer-description-foreground"


def key_character(key: str) -> str | None:
    """The character a key types, as Textual's key_to_character says, without its lookup by Unicode
    name: None for a chord (ctrl+p) and for keys that type nothing (f1, enter)."""
    if "+" in key[1:]:
        return None
    if len(key) == 1:
        return key
    return " " if key == "space" else PUNCTUATION_KEYS.get(key)


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
            width = cell_width(shown[0]) + cell_width(shown[1])
            self._spans.append((x, x + width, key, tooltip))
            x += width
        palette = self.palette_key()
        if palette is not None:
            key, display, description = palette
            rule = "|" if getattr(self.app, "ascii", False) else "▏"
            hint: list[Piece] = [(rule, "$foreground-muted"), (display, KEY), (f" {description} ", DESCRIPTION)]
            room = self.size.width - x - sum(cell_width(text) for text, _ in hint)
            if room >= 0:
                pieces += [(" " * room, ""), *hint]
                self._spans.append((x + room, self.size.width, key, "Open the command palette"))
        self.show_lines([("", tuple(pieces))])

    def keys(self) -> list[tuple[str, str, str, bool, str]]:
        """(key, how it is shown, description, enabled, tooltip) of each action the screen shows a key
        for, the first of its keys where it has several: its focused widget's first, then its own,
        then the app's, as Textual's Footer lists them.

        Worked out from the classes' bindings (remapped by the config's [keys]) rather than from
        Screen.active_bindings, which asks Textual for every key's character by its Unicode name
        (bindings.PUNCTUATION_KEYS)."""
        focused = self.screen.focused
        chain = list(focused.ancestors_with_self) if focused is not None else [self.screen, self.app]
        keymap = getattr(self.app, "keymap", {})
        taken: set[str] = set()
        shown: set[str] = set()
        found = []
        for depth, node in enumerate(chain):
            for binding in remapped(class_bindings(type(node)), keymap):
                character = key_character(binding.key)
                if binding.key in taken or any(inner.check_consume_key(binding.key, character)
                                               for inner in chain[:depth]):
                    continue  # a widget nearer the focus has this key, or types it (the filter box)
                _, action, parameters = parse_action(binding.action)
                enabled = node.check_action(action, parameters)
                if enabled is False:
                    continue  # hidden, as check_action may say: the key stays free for an outer one
                taken.add(binding.key)
                refuses = getattr(self.app, "refuses_in_mode", None)
                if refuses is not None and refuses(action):
                    continue  # a key this mode refuses (replay's A): still live, to say why, but not offered
                if binding.show and binding.action not in shown:
                    shown.add(binding.action)
                    found.append((binding.key, self.app.get_key_display(binding), binding.description,
                                  enabled is True, binding.tooltip or binding.description))
        return found

    def palette_key(self) -> tuple[str, str, str] | None:
        """The command palette's (key, how it is shown, description), where it is shown."""
        if not (self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE):
            return None
        key = self.app.COMMAND_PALETTE_BINDING
        return key, self.app.get_key_display(Binding(key, "command_palette")), "palette"

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
