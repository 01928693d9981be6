"""The process table's rows: which columns exist, how rows are filtered, sorted and laid out as a tree.

Pure logic over a Snapshot (no Textual), so sorting, filtering and the tree can be tested directly; the
ProcessTable widget only turns these rows into cells and updates the ones that changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.analysis.history import ProcessKey
from gputui.analysis.vocabulary import command_line, owner_of
from gputui.model import PROCESS_OK, EndedProcess, GpuProcess, HostProcess, Job, ProbeReport, Snapshot
from gputui.model.record import Record
from gputui.model.verdicts import (
    LEAK_GROWING,
    LEAK_LEAK,
    TREND_GROWING,
    LeakVerdict,
    ProcessTrend,
)

# What a column sorts by (booleans and ints count as numbers); None: unknown, always last.
SortValue = float | str | tuple[int, int]


@dataclass(frozen=True, eq=False, repr=False)
class Column(Record):
    """One column of the process table."""

    id: str
    label: str
    sort_key: Callable[[GpuProcess, "Context"], SortValue | None] | None
    numeric: bool = False  # right-aligned, sorts biggest first


@dataclass(frozen=True, eq=False, repr=False)
class Context(Record):
    """Everything besides the process that a cell needs."""

    taken_at: float
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)
    probes: dict[int, ProbeReport] = field(default_factory=dict)  # by own pid
    ascii: bool = False
    leaks: Mapping[int, LeakVerdict] = field(default_factory=dict)  # by own pid
    host: str | None = None  # the many-host view's host of these processes; None: this machine



def owners_beyond_users(rows: Iterable[Row]) -> bool:
    """Whether any row's process has an owner besides its user (a pod, container, Slurm job, unit):
    without one the OWNER column would only repeat USER, and is left out."""
    return any(r.process is not None and r.process.owner is not None and r.process.owner.key[0] != "user"
               for r in rows)


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


@dataclass(slots=True, eq=False)
class Row:
    """One line of the table: a GPU process on one device, (tree view) a parent holding no GPU, or
    (job view) a job.

    Its cells are formatted when first asked for: the table draws only the rows in view, so with a
    thousand processes the other rows cost their sorting and little more.
    """

    key: str
    pid: int
    device_index: int | None
    look: Callable[[], tuple[dict, dict]] = field(repr=False)  # -> (cells, styles)
    host: str | None = None  # the many-host view's host of the process; None: this machine
    process: GpuProcess | None = None
    parent: HostProcess | None = None
    report: ProbeReport | None = None  # a probed process's report (the only source when NVML lists it not)
    probed: HostProcess | None = None  # /proc's view of a probed process NVML does not list, as sampled
    trend: str = ""  # the trend cell's text, known up front: the column is as wide as the widest
    job: Job | None = None  # the job view's line of a job (gputui.ui.job_rows)
    ended: EndedProcess | None = None  # a probed process an OOM ended (its report in ``report``)
    group: str | None = None  # in the job view: the key of the job line this row is (or is under)
    _looked: tuple[dict, dict] | None = field(default=None, init=False, repr=False)

    @property
    def cells(self) -> dict:
        """Column id -> text."""
        if self._looked is None:
            self._looked = self.look()
        return self._looked[0]

    @property
    def styles(self) -> dict:
        """Column id -> style (theme variables, e.g. "$warning")."""
        if self._looked is None:
            self._looked = self.look()
        return self._looked[1]


def row_key(pid: int, device_index: int | None, host: str | None = None) -> str:
    """A row's identity: pids and GPU indices repeat across hosts, so the host is part of it."""
    key = f"{pid}/{'-' if device_index is None else device_index}"
    return key if host is None else f"{host}//{key}"


def trend_text(mark: ProcessTrend | None, *, ascii: bool = False,
               leak: LeakVerdict | None = None, now: float | None = None,
               short: bool = False) -> tuple[str, str]:
    """The trend cell and its style: rising memory gets an arrow, its rate per minute and, when a
    forecast exists, the time until the device runs out ("▲7.5G/m 85s"). ``short`` (narrow panes)
    leaves the rate out ("▲85s")."""
    rate, oom_in = growth_of(mark, leak, now)
    if rate is not None:
        arrow = "^" if ascii else "▲"
        text = arrow if short else arrow + units.size_short(rate * 60) + "/m"
        if oom_in is not None:
            text += ("" if short else " ") + units.span_short(oom_in)
        return (text, "$error" if oom_in is not None else "$warning")
    if mark is None or mark.verdict in ("unknown", "steady"):
        return ("", "")
    if mark.verdict == TREND_GROWING:  # growing, rate not known yet
        return ("^" if ascii else "▲", "$warning")
    if mark.verdict == "warming_up":
        return ("/" if ascii else "↗", "$text-muted")
    if mark.verdict == "sawtooth":
        return ("~", "$text-muted")
    return ("", "")


