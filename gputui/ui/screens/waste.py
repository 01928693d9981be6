"""The w view: who holds the GPUs and who holds them idle, a line per owner (pod, container, Slurm job, unit
or user), the window and thresholds above them.

It shows the sampling pipeline's judgement (gputui/analysis/waste.py) in --once's words (gputui.plain.waste);
it judges nothing itself.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputui.model.waste import Waste
from gputui.plain.waste import TITLE, rules_words, table


class WasteScreen(Screen):
    """Every owner of a GPU process: memory held, mean SM utilisation, GPUs held idle, the longest idle."""

    DEFAULT_CSS = """
    WasteScreen #waste-table { margin: 1 0 0 0; }
    """

    BINDINGS = [
        Binding("escape,backspace,w", "close", "Back", tooltip="Back to the process list", id="waste.back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.waste: Waste | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="waste-body"):
            yield Static(id="waste-title")
            yield Static(id="waste-rules")
            yield Static(id="waste-table")
        yield Footer()

    def show(self, waste: Waste | None) -> None:
        """Render the latest judgement (None: none yet, the first sample is on its way)."""
        self.waste = waste
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        waste = self.waste
        idle = f"  {waste.idle_gpus} GPU{'s' if waste.idle_gpus != 1 else ''} held idle" if waste else ""
        self.query_one("#waste-title", Static).update(
            Content.assemble((TITLE, "bold"), (idle, "bold $warning" if waste and waste.idle_gpus else "$text-muted")))
        if waste is None:
            self.query_one("#waste-rules", Static).update(Content.styled("No sample yet.", "$text-muted"))
            return
        self.query_one("#waste-rules", Static).update(Content.styled(" ".join(rules_words(waste)), "$text-muted"))
        if not waste.owners:
            self.query_one("#waste-table", Static).update(Content.styled("No GPU process.", "$text-muted"))
            return
        head, rows = table(waste, self.size.width or 80)
        lines = [Content.styled(head, "bold")]
        lines += [Content.styled(row, "$warning") if owner.idle else Content(row) for row, owner in rows]
        self.query_one("#waste-table", Static).update(Content("\n").join(lines))

    def action_close(self) -> None:
        self.app.pop_screen()
