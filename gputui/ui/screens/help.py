"""The help screen: every key of the monitor, generated from the bindings themselves (after the user's
key remaps), so it can never disagree with what the keys do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.ui import bindings
from gputui.ui.table.job_rows import MARKS


def describe_bindings(bindings: list[Binding], keymap: dict[str, str],
                      app: App[Any]) -> list[tuple[str, str, str]]:
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


def legend(ascii: bool = False) -> list[tuple[str, str, str]]:
    """(mark, where it shows, what it means) for every mark the monitor draws."""
    from gputui.analysis.vocabulary import GROWING_PARTS, PART_LETTERS

    letters = " ".join(PART_LETTERS[part] for part in GROWING_PARTS)
    return [
        ("*" if ascii else "●", "P column", "a PyTorch probe is attached to the process"),
        (letters, "P column",
         "the probe finds memory growing: Parameters, Gradients, Optimizer state, Buffers, Activations, "
         "other Tensors, allocator Cache, Fragmentation; red for a leak, yellow for cache growth "
         "or fragmentation"),
        ("!", "P column", "the probe finds memory growing, category not known"),
        ("^1.2G/m 85s" if ascii else "▲1.2G/m 85s", "TREND",
         "GPU memory keeps rising: its rate per minute and the time until the GPU is full "
         "(narrow panes show the arrow and the time)"),
        ("/" if ascii else "↗", "TREND", "memory grew as the job started and is levelling off"),
        ("~", "TREND", "memory grows and is released again and again (no net growth)"),
        ("x OOM 09:03:09" if ascii else "✗ OOM 09:03:09", "P, TREND",
         "a probed process that an out-of-memory error ended at that time; Enter opens its report"),
        (" ".join(m.strip() for m in MARKS[ascii]), "COMMAND",
         "job view (j): a job's line, its ranks under it or folded (right / left arrow); Enter opens "
         "the job's detail"),
        (">" if ascii else "▶", "devices", "the GPU the history charts show (g or a click picks another)"),
        ("!" if ascii else "⚠", "devices", "the GPU is being slowed down (power cap, thermal ...)"),
        ("n/a", "anywhere", "the GPU or the process does not report this value"),
    ]


def _table(headers: tuple[str, str, str], rows: Iterable[tuple[str, str, str]], *, wrap_column: int) -> Table:
    # A Rich table wraps the long column to the box's width, so the short ones (keys, ids to remap
    # by) are always whole, at 80x24 as in a wide terminal.
    table = Table(box=None, show_edge=False, pad_edge=False, expand=True, header_style="bold")
    for i, header in enumerate(headers):
        if i == wrap_column:
            table.add_column(header, ratio=1, overflow="fold")
        else:
            table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


class HelpScreen(ModalScreen[None]):
    """A table per section: keys, the id to remap them in config.toml, and what they do; then what
    the monitor's marks mean."""

    BINDINGS = bindings.HELP

    def __init__(self, sections: list[tuple[str, list[tuple[str, str, str]]]], config_hint: str,
                 *, ascii: bool = False, cost: str = "") -> None:
        """``cost``: what the monitor itself costs, in words (narrow panes have no room for it in
        the header)."""
        super().__init__()
        self.sections = sections
        self.config_hint = config_hint
        self.ascii = ascii
        self.cost = cost

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            if self.cost:
                yield Static(self.cost, classes="help-hint", id="help-cost", markup=False)
            yield Static("Keys", classes="help-title")
            for title, rows in self.sections:
                yield Static(title, classes="help-section")
                yield Static(_table(("key", "id to remap", "does"),
                                    [(keys, binding_id, does) for keys, does, binding_id in rows],
                                    wrap_column=2), classes="help-table")
            yield Static(self.config_hint, classes="help-hint", markup=False)
            yield Static("Marks", classes="help-section")
            yield Static(_table(("mark", "where", "means"), legend(self.ascii), wrap_column=2),
                         classes="help-table", id="help-legend")

    def action_close(self) -> None:  # (Textual's own action_dismiss waits for callbacks first)
        self.dismiss(None)