GROWTH_STATES = LEAK_GROWING


def growth_of(mark: ProcessTrend | None, leak: LeakVerdict | None,
              now: float | None = None) -> tuple[float | None, float | None]:
    """(bytes per second, seconds to OOM) of a growing process, or (None, None).

    The rate is NVML's where its trend says growing, else the probe's per-step growth over its step
    time; the forecast prefers the probe's (it knows the cache and the step's peak) to NVML's.
    """
    rate = None
    if mark is not None and mark.verdict == TREND_GROWING and mark.rate is not None and mark.rate > 0:
        rate = mark.rate
    oom_in = None
    if leak is not None and leak.state in GROWTH_STATES:
        if rate is None:
            per_step = leak.growth_per_step
            if per_step and per_step > 0 and leak.step_time:
                rate = per_step / leak.step_time
        oom_in = leak.seconds_to_oom(now)
    if rate is None:
        return (None, None)
    if oom_in is None and mark is not None and mark.verdict == TREND_GROWING:
        oom_in = mark.time_to_oom
    return (rate, oom_in)



def probe_mark(leak: LeakVerdict | None, *, ascii: bool = False) -> tuple[str, str]:
    """The probe cell of a probed process and its style: a dot, or the growing part's letter when its
    leak verdict finds growth (the detail screen spells it out)."""
    if leak is None or leak.state not in GROWTH_STATES:
        return ("*" if ascii else "●", "$accent")
    letter = vocab.PART_LETTERS.get(leak.category or "", "!")
    return (letter, "bold $error" if leak.state == LEAK_LEAK else "bold $warning")


def process_cells(p: GpuProcess, ctx: Context) -> tuple[dict, dict]:
    """Texts and styles of every column for one GPU process."""
    leak = ctx.leaks.get(p.own_pid)
    mark_of_trend = ctx.trends.get((p.pid, p.device_index))
    trend, trend_style = trend_text(mark_of_trend, ascii=ctx.ascii, leak=leak, now=ctx.taken_at)
    trend_mark = trend_text(mark_of_trend, ascii=ctx.ascii, leak=leak, now=ctx.taken_at, short=True)[0]
    probed = p.own_pid in ctx.probes
    mark, mark_style = probe_mark(leak, ascii=ctx.ascii) if probed else ("", "")
    cells = {
        **vocab.process_cells(p, ctx.taken_at),
        "host": ctx.host or "",
        "probe": mark,
        "trend": trend,
        "trend_mark": trend_mark,
        "started": units.clock_time(p.started_at, date=True),
    }
    styles = {"trend": trend_style, "trend_mark": trend_style} if trend_style else {}
    if probed:
        styles["probe"] = mark_style
    if p.state != PROCESS_OK:
        styles["command"] = "$text-muted"
    return cells, styles


def parent_cells(h: HostProcess, prefix: str = "", host: str | None = None) -> tuple[dict, dict]:
    """Texts and styles of a tree's parent that holds no GPU memory (``prefix``: its branch)."""
    cells = {c: "" for c in COLUMNS}
    cells.update(host=host or "", pid=str(h.pid), user=h.user or units.NA, gpu="-",
                 command=prefix + command_line(h.command, h.name))
    return cells, {"pid": "$text-muted", "user": "$text-muted", "command": "$text-muted"}


def matches(p: GpuProcess, text: str, host: str | None = None) -> bool:
    """The `/` filter: a case-insensitive match on command, name, user, owner, pid or host."""
    if not text:
        return True
    needle = text.lower()
    haystack = (" ".join(p.command), p.name or "", p.user or "", owner_of(p), str(p.pid), host or "")
    return any(needle in part.lower() for part in haystack)


def sort_processes(procs: Iterable[GpuProcess], column: str, reverse: bool, ctx: Context) -> list[GpuProcess]:
    """Sorted by one column; unknown values always last, ties by pid then device."""
    return [p for p, _ in _sorted([(p, ctx) for p in procs], column, reverse)]


Placed = tuple[GpuProcess, Context]  # a process and the context of its host


