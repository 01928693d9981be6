"""The process table's columns: which exist and what each sorts by, their widths, and which of them a
layout shows at a pane's width (their labels and widths are analysis/vocabulary.py's, --once's too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Callable

from gputui.analysis import vocabulary as vocab
from gputui.analysis.vocabulary import command_line, owner_of
from gputui.model import GpuProcess
from gputui.model.record import Record
from gputui.ui.table.cells import Context, growth_of

# What a column sorts by (booleans and ints count as numbers); None: unknown, always last.
SortValue = float | str | tuple[int, int]


@dataclass(frozen=True, eq=False, repr=False)
class Column(Record):
    """One column of the process table."""

    id: str
    label: str
    sort_key: Callable[[GpuProcess, Context], SortValue | None] | None
    numeric: bool = False  # right-aligned, sorts biggest first


def _elapsed(p: GpuProcess, ctx: Context) -> float | None:
    return None if p.started_at is None else ctx.taken_at - p.started_at


def _trend_rank(p: GpuProcess, ctx: Context) -> float | None:
    return growth_of(ctx.trends.get((p.pid, p.device_index)), ctx.leaks.get(p.own_pid))[0]


# What each column sorts by; its label, width and alignment are the vocabulary's (--once's too).
SORT_KEYS: dict[str, Callable[[GpuProcess, Context], SortValue | None]] = {
    "host": lambda p, c: c.host or "",  # the many-host view adds it
    "pid": lambda p, c: p.pid,
    "probe": lambda p, c: p.own_pid in c.probes,
    "user": lambda p, c: p.user or "",
    "owner": lambda p, c: owner_of(p),
    "gpu": lambda p, c: (p.device_index, p.gpu_instance_id or -1),
    "type": lambda p, c: p.kind,
    "gpu_memory": lambda p, c: p.gpu_memory,
    "trend": _trend_rank,
    "trend_mark": _trend_rank,
    "sm": lambda p, c: p.sm_util,
    "memory_util": lambda p, c: p.memory_util,
    "cpu": lambda p, c: p.cpu_percent,
    "host_memory": lambda p, c: p.host_memory,
    "elapsed": _elapsed,
    "started": lambda p, c: p.started_at,
    "command": lambda p, c: command_line(p.command, p.name),
}
COLUMNS: dict[str, Column] = {cid: Column(cid, vocab.COLUMNS[cid].label, key, numeric=vocab.COLUMNS[cid].right)
                              for cid, key in SORT_KEYS.items()}

# Column sets per layout. The config's `columns` replaces DEFAULT; the small layouts keep only
# the columns of theirs that the user asked for.
DEFAULT = ("pid", "probe", "user", "owner", "gpu", "type", "gpu_memory", "trend", "sm", "cpu", "host_memory",
           "elapsed", "command")
WIDE_EXTRA = ("memory_util", "started")
# From this many columns the normal layout adds MBW% (each process's share of memory bandwidth, as
# nvitop's %MBW), where the command still keeps a readable width.
MBW_FROM = 120
COMPACT = ("pid", "probe", "user", "owner", "gpu", "gpu_memory", "trend", "sm", "cpu", "command")
# Narrow panes keep the signs of trouble: the probe's leak letter and a short trend (arrow, time to
# OOM), not the SM %.
TINY = ("pid", "probe", "gpu", "gpu_memory", "trend_mark", "command")
TINY_FOR = {"trend": "trend_mark"}  # a chosen column's narrow form
KEPT = ("host",)  # in every layout where it is asked for: in the many-host view a pid alone says little


# Cells wide each column is (the command takes what is left); which columns give way first when the
# pane is too narrow to leave the command a readable width is vocab.GIVE_WAY, --once's order too.
WIDTHS = {cid: column.width for cid, column in vocab.COLUMNS.items() if cid != "command"}
COMMAND_MIN = 22
PADDING = 2  # blank cells around each column, both sides together


def column_widths(column_ids: Iterable[str], sort_column: str | None = None,
                  trend_width: int | None = None) -> dict[str, int]:
    """Cells wide each column but the command is: room for its content and for its label with
    the sort mark. ``trend_width`` is the widest trend shown now: no trend, no wasted cells."""
    widths = {}
    for cid in column_ids:
        if cid == "command":
            continue
        content = WIDTHS.get(cid, 0) if cid != "trend" or trend_width is None else trend_width
        label = len(COLUMNS[cid].label) + (2 if cid == sort_column else 0)  # " ▼"
        widths[cid] = max(content, label)
    return widths


def fixed_width(column_ids: Iterable[str], widths: Mapping[str, int] | None = None) -> int:
    widths = widths if widths is not None else WIDTHS
    return sum(widths.get(c, 0) + PADDING for c in column_ids if c != "command")


def columns_for(layout: str, chosen: tuple[str, ...] = DEFAULT, width: int | None = None, *,
                sort_column: str | None = None, trend_width: int | None = None,
                owners: bool = False) -> tuple[str, ...]:
    """The column ids shown in a layout ("tiny", "compact", "normal", "wide") and pane width. OWNER only
    with ``owners`` (``owners_beyond_users``): else it would repeat USER."""
    if not owners:
        chosen = tuple(c for c in chosen if c != "owner")
    if layout == "tiny":
        picked = tuple(TINY_FOR.get(c, c) for c in chosen if TINY_FOR.get(c, c) in TINY + KEPT) or TINY
    elif layout == "compact":
        picked = tuple(c for c in chosen if c in COMPACT + KEPT) or COMPACT
    elif layout == "wide":
        picked = _before_command(chosen, tuple(c for c in WIDE_EXTRA if c not in chosen))
    elif width is not None and width >= MBW_FROM and "memory_util" not in chosen:
        picked = _before_command(chosen, ("memory_util",))
    else:
        picked = tuple(chosen)
    if width is None or "command" not in picked or layout == "tiny":
        return picked  # the narrow set is the least worth showing: nothing more gives way
    for victim in vocab.GIVE_WAY:
        if width - fixed_width(picked, column_widths(picked, sort_column, trend_width)) >= COMMAND_MIN + PADDING + 1:
            break
        if victim in picked and len(picked) > 2:
            picked = tuple(c for c in picked if c != victim)
    return picked


def _before_command(chosen: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """The chosen columns with ``extra`` added just before the command (the last, widest one)."""
    return (tuple(c for c in chosen if c != "command") + extra
            + (("command",) if "command" in chosen else ()))
