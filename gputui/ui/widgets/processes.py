"""The process table, updated in place: stale rows removed by key, changed cells updated, new rows
added, and the rows re-ordered only when the order changed; the selected process stays selected.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.color import Color, ColorParseError
from textual.message import Message
from textual.widgets import DataTable

from gputui.ui.rows import COLUMNS, Row, column_widths, fixed_width



class ProcessTable(DataTable):
    """A DataTable of Rows from gputui.ui.rows; clicking a header asks the app to sort by it."""

    BINDINGS = [
        Binding("enter", "open_detail", "Details", tooltip="Open the selected process's details", id="details"),
        # DataTable's own Home/End scroll sideways, which this table never needs: move the cursor.
        Binding("home", "scroll_top", "First row", show=False, tooltip="Select the first process", id="table.first"),
        Binding("end", "scroll_bottom", "Last row", show=False, tooltip="Select the last process", id="table.last"),
    ]

    class SortRequested(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    class DetailRequested(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class ProbeDetailRequested(Message):
        """Details of a probed process NVML does not list (its row has a report, no GPU process)."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cursor_foreground_priority="renderable")
        self.column_ids: tuple[str, ...] = ()
        self.command_width = 0
        self.widths: dict[str, int] = {}
        self.sort_column = "gpu_memory"
        self.sort_reverse = True
        self._cells: dict[str, dict[str, tuple[str, str]]] = {}  # row key -> column -> (text, style)
        self._order: list[str] = []
        self.rows_by_key: dict[str, Row] = {}
        self.selected_key: str | None = None
        self._fast_cells: dict = {}

    # -- columns -----------------------------------------------------------------------------

    def set_columns(self, column_ids: tuple[str, ...], sort_column: str, reverse: bool,
                    width: int, widths: dict[str, int] | None = None) -> None:
        """Change the visible columns (layout, config, pane width) or the sort arrow; rows are re-added.

        ``widths`` are the fixed columns' widths (rows.column_widths: room for the sort arrow). The
        command column takes whatever width the others leave, so the table never needs a
        horizontal scrollbar; long commands end in an ellipsis (the detail screen has them whole).
        """
        widths = widths if widths is not None else column_widths(column_ids, sort_column)
        command_width = max(10, width - fixed_width(column_ids, widths) - 3)
        state = (column_ids, sort_column, reverse, command_width, widths)
        if state == (self.column_ids, self.sort_column, self.sort_reverse, self.command_width, self.widths):
            return
        self.column_ids, self.sort_column, self.sort_reverse, self.command_width, self.widths = state
        rows = [self.rows_by_key[k] for k in self._order]
        self.clear(columns=True)
        self._cells.clear()
        self._order = []
        ascii = getattr(self.app, "ascii", False)
        for cid in column_ids:
            column = COLUMNS[cid]
            label = column.label
            if cid == sort_column:
                label += {(True, True): " v", (True, False): " ^",
                          (False, True): " ▼", (False, False): " ▲"}[(ascii, reverse)]
            self.add_column(Text(label, justify="right" if column.numeric else "left"), key=cid,
                            width=command_width if cid == "command" else widths.get(cid))
        self.show(rows)

    # -- rows --------------------------------------------------------------------------------

    def show(self, rows: list[Row]) -> None:
        """Bring the table to exactly these rows in this order, touching only what changed."""
        keys = [r.key for r in rows]
        wanted = set(keys)
        self.rows_by_key = {r.key: r for r in rows}
        selected = self.selected_key
        with self.app.batch_update():
            for key in [k for k in self._cells if k not in wanted]:
                self.remove_row(key)
                del self._cells[key]
            for row in rows:
                cells = {cid: (row.cells.get(cid, ""), row.styles.get(cid, "")) for cid in self.column_ids}
                old = self._cells.get(row.key)
                if old is None:
                    self.add_row(*(self._cell(cid, *cells[cid]) for cid in self.column_ids), key=row.key)
                else:
                    for cid, cell in cells.items():
                        if old[cid] != cell:
                            self.update_cell(row.key, cid, self._cell(cid, *cell))
                self._cells[row.key] = cells
            if keys != self._order and keys:
                self._reorder(keys)
            self._order = keys
            if selected in wanted:
                index = self.get_row_index(selected)
                if index != self.cursor_row:
                    self.move_cursor(row=index, scroll=False)
            self.selected_key = self._key_at_cursor()

    def _reorder(self, keys: list[str]) -> None:
        # DataTable.sort orders rows by a key function over cell values; the first column's cell
        # objects are unique per row, so their identity maps each row to its wanted position.
        first = self.column_ids[0]
        rank = {id(self.get_cell(key, first)): i for i, key in enumerate(keys)}
        self.sort(first, key=lambda cell: rank[id(cell)])

    def _cell(self, cid: str, text: str, style: str) -> Text:
        resolved = Style.parse(self._theme_style(style)) if style else ""
        return Text(text, style=resolved, justify="right" if COLUMNS[cid].numeric else "left",
                    no_wrap=True, overflow="ellipsis")

    def _theme_style(self, style: str) -> str:
        # Cells are Rich Text, which does not know Textual's theme variables: resolve them here.
        variables = self.app.theme_variables
        if self.app.no_color and any(word in ("$error", "$warning") for word in style.split()):
            # NO_COLOR turns every colour grey: a leak marker or a rising trend would be grey on
            # grey. Bold reverse video of the row's own text keeps the sign of trouble visible.
            return "bold reverse"
        words = []
        for word in style.split():
            if word == "$text-muted":
                words.append("dim")  # the theme's value is relative ("auto 60%"): Rich needs dim
            elif word.startswith("$"):
                try:
                    words.append(Color.parse(variables[word[1:]]).hex)
                except (KeyError, ColorParseError):
                    pass
            else:
                words.append(word)
        return " ".join(words)

    def refresh_styles(self) -> None:
        """Theme changed: re-colour every styled cell."""
        with self.app.batch_update():
            for key, cells in self._cells.items():
                for cid, (text, style) in cells.items():
                    if style:
                        self.update_cell(key, cid, self._cell(cid, text, style))

    def _key_at_cursor(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # cursor outside the rows while the table is being rebuilt
            return None

    # -- drawing -----------------------------------------------------------------------------

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        # DataTable redraws every visible cell through Rich's Padding/Styled pipeline whenever any
        # cell changes (its caches are keyed by a global update count), which made the table most
        # of the monitor's CPU. Our body cells are one-line Texts: draw their segments directly and
        # cache them by what they show, so a refresh costs only the cells that changed. Anything
        # else (header, labels, other cell types) takes DataTable's own path.
        if row_index < 0 or column_index < 0 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        try:
            row_key = self._row_locations.get_key(row_index)
            cell = self._data[row_key][self._column_locations.get_key(column_index)]
        except (AttributeError, KeyError):
            cell = None
        if not isinstance(cell, Text):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (row_index, column_index, cell.plain, cell.style, cell.justify, base_style, width,
               cursor, hover, self._show_hover_cursor, self._pseudo_class_state)
        lines = self._fast_cells.get(key)
        if lines is None:
            if len(self._fast_cells) > 20000:
                self._fast_cells.clear()
            component_style, post_style = self._get_styles_to_render_cell(
                False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
                self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
            # The row/column meta is how a click finds its cell, as in DataTable's own path.
            pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index})
            lines = [_one_line(cell, width, self.cell_padding, pre_style + component_style,
                               post_style, self.app.console)]
            self._fast_cells[key] = lines
        return lines

    # -- events ------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # The event may be older than the last update: trust where the cursor is now.
        self.selected_key = self._key_at_cursor()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.post_message(self.SortRequested(event.column_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._ask_detail(event.row_key.value)

    def action_open_detail(self) -> None:
        if self.selected_key is not None:
            self._ask_detail(self.selected_key)

    def _ask_detail(self, key: str) -> None:
        row = self.rows_by_key.get(key)
        if row is not None and row.process is None and row.report is not None:
            self.post_message(self.ProbeDetailRequested(row.pid))
        else:
            self.post_message(self.DetailRequested(key))


def _one_line(cell: Text, width: int, padding: int, pre_style: Style, post_style: Style, console):
    """A one-line cell as segments: padded, justified, cut with an ellipsis, styled like Styled()."""
    inner = max(0, width - 2 * padding)
    text = cell.copy()
    length = text.cell_len
    if length > inner:
        text.truncate(inner, overflow="ellipsis")
    elif length < inner:
        if cell.justify == "right":
            text.pad_left(inner - length)
        else:
            text.pad_right(inner - length)
    # Text.render applies the spans but not the Text's own style: apply it under them.
    own = console.get_style(cell.style) if cell.style else Style.null()
    body = Segment.apply_style(text.render(console, end=""), own)
    segments = [Segment(" " * padding), *body, Segment(" " * padding)]
    return list(Segment.apply_style(segments, pre_style, post_style))