def _sorted(placed: list[Placed], column: str, reverse: bool) -> list[Placed]:
    """Processes of one or several hosts sorted by one column; unknown values last, ties by host,
    pid, then device."""
    key = COLUMNS[column].sort_key
    valued = [(key(p, ctx) if key else None, (p, ctx)) for p, ctx in placed]  # each value worked out once

    def tie(pc: Placed) -> tuple[str, int, int]:
        return (pc[1].host or "", pc[0].pid, pc[0].device_index)

    known = [(value, pc) for value, pc in valued if value is not None]
    unknown = [pc for value, pc in valued if value is None]
    known.sort(key=lambda vp: tie(vp[1]))
    known.sort(key=lambda vp: vp[0], reverse=reverse)
    unknown.sort(key=tie)
    return [pc for _, pc in known] + unknown


def build_rows(snapshot: Snapshot, *, sort: str = "gpu_memory", reverse: bool = True,
               filter_text: str = "", only_user: str | None = None, tree: bool = False,
               trends: Mapping | None = None, ascii: bool = False,
               leaks: Mapping | None = None, host: str | None = None) -> list[Row]:
    """The rows to show, in order: GPU processes, probed processes NVML does not list, then the probed
    processes an OOM ended.

    ``trends`` holds NVML memory trends by (pid, device index), ``leaks`` the probed processes'
    leak verdicts by pid; ``host`` names the host of them all in the many-host view.
    """
    ctx = _context(snapshot, trends, leaks, ascii, host)
    procs = [p for p in snapshot.processes
             if matches(p, filter_text, host) and (only_user is None or p.user == only_user)]
    procs = sort_processes(procs, sort, reverse, ctx)
    rows = [_process_row(p, ctx) for p in procs] if not tree else _tree_rows(procs, snapshot.parents, ctx)
    return rows + _unlisted_rows(snapshot, ctx, filter_text, only_user) + _ended_rows(
        snapshot, ctx, filter_text, only_user)


@dataclass(frozen=True, eq=False, repr=False)
class HostRows(Record):
    """One host's part of the many-host view's table: its snapshot and its own verdicts."""

    name: str
    snapshot: Snapshot
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)
    leaks: Mapping[int, LeakVerdict] = field(default_factory=dict)


def build_host_rows(hosts: Sequence[HostRows], *, sort: str = "gpu_memory", reverse: bool = True,
                    filter_text: str = "", only_user: str | None = None, tree: bool = False,
                    ascii: bool = False) -> list[Row]:
    """The many-host view's rows: every host's GPU processes sorted together (a tree stays within
    its host, hosts in the order named), then the probed processes NVML does not list."""
    if tree:
        return [row for h in hosts for row in build_rows(
            h.snapshot, sort=sort, reverse=reverse, filter_text=filter_text, only_user=only_user,
            tree=True, trends=h.trends, ascii=ascii, leaks=h.leaks, host=h.name)]
    contexts = [(h, _context(h.snapshot, h.trends, h.leaks, ascii, h.name)) for h in hosts]
    placed = [(p, ctx) for h, ctx in contexts for p in h.snapshot.processes
              if matches(p, filter_text, h.name) and (only_user is None or p.user == only_user)]
    rows = [_process_row(p, ctx) for p, ctx in _sorted(placed, sort, reverse)]
    for h, ctx in contexts:
        rows += _unlisted_rows(h.snapshot, ctx, filter_text, only_user)
    return rows


def _context(snapshot: Snapshot, trends: Mapping | None, leaks: Mapping | None, ascii: bool,
             host: str | None) -> Context:
    probes: dict[int, ProbeReport] = {r.pid: r for r in snapshot.probes}
    return Context(snapshot.taken_at, trends or {}, probes, ascii, leaks or {}, host)


def _unlisted_rows(snapshot: Snapshot, ctx: Context, filter_text: str, only_user: str | None) -> list[Row]:
    """Rows of the probed processes NVML does not list."""
    rows: list[Row] = []
    listed = {p.own_pid for p in snapshot.processes}
    # A probe the driver does not know of (a CPU-only job, no driver) is still a process worth
    # seeing. Probes are found in this user's own socket directory, so "only mine" keeps them.
    seen = {h.pid: h for h in snapshot.probed}
    for report in sorted(snapshot.probes, key=lambda r: r.pid):
        proc = seen.get(report.pid)
        if report.pid not in listed and _report_matches(report, filter_text, proc, ctx.host) and (
                only_user is None or proc is None or proc.user == only_user):
            rows.append(probe_only_row(report, ctx, proc))
    return rows


