"""The drawing caches: the process table's cells' segments (gputui/ui/widgets/processes.py) are kept
least-recently-drawn-first (Textual's LRUCache), and a cell's style is the theme's, as Textual resolves it;
the styled lines' segments (gputui/ui/widgets/line.py) stay bounded however many readings they draw."""

from __future__ import annotations

import pytest
from still import still_app
from textual.style import Style as TextualStyle
from ui_data import settle

from gputui.ui.widgets.devices import DeviceLines
from gputui.ui.widgets.line import cell_width
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


async def test_styled_lines_keep_nothing_per_reading_as_readings_change():
    """A reading that changes every sample is drawn with the styles resolved for the first: an hour of
    them keeps no more than those, and the lines still draw what they say."""
    app = still_app("training-node", seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        lines = app.screen.query(DeviceLines).first()
        kept = []
        for second in range(3600):
            lines.show_lines([("", (("GPU ", "bold"), (f"{second} W", "$success")))])
            drawn = lines.render_line(0)
            kept.append(len(lines._styles))
        assert max(kept) == kept[0]  # the first reading added its two styles at most; none since
        assert drawn.text.startswith("GPU 3599 W")
        assert [segment.style for segment in drawn] == [lines._style("", "bold"), lines._style("", "$success")]


def test_a_width_in_cells_is_rich_s():
    from rich.cells import cell_len

    for text in ("", "58.7G/79.6G", "▆▆▆▅▅▇", "GPU 0 history ─ last 2m", "日本語のジョブ", "ok ✓ ✗ 🙂",
                 "tab\there", "bell\a", "é (e\u0301)", "\x1b[31m", "ｆｕｌｌ", "\u200b zero width"):
        assert cell_width(text) == cell_len(text), text


async def test_readings_drawn_leave_rich_s_cache_of_strings_alone():
    """Rich caches the width of each string it measures, 4096 of them: readings that change every sample
    filled it with old ones. The widgets measure their own pieces."""
    from rich.cells import cached_cell_len

    app = still_app("training-node", seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        lines = app.screen.query(DeviceLines).first()
        cached = cached_cell_len.cache_info().currsize
        for second in range(300):
            lines.show_lines([("", (("GPU ", "bold"), (f"{second} W ▆▅▇{second}", "$success")))])
            lines.render_line(0)
        grown = cached_cell_len.cache_info().currsize - cached
        assert grown < 10, grown
        assert lines.render_line(0).cell_length == len("GPU 299 W ▆▅▇299")
