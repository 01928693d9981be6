"""The process table's drawing caches (gputui/ui/widgets/processes.py): the cells' segments are kept
least-recently-drawn-first (Textual's LRUCache), and a cell's style is the theme's, as Textual resolves it."""

from __future__ import annotations

import pytest
from still import still_app
from textual.style import Style as TextualStyle
from ui_data import settle

from gputui.ui.widgets.processes import PIECES_KEPT, ProcessTable


async def test_a_full_cache_forgets_the_cells_drawn_longest_ago_not_the_line_just_drawn():
    app = still_app("training-node", seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        columns = len(table.column_ids)
        drawn = []
        piece = table._piece
        table._piece = lambda *args: drawn.append(args) or piece(*args)

        def line(name: str) -> None:
            table._draw([(f"{name}/{c}", "") for c in range(columns)], 0, 120)

        table._pieces.clear()  # (what the app drew so far)
        line("kept")
        for i in range((PIECES_KEPT - 2 * columns) // columns):  # nearly full, "kept" among the oldest
            line(f"old {i}")
        line("kept")  # drawn again: now the most recent
        for i in range(3):  # past the bound
            line(f"new {i}")
        drawn.clear()
        line("kept")
        assert drawn == []  # nothing of it drawn again
        line("old 0")  # the least recently drawn went
        assert len(drawn) == columns


@pytest.mark.parametrize("theme", ["dark", "light"])
async def test_a_cells_colour_is_the_theme_variable_textual_resolves(theme):
    app = still_app("leaky", seconds=120, theme=theme)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        trend = table.get_cell("51200/0", "trend")
        assert trend.plain.startswith("▲")
        expected = TextualStyle.parse("$error").rich_style
        assert trend.style == expected and expected.color is not None
        marker = table.get_cell("51200/0", "probe")
        assert marker.plain == "A" and marker.style == TextualStyle.parse("bold $error").rich_style
        assert marker.style.bold and marker.style.color == expected.color
