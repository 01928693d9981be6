"""The process table: a fixed header line and one line per process, drawn through Textual's Line API.

Rows are kept by key: ``show`` takes the rows in their new order, and the selected process stays
selected when rows come, go or change places. Only the lines in view are drawn, each from a Strip
cached by what it shows (its cells, the table width, whether it is selected or under the mouse, the
styles of the theme), so a refresh in which a few cells changed redraws those lines and no others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rich.cells import set_cell_size
from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as TextualStyle

from gputui.analysis.vocabulary import glyphs
from gputui.ui import bindings
from gputui.ui.table.columns import COLUMNS, PADDING, column_widths, fixed_width
from gputui.ui.table.rows import Row
from gputui.ui.widgets.line import cell_width

# What a line is drawn as, besides its cells: bits of the state in the cache keys.
SELECTED, HOVERED, HEADER = 1, 2, 4
PADS = " " * (PADDING // 2)  # the blank cells each side of a column
FILLER = -1  # the "column" right of the last one, which fills the line to the widget's width

# A cell as the rows give it: its text and a style in Textual's words ("bold $error", "" for none).
Cell = tuple[str, str]
PIECES_KEPT = 1024  # cells' drawn segments kept: about two screenfuls of cells


def fit(text: str, width: int, right: bool, ellipsis: str = "…") -> str:
    """``text`` made exactly ``width`` cells wide: justified, or cut with ``ellipsis`` ("..." in the
    ASCII look) where there is room for it."""
    text = strip_control_codes(text)  # as Rich's Text does: a cell never moves the terminal's cursor
    length = cell_width(text)
    if length > width:
        mark = ellipsis if len(ellipsis) < width else ""
        return set_cell_size(text, width - len(mark)) + mark if width > 0 else ""
    if length < width:
        spaces = " " * (width - length)
        return spaces + text if right else text + spaces
    return text


class ProcessTable(ScrollView, can_focus=True):
    """Rows from gputui.ui.table.rows, one line each, under a header; clicking a header asks the app to
    sort by it, Enter (or a click on the selected row) asks for the selected process's (or job's)
    details, left and right on a job view's row ask to fold or unfold its job."""

    ALLOW_SELECT = False

    COMPONENT_CLASSES = {
        "processtable--header",
        "processtable--cursor",
        "processtable--hover",
        "processtable--header-hover",
    }

    # The look of a Textual table (gputui.tcss picks the app's own colours on top).
    DEFAULT_CSS = """
    ProcessTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .processtable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .processtable--header {
                background-tint: $foreground 5%;
            }
        }
        & > .processtable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .processtable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .processtable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .processtable--hover {
            background: $block-hover-background;
        }
        & > .processtable--header-hover {
            background: $accent 30%;
        }
    }
    """

    BINDINGS = bindings.PROCESS_TABLE

    class SortRequested(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    class DetailRequested(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class FoldRequested(Message):
        """Fold (or unfold) the job whose line has this key: the job view's rows are the screen's."""

        def __init__(self, key: str, fold: bool) -> None:
            super().__init__()
            self.key, self.fold = key, fold

    class ProbeDetailRequested(Message):
        """Details of a probed process NVML does not list (its row has a report, no GPU process)."""

        def __init__(self, pid: int, host: str | None = None) -> None:
            super().__init__()
            self.pid, self.host = pid, host  # host: the many-host view's host of it

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.column_ids: tuple[str, ...] = ()
        self.command_width = 0
        self.widths: dict[str, int] = {}
        self.sort_column = "gpu_memory"
        self.sort_reverse = True
        self.rows_by_key: dict[str, Row] = {}
        self.row_keys: list[str] = []  # the rows' keys in the order shown
        self.selected_key: str | None = None
        self._cursor = 0  # the selected row's index
        self._hover: int | None = None  # the row under the mouse pointer (-1: the header)
        # Row key -> (the Row they were read from, its cells column by column), for rows drawn.
        self._cells: dict[str, tuple[Row, tuple[Cell, ...]]] = {}
        # (label, width inside the padding, right-justified) per column, and the table's width.
        self._layout: tuple[tuple[str, int, bool], ...] = ()
        self._table_width = 0
        # Drawn lines, valid while the styles are those of ``_look``: row key -> (what it shows, strip).
        self._strips: dict[str, tuple[tuple, Strip]] = {}
        self._header: tuple[tuple, Strip] | None = None
        self._look: tuple | None = None  # (theme, the widget's Rich style) the caches below are for
        self._base = Style()
        self._header_style = Style()
        self._pre: dict[tuple[int, int], Style] = {}  # (column, state) -> style of its blank cells
        self._own: dict[str, Style] = {}  # a cell's style in Rich's words, theme variables resolved
        # (column, state, cell) -> the cell's segments: most cells (user, command, GPU) stay the same
        # from one sample to the next while others in their line change; readings that change make
        # new ones, and the least recently drawn go.
        self._pieces: LRUCache[tuple[int, int, Cell], tuple[Segment, ...]] = LRUCache(PIECES_KEPT)

    @property
    def _ellipsis(self) -> str:
        return glyphs(getattr(self.app, "ascii", False)).ellipsis

    # -- what other code reads ---------------------------------------------------------------

    @property
    def cursor_row(self) -> int:
        """The selected row's index (0 when there are no rows)."""
        return self._cursor

    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def shown_widths(self) -> dict[str, int]:
        """Cells wide each shown column is, inside its padding; the command's included."""
        return {cid: width for cid, (_, width, _) in zip(self.column_ids, self._layout)}

    def get_cell(self, key: str, column: str) -> Text:
        """One cell as Rich Text, styled as it is drawn (theme variables resolved)."""
        text, style = self._cells_of(key)[self.column_ids.index(column)]
        resolved = self._own_style(style) if style else ""
        return Text(text, style=resolved, justify="right" if COLUMNS[column].numeric else "left",
                    no_wrap=True, overflow="ellipsis")

    # -- columns -----------------------------------------------------------------------------

    def set_columns(self, column_ids: tuple[str, ...], sort_column: str, reverse: bool,
                    width: int, widths: dict[str, int] | None = None) -> None:
        """Change the visible columns (layout, config, pane width) or the sort arrow.

        ``widths`` are the fixed columns' widths (columns.column_widths: room for the sort arrow). The
        command column takes whatever width the others leave, so the table never needs a
        horizontal scrollbar; long commands end in an ellipsis (the detail screen has them whole).
        """
        widths = widths if widths is not None else column_widths(column_ids, sort_column)
        command_width = max(10, width - fixed_width(column_ids, widths) - 3)
        state = (column_ids, sort_column, reverse, command_width, widths)
        if state == (self.column_ids, self.sort_column, self.sort_reverse, self.command_width, self.widths):
            return
        self.column_ids, self.sort_column, self.sort_reverse, self.command_width, self.widths = state
        ascii = getattr(self.app, "ascii", False)
        layout = []
        for cid in column_ids:
            column = COLUMNS[cid]
            label = column.label
            if cid == sort_column:
                label += {(True, True): " v", (True, False): " ^",
                          (False, True): " ▼", (False, False): " ▲"}[(ascii, reverse)]
            inner = command_width if cid == "command" else widths.get(cid, 0)
            layout.append((label, inner, column.numeric))
        self._layout = tuple(layout)
        self._table_width = sum(inner + PADDING for _, inner, _ in layout)
        self._cells = {}  # every row's cells are taken again, for these columns
        self._strips.clear()
        self._pieces.clear()
        self._header = None
        self.show([self.rows_by_key[k] for k in self.row_keys])
        self.refresh()

    # -- rows --------------------------------------------------------------------------------

    def show(self, rows: list[Row]) -> None:
        """Bring the table to exactly these rows in this order; redraw only the lines that changed.

        A row's cells are read when its line is drawn (or compared, in view): rows out of view cost
        no more than their key.
        """
        old_keys = self.row_keys
        top, height = self.scroll_offset.y, self._rows_in_view()
        # What the lines in view show now, to tell which of them the new rows change.
        before = [self._cells.get(key, (None, None))[1] for key in old_keys[top:top + height]]
        keys = [row.key for row in rows]
        self.rows_by_key = rows_by_key = {row.key: row for row in rows}
        self.row_keys = keys
        if len(self._cells) > len(keys):  # rows gone: forget them
            self._cells = {k: v for k, v in self._cells.items() if k in rows_by_key}
            self._strips = {k: v for k, v in self._strips.items() if k in rows_by_key}

        old_cursor = self._cursor
        if self.selected_key in rows_by_key:
            cursor = keys.index(self.selected_key)
        else:  # gone (or none yet): the selection stays on the same line, as DataTable's did
            cursor = min(old_cursor, max(0, len(keys) - 1))
        self._cursor = cursor
        self.selected_key = keys[cursor] if keys else None

        size = Size(self._table_width, len(keys) + 1)
        if size != self.virtual_size:
            self.virtual_size = size  # a reactive with layout=True: lays out and redraws it all
        else:  # the same number of rows: redraw the lines in view whose row, cells or selection changed
            for index in range(top, min(len(keys), top + height)):
                key = keys[index]
                if (key != old_keys[index] or self._cells_of(key) is not before[index - top]
                        or (cursor != old_cursor and index in (cursor, old_cursor))):
                    self.refresh(Region(0, index + 1 - top, self.size.width, 1))
        if cursor != old_cursor:
            self._keep_cursor_visible()

    def _cells_of(self, key: str) -> tuple[Cell, ...]:
        """The row's cells in the shown columns' order, read again when the row is a new one."""
        row = self.rows_by_key[key]
        known = self._cells.get(key)
        if known is not None and known[0] is row:
            return known[1]
        texts, styles = row.cells, row.styles
        cells = tuple((texts.get(cid, ""), styles.get(cid, "")) for cid in self.column_ids)
        if known is not None and known[1] == cells:
            cells = known[1]  # unchanged: the same tuple, which the cached strip's key matches by identity
        self._cells[key] = (row, cells)
        return cells

    def _rows_in_view(self) -> int:
        return max(0, self.scrollable_content_region.height - 1)  # the header is the first line

    # -- the selection -----------------------------------------------------------------------

    def move_cursor(self, *, row: int, scroll: bool = True) -> None:
        """Select the row at this index (clamped to the rows there are)."""
        row = min(max(row, 0), max(0, len(self.row_keys) - 1))
        old, self._cursor = self._cursor, row
        self.selected_key = self.row_keys[row] if self.row_keys else None
        if old != row:
            self._refresh_row(old)
            self._refresh_row(row)
        if scroll:
            self._keep_cursor_visible()

    def _keep_cursor_visible(self) -> None:
        rows = self._rows_in_view()
        if not rows:
            return
        top = self.scroll_offset.y
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False, force=True)
        elif self._cursor >= top + rows:
            self.scroll_to(y=self._cursor - rows + 1, animate=False, force=True)

    def _refresh_row(self, index: int | None) -> None:
        """Redraw one row's line (-1: the header) if it is in view."""
        if index == -1:
            self.refresh(Region(0, 0, self.size.width, 1))
        elif index is not None:
            y = index + 1 - self.scroll_offset.y
            if 1 <= y < self.size.height:
                self.refresh(Region(0, y, self.size.width, 1))

    def _set_hover(self, index: int | None) -> None:
        if index != self._hover:
            old, self._hover = self._hover, index
            self._refresh_row(old)
            self._refresh_row(index)

    # -- keys --------------------------------------------------------------------------------

    def action_cursor_up(self) -> None:
        self._set_hover(None)  # the keyboard took over: no hover highlight, as in DataTable
        self.move_cursor(row=self._cursor - 1)

    def action_cursor_down(self) -> None:
        self._set_hover(None)
        self.move_cursor(row=self._cursor + 1)

    def action_page_up(self) -> None:
        self._set_hover(None)
        page = max(1, self._rows_in_view())
        self.scroll_to(y=self.scroll_y - page, animate=False, force=True)
        self.move_cursor(row=self._cursor - page)

    def action_page_down(self) -> None:
        self._set_hover(None)
        page = max(1, self._rows_in_view())
        self.scroll_to(y=self.scroll_y + page, animate=False, force=True)
        self.move_cursor(row=self._cursor + page)

    def action_scroll_top(self) -> None:
        self._set_hover(None)
        self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        self._set_hover(None)
        self.move_cursor(row=len(self.row_keys) - 1)

    def action_fold(self, fold: bool) -> None:
        row = self.rows_by_key.get(self.selected_key or "")
        if row is None or row.group is None:  # no job here: the keys scroll, as a ScrollView's do
            (self.action_scroll_left if fold else self.action_scroll_right)()
        elif fold or row.key == row.group:  # a job's or an owner's own line
            self.post_message(self.FoldRequested(row.group, fold))

    def action_open_detail(self) -> None:
        self._set_hover(None)
        if self.selected_key is not None:
            self._ask_detail(self.selected_key)

    def _ask_detail(self, key: str) -> None:
        row = self.rows_by_key.get(key)
        if row is not None and row.process is None and row.report is not None:
            self.post_message(self.ProbeDetailRequested(row.pid, row.host))
        else:
            self.post_message(self.DetailRequested(key))

    # -- the mouse ---------------------------------------------------------------------------

    def _line_at(self, event: events.MouseEvent) -> tuple[int | None, int]:
        """The row under the pointer (-1: the header, None: no row) and the x in the table."""
        offset = event.get_content_offset(self)
        if offset is None:
            return None, 0
        x = offset.x + self.scroll_offset.x
        if offset.y == 0:
            return -1, x
        index = offset.y - 1 + self.scroll_offset.y
        return (index if index < len(self.row_keys) else None), x

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self._line_at(event)[0])

    def on_leave(self, event: events.Leave) -> None:
        self._set_hover(None)

    def on_click(self, event: events.Click) -> None:
        index, x = self._line_at(event)
        self._set_hover(index)
        if index is None:
            return
        event.stop()
        if index == -1:
            left = 0
            for cid, (_, inner, _) in zip(self.column_ids, self._layout):
                left += inner + PADDING
                if x < left:
                    self.post_message(self.SortRequested(cid))
                    break
            return
        # As DataTable: a click selects a row, a click on the selected row opens it (so does a
        # double click, its second click landing on the row the first selected).
        again = index == self._cursor
        self.move_cursor(row=index)
        if again:
            self._ask_detail(self.row_keys[index])

    # -- styles ------------------------------------------------------------------------------

    def _own_style(self, style: str) -> Style:
        """A cell's style in Textual's words as the Rich style it is drawn with (kept per theme)."""
        own = self._own.get(style)
        if own is None:
            own = self._own[style] = self._theme_style(style)
        return own

    def _theme_style(self, style: str) -> Style:
        # Cells are drawn with Rich styles, which do not know Textual's theme variables: Textual
        # resolves them.
        if self.app.no_color and any(word in ("$error", "$warning") for word in style.split()):
            # NO_COLOR turns every colour grey: a leak marker or a rising trend would be grey on
            # grey. Bold reverse video of the row's own text keeps the sign of trouble visible.
            return Style(bold=True, reverse=True)
        resolved = TextualStyle.parse(style, self.app.theme_variables)
        if resolved.foreground is not None and resolved.foreground.auto:
            # A colour the theme gives relative to the background ($text-muted: "auto 60%"), which a
            # Rich style cannot know: dim.
            resolved = dataclasses.replace(resolved, foreground=None, dim=True)
        return resolved.rich_style

    def refresh_styles(self) -> None:
        """Theme changed: re-colour every cell (drawing notices a new theme by itself too)."""
        self._look = None
        self.refresh()

    def notify_style_update(self) -> None:
        # Focus, theme or CSS changed: the component classes' styles may have too.
        super().notify_style_update()
        self._look = None

    def _take_styles(self) -> None:
        """Start a frame: when the styles changed since the last, forget what was drawn with them."""
        look = (self.app.theme, self.rich_style)
        if look == self._look:
            return
        self._look = look
        self._base = look[1]
        self._header_style = self.get_component_styles("processtable--header").rich_style
        self._pre.clear()
        self._own.clear()
        self._pieces.clear()
        self._strips.clear()
        self._header = None

    def _pre_style(self, column: int, state: int) -> Style:
        """The style of a column's blank cells (and unstyled text) in a line of this state."""
        found = self._pre.get((column, state))
        if found is None:
            header = state & HEADER
            component = Style()
            if state & HOVERED:
                component += self.get_component_rich_style("processtable--hover")
                if header:
                    component += self.get_component_rich_style("processtable--header-hover")
            if state & SELECTED:
                component += self.get_component_rich_style("processtable--cursor")
            # The column in the style's meta keeps the columns' segments apart when their styles
            # are alike, so the lines break into segments where DataTable's did (same pictures).
            meta = Style.from_meta({"out_of_bounds": True} if column == FILLER else {"column": column})
            found = (self._header_style if header else self._base) + meta + component
            self._pre[(column, state)] = found
        return found

    def _piece(self, column: int, state: int, text: str, style: str) -> tuple[Segment, ...]:
        """One cell's segments: padded, justified or cut with an ellipsis, in a line of this state."""
        pre = self._pre_style(column, state)
        _, inner, right = self._layout[column]
        body = fit(text, inner, right, self._ellipsis)
        if style:
            styled = pre + self._own_style(style)  # the line's look under the cell's colour, as DataTable drew it
            if styled != pre:  # the justifying blanks take the cell's style, the padding the line's
                return (Segment(PADS, pre), Segment(body, styled), Segment(PADS, pre))
        return (Segment(f"{PADS}{body}{PADS}", pre),)

    # -- drawing -----------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._take_styles()
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        if self._look is None:
            self._take_styles()
        width = self.size.width
        if y == 0:
            state = HEADER | (HOVERED if self._hover == -1 else 0)
            heading = (self._layout, state, width)
            if self._header is None or self._header[0] != heading:
                self._header = (heading, self._draw([(label, "") for label, _, _ in self._layout], state, width))
            return self._header[1]
        index = y - 1 + self.scroll_offset.y
        if index >= len(self.row_keys):
            return Strip.blank(width, self._base)
        key = self.row_keys[index]
        cells = self._cells_of(key)
        state = (SELECTED if index == self._cursor else 0) | (HOVERED if index == self._hover else 0)
        want = (cells, state, width)
        cached = self._strips.get(key)
        if cached is not None and cached[0] == want:
            return cached[1]
        strip = self._draw(cells, state, width)
        self._strips[key] = (want, strip)
        return strip

    def _draw(self, cells: Iterable[Cell], state: int, width: int) -> Strip:
        """One line of cells as a Strip ``width`` wide."""
        pieces = self._pieces
        segments: list[Segment] = []
        for column, cell in enumerate(cells):
            key = (column, state, cell)
            found = pieces.get(key)
            if found is None:
                found = self._piece(column, state, *cell)
                pieces.set(key, found)
            segments += found
        table = self._table_width
        if table < width:  # the line's look runs on to the widget's edge
            segments.append(Segment(" " * (width - table), self._pre_style(FILLER, state)))
        elif table > width:
            return Strip(segments, table).crop(0, width)
        return Strip(segments, width)