def probe_only_row(report: ProbeReport, ctx: Context, proc: HostProcess | None = None) -> Row:
    """A row for a probed process that NVML does not list, from its probe's own report and what
    /proc says of it (``proc``: user, CPU, RSS, start time)."""
    leak = ctx.leaks.get(report.pid)
    trend = trend_text(None, ascii=ctx.ascii, leak=leak, now=ctx.taken_at)[0]
    key = f"{report.pid}/probe" if ctx.host is None else f"{ctx.host}//{report.pid}/probe"
    return Row(key, report.pid, None, lambda: probe_only_cells(report, ctx, proc),
               host=ctx.host, report=report, probed=proc, trend=trend)


def probe_only_cells(report: ProbeReport, ctx: Context, proc: HostProcess | None) -> tuple[dict, dict]:
    """Texts and styles of every column for a probed process NVML does not list."""
    leak = ctx.leaks.get(report.pid)
    mark, mark_style = probe_mark(leak, ascii=ctx.ascii)
    trend, trend_style = trend_text(None, ascii=ctx.ascii, leak=leak, now=ctx.taken_at)
    trend_mark = trend_text(None, ascii=ctx.ascii, leak=leak, now=ctx.taken_at, short=True)[0]
    gpu_memory = [d.allocator.reserved for d in report.devices if d.allocator is not None]
    last = report.steps[-1] if report.steps else None
    cells = {c: "" for c in COLUMNS}
    host_memory = proc.host_memory if proc is not None and proc.host_memory is not None else \
        getattr(last, "host_memory", None)
    started = None if proc is None or proc.started_at is None else ctx.taken_at - proc.started_at
    cells.update(
        host=ctx.host or "", pid=str(report.pid), probe=mark,
        user=(proc.user if proc is not None else None) or units.NA,
        gpu=probe_device_text(report), gpu_memory=units.size_short(sum(gpu_memory)) if gpu_memory else "-",
        trend=trend, trend_mark=trend_mark, host_memory=units.size_short(host_memory),
        cpu=units.NA if proc is None or proc.cpu_percent is None else f"{proc.cpu_percent:.0f}%",
        elapsed=units.elapsed(started) if started is not None else "",
        command=command_line(report.command) if report.command else f"[probed process {report.pid}]",
    )
    styles = {"probe": mark_style, "gpu": "$text-muted"}
    if trend_style:
        styles["trend"] = styles["trend_mark"] = trend_style
    return cells, styles


def _ended_rows(snapshot: Snapshot, ctx: Context, filter_text: str, only_user: str | None) -> list[Row]:
    """Rows of the probed processes an OOM ended, the latest first: kept in view with their reports."""
    return [ended_row(e, ctx) for e in reversed(snapshot.ended)
            if _report_matches(e.report, filter_text, None, ctx.host) and (only_user is None or e.user == only_user)]


def ended_row(ended: EndedProcess, ctx: Context) -> Row:
    """A row for a probed process an OOM ended: where it was, what it held, and when it failed."""
    trend = ended_trend(ended, ctx.ascii)
    key = f"{ended.pid}/oom" if ctx.host is None else f"{ctx.host}//{ended.pid}/oom"
    return Row(key, ended.pid, None, lambda: ended_cells(ended, ctx), host=ctx.host, report=ended.report,
               trend=trend, ended=ended)


def ended_trend(ended: EndedProcess, ascii: bool = False) -> str:
    """The trend cell of an ended process: "✗ OOM 03:12"."""
    return f"{'x' if ascii else '✗'} OOM {units.clock_time(ended.ended_at)}"


def ended_cells(ended: EndedProcess, ctx: Context) -> tuple[dict, dict]:
    """Texts and styles of every column for a probed process an OOM ended."""
    report = ended.report
    cells = {c: "" for c in COLUMNS}
    cells.update(
        host=ctx.host or "", pid=str(ended.pid), probe="x" if ctx.ascii else "✗", user=ended.user or units.NA,
        gpu=",".join(str(i) for i in ended.devices) or probe_device_text(report), type="end",
        gpu_memory=units.size_short(ended.gpu_memory) if ended.gpu_memory is not None else "-",
        trend=ended_trend(ended, ctx.ascii), trend_mark="OOM",
        command=command_line(report.command) if report.command else f"[probed process {ended.pid}]",
    )
    bad = "$error"
    return cells, {c: bad for c in ("probe", "trend", "trend_mark")} | {
        c: "$text-muted" for c in ("pid", "user", "gpu", "type", "gpu_memory", "command")}


