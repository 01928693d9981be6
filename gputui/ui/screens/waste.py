"""The w view: who holds the GPUs and who holds them idle, a line per owner (pod, container, Slurm job, unit
or user), the window and thresholds above them; in the many-host view, each owner over all the hosts (what
their judgements say, added up), then each host's as its gputui judged it.

It shows the sampling pipeline's judgement (gputui/analysis/waste.py) in --once's words (gputui.plain.waste);
it judges nothing itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from gputui.analysis.vocabulary import Glyphs, glyphs
from gputui.analysis.waste import across_hosts
from gputui.model.waste import Waste
from gputui.plain.waste import ACROSS_TITLE, TITLE, across_table, rules_words, table
from gputui.ui import bindings
from gputui.ui.widgets.key_bar import KeyBar
from gputui.untrusted import visible


class WasteScreen(Screen):
    """Every owner of a GPU process: memory held, mean SM utilisation, GPUs held idle, the longest idle."""

    DEFAULT_CSS = """
    WasteScreen #waste-table { margin: 1 0 0 0; }
    """

    BINDINGS = bindings.WASTE

    def __init__(self) -> None:
        super().__init__()
        self.views: Sequence[tuple[str | None, Waste | None]] = ()

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="waste-body"):
            yield Static(id="waste-title")
            yield Static(id="waste-rules")
            yield Static(id="waste-table")
        yield KeyBar()

    def show(self, views: Sequence[tuple[str | None, Waste | None]]) -> None:
        """Render the latest judgements: (None, this machine's), or in the many-host view (host, its own)
        for each host; a judgement of None: none yet (the first sample is on its way, a host has not answered)."""
        self.views = views
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        judged = [w for _, w in self.views if w is not None]
        idle = sum(w.idle_gpus for w in judged)
        hosts = len(self.views) > 1 or any(name is not None for name, _ in self.views)
        said = f"  {idle} GPU{'s' if idle != 1 else ''} held idle" + (f" on {len(judged)} hosts" if hosts else "")
        self.query_one("#waste-title", Static).update(
            Content.assemble((TITLE, "bold"), (said if judged else "", "bold $warning" if idle else "$text-muted")))
        if not judged:
            self.query_one("#waste-rules", Static).update(Content.styled("No sample yet.", "$text-muted"))
            self.query_one("#waste-table", Static).update("")
            return
        if hosts:  # each host's gputui judged its own GPUs, over what it watched, by its own rules
            self.query_one("#waste-rules", Static).update(Content.styled(
                "Each host as its own gputui judged it, by its rules, over what it watched.", "$text-muted"))
            lines = self._across([(name or "", w) for name, w in self.views if w is not None])
            lines += [line for name, waste in self.views for line in self._host_lines(name or "", waste)]
        else:
            self.query_one("#waste-rules", Static).update(Content.styled(" ".join(rules_words(judged[0])),
                                                                         "$text-muted"))
            lines = self._table(judged[0])
        self.query_one("#waste-table", Static).update(Content("\n").join(lines))

    def _across(self, views: list[tuple[str, Waste]]) -> list[Content]:
        """Each owner over the hosts, as their own judgements say, before each host's table."""
        owners = across_hosts(views)
        if not owners:
            return []
        head, rows, note = across_table(owners, self.size.width or 80, self.glyphs)
        return [Content.styled(ACROSS_TITLE, "bold $accent"), Content.styled(head, "bold")] + [
            Content.styled(row, "$warning") if owner.idle_gpus else Content(row) for row, owner in rows] + _note(note)

    def _host_lines(self, name: str, waste: Waste | None) -> list[Content]:
        lines = [Content(""), Content.styled(visible(name), "bold $accent")]
        if waste is None:
            return lines + [Content.styled("no judgement from this host (not answering, or an older gputui)",
                                           "$text-muted")]
        return lines + [Content.styled(" ".join(rules_words(waste)), "$text-muted")] + self._table(waste)

    def _table(self, waste: Waste) -> list[Content]:
        if not waste.owners:
            return [Content.styled("No GPU process.", "$text-muted")]
        head, rows, note = table(waste, self.size.width or 80, self.glyphs)
        return [Content.styled(head, "bold")] + [Content.styled(row, "$warning") if owner.idle else Content(row)
                                                 for row, owner in rows] + _note(note)

    @property
    def glyphs(self) -> Glyphs:
        return glyphs(getattr(self.app, "ascii", False))

    def action_close(self) -> None:
        self.app.pop_screen()


def _note(note: str) -> list[Content]:
    """What a stand-in SM%'s mark means, under the table that shows one."""
    return [Content.styled(note, "$text-muted")] if note else []
