"""The main screen: header, devices, history charts, the process table and the alert line, laid out for the pane
size: in a pane too short for its GPUs, they fold into one line, so that the table keeps its rows; toasts go over
the devices and charts of a big pane, never over the table.

It holds the view state (sort, filter, tree, only mine, charted GPU) and renders from the app's latest
Snapshot and History; it never samples anything itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.content import Content
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Input

from gputui.analysis.vocabulary import command_line
from gputui.model import GpuProcess, Snapshot
from gputui.ui import bindings
from gputui.ui.actions.attaching import ProbeTarget
from gputui.ui.actions.signals import Target, kill_command
from gputui.ui.notices import Notice
from gputui.ui.requests import OpenJobDetail, OpenProcessDetail, OpenWaste
from gputui.ui.state import MonitorState
from gputui.ui.table import rows as table_rows
from gputui.ui.table.columns import COLUMNS, DEFAULT, column_widths, columns_for
from gputui.ui.table.job_rows import JobSource, group_by_job
from gputui.ui.table.owner_rows import group_by_owner
from gputui.ui.widgets.charts import DeviceHistory
from gputui.ui.widgets.devices import DeviceList, tiny_lines
from gputui.ui.widgets.header import HostHeader
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.line import Line
from gputui.ui.widgets.processes import ProcessTable

# Rows the process table keeps in a tiny pane: where a line per GPU (or two GPUs a line) would leave it fewer,
# the GPUs fold into one line.
TABLE_ROWS = 4


def layout_for(width: int, height: int) -> str:
    """The layout mode for a pane: "tiny", "compact", "normal" or "wide"."""
    if width < 70 or height < 20:
        return "tiny"
    if width < 100 or height < 32:
        return "compact"
    if width >= 160:
        return "wide"
    return "normal"


class MainScreen(Screen):
    """Devices and processes at a glance."""

    # The table has the keys from the first moment: a key typed while the monitor loads (the user
    # has the early frame to look at by then) must reach the bindings, not the hidden filter box.
    AUTO_FOCUS = "#processes"

    BINDINGS = bindings.MAIN_SCREEN

    def __init__(self, monitor: MonitorState, *, ascii: bool = False,
                 columns: tuple[str, ...] = DEFAULT, me: str | None = None) -> None:
        """``monitor``: what the app shows (its latest sample, history, verdicts), read at each render."""
        super().__init__(id="main")
        self.monitor = monitor
        self.ascii = ascii
        self.chosen_columns = columns
        self.owners_shown = False  # whether any process has an owner more specific than its user
        self.me = me
        self.sort_column = "gpu_memory"
        self.sort_reverse = True
        self.filter_text = ""
        self.tree_view = False
        self.job_view = False
        self.owner_view = False
        self.folded: set[str] = set()  # job and owner lines whose rows are hidden (their row keys)
        self.only_mine = False
        self.charts_on = True
        self.chart_device: int | None = None
        self.device_picked = False  # the user picked a GPU (g, a click): marked even without charts
        self.gpus_folded = False  # every GPU in one line (a tiny pane too short for a line each)
        self.notices: tuple[Notice, ...] = ()  # what is wrong now, newest first: the alert line's
        self.toasts_placed: tuple[int, int] | None = None  # toasts' (lines under them, most lines); None: Textual's
        self.layout_mode = "normal"
        self.pane_width = 80
        self.trend_width = 0  # the widest trend shown: the TREND column takes no more
        self.stale = True  # a snapshot arrived while another screen was on top

    def compose(self) -> ComposeResult:
        yield from self.compose_top()
        yield Line(id="table-status")
        # The filter box (/) is mounted when first asked for: most sessions never filter, and a box
        # of Textual's is 0.15 MiB of the monitor's memory.
        yield ProcessTable(id="processes")
        # The alert line (#alerts) is mounted over the footer when something first goes wrong, as the filter box
        # is when first asked for.
        yield KeyBar()

    def compose_top(self) -> ComposeResult:
        """What stands above the process table: the header, the devices and their charts."""
        yield HostHeader(ascii=self.ascii, as_root=self.monitor.options.as_root, id="header")
        with Container(id="top"):
            yield DeviceList(ascii=self.ascii, id="devices")
            yield DeviceHistory(ascii=self.ascii, id="charts")

    def on_mount(self) -> None:
        self.apply_layout(self.app.size.width, self.app.size.height)
        self.query_one(ProcessTable).focus()

    # -- rendering ---------------------------------------------------------------------------

    def on_screen_resume(self) -> None:
        if self.stale:
            self.render_snapshot()

    def on_resize(self, event: Resize) -> None:
        self.apply_layout(event.size.width, event.size.height)

    def apply_layout(self, width: int, height: int) -> None:
        mode = layout_for(width, height)
        if mode != self.layout_mode:
            self.remove_class(f"-{self.layout_mode}")
            self.layout_mode = mode
        self.add_class(f"-{mode}")
        # Below 100 columns the footer's usual spacing cuts its last key short ("p Paus"), and the
        # palette's hint leaves no room for the last (A Attach): ctrl+p still opens it, as the help says.
        footer = self.query_one(KeyBar)
        footer.compact = mode in ("compact", "tiny")
        footer.show_command_palette = mode not in ("compact", "tiny")
        self.pane_width = width
        self._set_columns()
        self.render_snapshot()
        self._show_notices()

    def _set_columns(self) -> None:
        ids = columns_for(self.layout_mode, self.shown_columns(), self.pane_width,
                                     sort_column=self.sort_column, trend_width=self.trend_width,
                                     owners=self.owners_shown)
        widths = column_widths(ids, self.sort_column, self.trend_width)
        self.query_one(ProcessTable).set_columns(ids, self.sort_column, self.sort_reverse,
                                                 self.pane_width, widths)

    def shown_columns(self) -> tuple[str, ...]:
        """The columns asked for (the many-host view adds the host's)."""
        return self.chosen_columns

    @property
    def charts_visible(self) -> bool:
        return self.charts_on and self.layout_mode in ("normal", "wide")

    def render_snapshot(self) -> None:
        """Bring every widget up to the app's latest snapshot and history."""
        app = self.monitor
        snap = app.snapshot
        self.query_one(HostHeader).show(snap, interval=app.interval, paused=app.source.paused,
                                        compact=self.layout_mode == "tiny", problem=app.problem,
                                        position=app.position)
        if snap is None:
            return
        self.stale = False
        indices = [d.index for d in snap.devices]
        if self.chart_device not in indices:
            self.chart_device = indices[0] if indices else None
        device_mode = "normal" if self.layout_mode in ("normal", "wide") else self.layout_mode
        self.gpus_folded = device_mode == "tiny" and self._gpus_crowd_table(len(snap.devices))
        # No GPUs (no driver): nothing to chart, whatever the charts key says.
        charted = next((d for d in snap.devices if d.index == self.chart_device), None)
        visible = self.charts_visible and charted is not None
        marked = visible or (self.device_picked and charted is not None)
        self.query_one(DeviceList).show(snap, "folded" if self.gpus_folded else device_mode,
                                        self.chart_device if marked else None)
        charts = self.query_one(DeviceHistory)
        if charts.display != visible:
            charts.display = visible
        if visible:
            charts.show(app.history, charted)
        self.render_table()
        self.call_after_refresh(self._place_toasts)  # the devices and charts may have changed height

    def _gpus_crowd_table(self, gpus: int) -> bool:
        """Whether ``gpus`` GPUs, a line each (or packed two or more a line), would leave the process table
        fewer than TABLE_ROWS rows in this tiny pane."""
        width, height = self.app.size
        header = len(self.query_one(HostHeader).lines)
        beside = header + 2 + (1 if self.notices else 0)  # the table's header, the footer; the alert line
        box = self.filter_box()
        if box is not None and box.display:
            beside += 1
        return tiny_lines(gpus, width) > height - beside - TABLE_ROWS

    def render_table(self) -> None:
        built = self.rows_to_show()
        if built is None:
            return
        found, total = built
        shown = sum(1 for r in found if (r.process is not None or r.report is not None) and r.ended is None)
        if self.job_view:
            found = group_by_job(found, self.job_sources(), self.folded, ascii=self.ascii)
        elif self.owner_view:
            found = group_by_owner(found, self.folded, ascii=self.ascii)
        trend_width = max((len(r.trend) for r in found), default=0)
        owners_shown = table_rows.owners_beyond_users(found)
        if trend_width != self.trend_width or owners_shown != self.owners_shown:
            # a trend came or went: give the command the room; an owner came: show the column
            self.trend_width, self.owners_shown = trend_width, owners_shown
            self._set_columns()
        self.query_one(ProcessTable).show(found)
        self._render_status(shown, total)

    def rows_to_show(self) -> tuple[list[table_rows.Row], int] | None:
        """The table's rows as the view state asks, and how many processes there are in all."""
        snap = self.monitor.snapshot
        if snap is None:
            return None
        found = table_rows.build_rows(
            snap, sort=self.sort_column, reverse=self.sort_reverse, filter_text=self.filter_text,
            only_user=self.me if self.only_mine else None, tree=self.tree_view,
            trends=self.monitor.trends, leaks=self.monitor.leaks, ascii=self.ascii)
        return found, process_count(snap)

    def job_sources(self) -> list[JobSource]:
        """The jobs the job view groups rows under (the many-host view's are each host's)."""
        snap = self.monitor.snapshot
        return [] if snap is None else [JobSource(snap, self.monitor.trends, judgements=self.monitor.judgements)]

    def _render_status(self, shown: int, total: int) -> None:
        arrow = ("v" if self.sort_reverse else "^") if self.ascii else ("▼" if self.sort_reverse else "▲")
        parts = [Content.styled("PROCESSES", "bold"),
                 Content(f"{shown}" if shown == total else f"{shown} of {total}"),
                 Content.styled(f"sort {COLUMNS[self.sort_column].label} {arrow}", "$text-muted")]
        if self.tree_view:
            parts.append(Content.styled("tree", "$accent"))
        if self.job_view:
            parts.append(Content.styled("jobs (←/→ fold)" if not self.ascii else "jobs (left/right fold)",
                                        "$accent"))
        if self.owner_view:
            parts.append(Content.styled("owners (←/→ fold)" if not self.ascii else "owners (left/right fold)",
                                        "$accent"))
        if self.only_mine:
            parts.append(Content.styled(f"only {self.me}", "$accent"))
        if self.filter_text:
            parts.append(Content.styled(f"filter “{self.filter_text}”", "$accent"))
        self.query_one("#table-status", Line).show(Content("  ").join(parts))

    # -- alerts ------------------------------------------------------------------------------

    def show_notices(self, notices: Sequence[Notice]) -> None:
        """The alert line brought up to what is wrong now (``notices``: newest first)."""
        notices = tuple(notices)
        if notices != self.notices:
            came_or_went = bool(notices) != bool(self.notices)
            self.notices = notices
            if self.is_mounted:
                self._show_notices()
                if came_or_went and self.layout_mode == "tiny":  # the line takes a row: the GPUs may fold
                    self.render_snapshot()

    def _show_notices(self) -> None:
        found = self.query("#alerts")
        if not found and not self.notices:
            return  # the alert line is mounted when something first goes wrong: most monitors never need it
        from gputui.ui.widgets.alert_line import AlertLine

        line = next(iter(found.results(AlertLine)), None)
        if line is None:
            line = AlertLine(id="alerts")
            self.mount(line, before=self.query_one(KeyBar))
        line.show_notices(self.notices, self.alerts_key())

    def alerts_key(self) -> str:
        """The key that opens the alert list, as the user mapped it and the footer shows keys."""
        keymap = getattr(self.app, "keymap", {})
        key = keymap.get("alerts", "exclamation_mark").split(",")[0]
        return self.app.get_key_display(Binding(key, "show_alerts"))

    def toasts_fit(self) -> bool:
        """Whether toasts have room above the process table: over the devices and the charts of a big pane
        (at least a GPU's two lines and the charts' three), while this screen is the one showing."""
        snap = self.monitor.snapshot
        stack = self.app.screen_stack
        on_top = bool(stack) and stack[-1] is self  # (not under a screen of its own, where toasts would go)
        # The pane's own layout: the first alerts may come before this screen has laid itself out.
        big = layout_for(self.app.size.width, self.app.size.height) in ("normal", "wide")
        return on_top and big and self.charts_on and (snap is None or bool(snap.devices))

    def _place_toasts(self) -> None:
        """Toasts over the charts, and up over the devices where more are shown, never lower than the devices
        and charts reach, where they fit; else where Textual puts them (the keys' answers: they come when the
        user asks, and go in seconds)."""
        rack = next(iter(self.query("#textual-toastrack")), None)  # none where notifications are off (tests)
        if rack is None:
            return
        top = self.query_one("#top").region
        placed = (self.size.height - top.bottom, top.height) if self.toasts_fit() else None
        if placed == self.toasts_placed:
            return
        self.toasts_placed = placed
        rack.set_class(placed is not None, "-above-table")
        # Textual's rack stands on the footer, right-aligned, the newest toast lowest: lifted onto the table's top.
        rack.styles.margin = None if placed is None else (0, 0, placed[0], 0)
        rack.styles.max_height = None if placed is None else placed[1]

    # -- what the selected row is ------------------------------------------------------------

    def selected_row(self) -> table_rows.Row | None:
        table = self.query_one(ProcessTable)
        return table.rows_by_key.get(table.selected_key or "")

    def target_process(self) -> GpuProcess | None:
        row = self.selected_row()
        return None if row is None else row.process

    def signal_target(self) -> Target | None:
        """Who a signal key would signal: the selected GPU process, or a probed process NVML does
        not list (its probe was found here, so its pid is a local one)."""
        table = self.query_one(ProcessTable)
        row = table.rows_by_key.get(table.selected_key or "")
        if row is None:
            return None
        # The process's start time as sampled pins down which process the user chose; never one read
        # now, which would be whichever process has the pid now. Without it, send() refuses.
        if row.ended is not None:
            return None  # gone: its pid may already be another process's
        if row.process is not None:
            p = row.process
            return Target(p.pid, p.local_pid,
                          f"{' '.join(p.command) or p.name or '?'}  (user {p.user or '?'})", p.started_at)
        if row.report is not None:
            command = " ".join(row.report.command) or f"probed process {row.pid}"
            return Target(row.pid, row.pid, f"{command}  (probed, not listed by NVML)",
                          None if row.probed is None else row.probed.started_at)
        return None

    def probe_target(self) -> ProbeTarget | None:
        """Whom the probe keys would attach to or detach from: the process a signal would go to."""
        row = self.selected_row()
        target = self.signal_target()
        if row is None or target is None:
            return None
        # A process with a probe uses torch whatever its map said; one without: as the collector read it.
        uses_torch = True if row.report is not None else None if row.process is None else row.process.uses_torch
        return ProbeTarget(target, probed=row.report is not None, uses_torch=uses_torch)

    def why_no_signal_target(self, name: str) -> str:
        """Why the key of signal ``name`` found nothing to signal, in words true of the selected row."""
        table = self.query_one(ProcessTable)
        row = table.rows_by_key.get(table.selected_key or "")
        if row is not None and row.ended is not None:
            return f"Process {row.pid} has ended (out of memory): there is nothing to signal."
        if row is not None and row.parent is not None:
            # A tree parent (torchrun, a shell) holds no GPU memory: only GPU processes are
            # signalled from here, but its pid is worth giving for a kill by hand.
            command = command_line(row.parent.command, row.parent.name)
            return (f"Process {row.pid} ({command}) is a parent in the tree, not a GPU process: gputui "
                    f"signals GPU processes only. Select one under it, or signal it yourself: "
                    f"{kill_command(name, row.pid)}")
        return "Select a process first."

    # -- actions -----------------------------------------------------------------------------

    def filter_box(self) -> Input | None:
        """The filter box, once `/` has been pressed."""
        found = self.query("#filter").results(Input)
        return next(found, None)

    def action_filter(self) -> None:
        box = self.filter_box()
        if box is None:
            box = Input(placeholder="filter: command, user or pid (Enter keeps it, Esc clears)",
                        tooltip="Filter processes as you type: command, user or pid", id="filter")
            self.mount(box, before=self.query_one(ProcessTable))
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.filter_box()
        if box is not None and (box.display or self.filter_text):
            box.value = ""
            box.display = False
            self.filter_text = ""
            self.query_one(ProcessTable).focus()
            self.render_table()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.render_table()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not self.filter_text:
            event.input.display = False
        self.query_one(ProcessTable).focus()

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        if column not in COLUMNS:
            return
        if reverse is None:
            # Numbers read best biggest first; names alphabetically.
            reverse = COLUMNS[column].numeric and column not in ("pid", "gpu")
        self.sort_column, self.sort_reverse = column, reverse
        self._set_columns()
        self.render_table()

    def action_sort_step(self, step: int) -> None:
        ids = list(self.query_one(ProcessTable).column_ids)
        current = ids.index(self.sort_column) if self.sort_column in ids else 0
        self.sort_by(ids[(current + step) % len(ids)])

    def action_sort_reverse(self) -> None:
        self.sort_by(self.sort_column, not self.sort_reverse)

    def on_process_table_sort_requested(self, message: ProcessTable.SortRequested) -> None:
        if message.column == self.sort_column:
            self.action_sort_reverse()
        else:
            self.sort_by(message.column)

    def on_process_table_detail_requested(self, message: ProcessTable.DetailRequested) -> None:
        row = self.query_one(ProcessTable).rows_by_key.get(message.key)
        if row is not None and row.job is not None:
            self.post_message(OpenJobDetail(row.job.key, row.host))
            return
        if row is not None and row.group == row.key:  # an owner's line: Enter folds or unfolds it
            self.on_process_table_fold_requested(ProcessTable.FoldRequested(row.key, row.key not in self.folded))
            return
        if row is None or row.process is None:
            self.notify("This parent process holds no GPU memory: no GPU details to show.",
                        severity="information")
            return
        self.post_message(OpenProcessDetail(row.process, row.host))

    def action_toggle_tree(self) -> None:
        self.tree_view = not self.tree_view
        self.job_view = self.owner_view = False  # one grouping at a time
        self.render_table()

    def action_toggle_jobs(self) -> None:
        self.job_view = not self.job_view
        self.tree_view = self.owner_view = False
        self.render_table()

    def action_toggle_owners(self) -> None:
        self.owner_view = not self.owner_view
        self.tree_view = self.job_view = False
        self.render_table()

    def action_show_waste(self) -> None:
        self.post_message(OpenWaste())

    def on_process_table_fold_requested(self, message: ProcessTable.FoldRequested) -> None:
        """Fold a job (its line stays, selected) or unfold it."""
        if message.fold == (message.key in self.folded):
            return
        if message.fold:
            self.folded.add(message.key)
            self.query_one(ProcessTable).selected_key = message.key  # its rows go: the selection stays on it
        else:
            self.folded.discard(message.key)
        self.render_table()

    def action_toggle_mine(self) -> None:
        self.only_mine = not self.only_mine
        self.render_table()

    def action_toggle_charts(self) -> None:
        self.charts_on = not self.charts_on
        if self.charts_on and self.layout_mode not in ("normal", "wide"):
            self.notify("Charts need a taller or wider pane (at least 100x32).")
        self.render_snapshot()

    def action_next_gpu(self) -> None:
        snap = self.monitor.snapshot
        if snap is None or not snap.devices:
            return
        indices = [d.index for d in snap.devices]
        if self.gpus_folded and not self.device_picked:  # the folded line shows each GPU in turn
            self.pick_device(indices[0])
            return
        if self.gpus_folded and self.chart_device == indices[-1]:  # after the last one, all of them again
            self.device_picked = False
            self.render_snapshot()
            return
        here = indices.index(self.chart_device) if self.chart_device in indices else -1
        self.pick_device(indices[(here + 1) % len(indices)])

    def on_device_list_chosen(self, message: DeviceList.Chosen) -> None:
        self.pick_device(message.index)

    def pick_device(self, index: int) -> None:
        """Chart GPU ``index`` and mark it; in a pane too small for every GPU, scroll to it."""
        self.chart_device = index
        self.device_picked = True
        self.render_snapshot()
        self.query_one(DeviceList).bring_into_view(index)

    def on_device_list_redraw(self, message: DeviceList.Redraw) -> None:
        self.render_snapshot()


def process_count(snap: Snapshot) -> int:
    """GPU processes, and probed processes NVML does not list: rows of their own, counted alike."""
    listed = {p.own_pid for p in snap.processes}
    return len(snap.processes) + sum(1 for r in snap.probes if r.pid not in listed)
