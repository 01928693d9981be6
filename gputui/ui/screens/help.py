"""The help screen: every key of the monitor, generated from the bindings themselves (after the user's
key remaps), so it can never disagree with what the keys do.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


def describe_bindings(bindings: list[Binding], keymap: dict[str, str], app) -> list[tuple[str, str, str]]:
    """(keys, what it does, binding id) for each binding with an id, keys as the user remapped them."""
    bound = BindingsMap(bindings)
    if keymap:
        bound.apply_keymap(keymap)
    keys_by_id: dict[str, list[str]] = {}
    described: dict[str, str] = {}
    for key, found in bound.key_to_bindings.items():
        for binding in found:
            if not binding.id:
                continue
            keys_by_id.setdefault(binding.id, []).append(app.get_key_display(binding.with_key(key)))
            described[binding.id] = binding.tooltip or binding.description or binding.action
    order = [b.id for b in bindings if b.id]
    return [(", ".join(dict.fromkeys(keys_by_id[i])), described[i], i)
            for i in dict.fromkeys(order) if i in keys_by_id]


class HelpScreen(ModalScreen[None]):
    """A table per section: keys, what they do, and the id to remap them in config.toml."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close help", tooltip="Close this help", id="help.close")]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str, str]]]], config_hint: str) -> None:
        super().__init__()
        self.sections = sections
        self.config_hint = config_hint

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static("Keys", classes="help-title")
            for title, rows in self.sections:
                yield Static(title, classes="help-section")
                table = DataTable(show_cursor=False, classes="help-table")
                table.add_columns("key", "does", "id (to remap in config.toml)")
                for keys, does, binding_id in rows:
                    table.add_row(Text(keys), Text(does), Text(binding_id))
                yield table
            yield Static(self.config_hint, classes="help-hint", markup=False)

    def action_dismiss(self) -> None:
        self.dismiss(None)