def probe_device_text(report: ProbeReport) -> str:
    """Where an unlisted probed process computes: "cpu", or "-" when the driver cannot say."""
    if all(d.device == "cpu" for d in report.devices):
        return "cpu"
    return "-"


def _report_matches(report: ProbeReport, text: str, proc: HostProcess | None = None,
                    host: str | None = None) -> bool:
    if not text:
        return True
    needle = text.lower()
    user = (proc.user or "") if proc is not None else ""
    return any(needle in part.lower() for part in (" ".join(report.command), str(report.pid), user, host or ""))


def _process_row(p: GpuProcess, ctx: Context, prefix: str = "") -> Row:
    def look() -> tuple[dict, dict]:
        cells, styles = process_cells(p, ctx)
        if prefix:
            cells["command"] = prefix + cells["command"]
        return cells, styles

    mark, leak = ctx.trends.get((p.pid, p.device_index)), ctx.leaks.get(p.own_pid)
    trend = "" if mark is None and leak is None else \
        trend_text(mark, ascii=ctx.ascii, leak=leak, now=ctx.taken_at)[0]
    return Row(row_key(p.pid, p.device_index, ctx.host), p.pid, p.device_index, look, host=ctx.host,
               process=p, report=ctx.probes.get(p.own_pid), trend=trend)


# A tree's branches (tee, last, pipe, blank), by --ascii.
BRANCHES = {False: ("├─ ", "└─ ", "│  ", "   "), True: ("|- ", "`- ", "|  ", "   ")}


def _tree_rows(procs: list[GpuProcess], parents: tuple[HostProcess, ...], ctx: Context) -> list[Row]:
    """Processes under their parents (nvitop's tree): siblings keep the chosen sort order."""
    def local(p: GpuProcess) -> int:
        return p.local_pid if p.local_pid is not None else p.pid

    by_pid: dict[int, list[GpuProcess]] = {}
    for p in procs:  # already sorted: the first row of a pid decides its place among siblings
        by_pid.setdefault(local(p), []).append(p)
    hosts = {h.pid: h for h in parents}
    parent_of: dict[int, int | None] = {h.pid: h.ppid for h in parents}
    for pid, group in by_pid.items():
        parent_of[pid] = group[0].ppid

    # Keep only the ancestors of the processes shown, so a filter also trims the tree.
    keep: set[int] = set()
    for pid in by_pid:
        node: int | None = pid
        while node is not None and node not in keep and (node in by_pid or node in hosts):
            keep.add(node)
            node = parent_of.get(node)

    order = {pid: i for i, pid in enumerate(by_pid)}
    children: dict[int | None, list[int]] = {}
    for pid in keep:
        parent = parent_of.get(pid)
        children.setdefault(parent if parent in keep else None, []).append(pid)
    for kids in children.values():
        # GPU processes in sort order first would scatter the tree; order siblings by the best
        # rank found beneath them, so the heaviest branch comes first.
        kids.sort(key=lambda pid: (_best_rank(pid, children, order), pid))

    tee, last, pipe, blank = BRANCHES[ctx.ascii]
    rows: list[Row] = []

    visited: set[int] = set()

    def walk(pid: int, lead: str, branch: str) -> None:
        if pid in visited:
            return
        visited.add(pid)
        if pid in by_pid:
            for p in by_pid[pid]:
                rows.append(_process_row(p, ctx, lead + branch))
        else:
            rows.append(Row(row_key(pid, None, ctx.host), pid, None,
                            partial(parent_cells, hosts[pid], lead + branch, ctx.host), host=ctx.host,
                            parent=hosts[pid]))
        kids = children.get(pid, [])
        below = lead + ((blank if branch == last else pipe) if branch else "")
        for i, kid in enumerate(kids):
            walk(kid, below, last if i == len(kids) - 1 else tee)

    for root in children.get(None, []):
        walk(root, "", "")
    for pid in sorted(keep - visited):  # only reachable through a ppid loop: show them flat
        walk(pid, "", "")
    return rows


def _best_rank(pid: int, children: dict, order: dict, seen: frozenset = frozenset()) -> int:
    best = order.get(pid, len(order))
    for kid in children.get(pid, []):
        if kid not in seen:  # a ppid loop (pid reuse) must not recurse forever
            best = min(best, _best_rank(kid, children, order, seen | {pid}))
    return best
