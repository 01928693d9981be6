"""The process table's rows: how they are filtered, sorted and laid out as a tree, with the probed
processes NVML does not list and those an OOM ended.

Pure logic over a Snapshot (no Textual), so sorting, filtering and the tree can be tested directly; a row's
cells are gputui.ui.table.cells', its columns gputui.ui.table.columns'; the ProcessTable widget draws the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from gputui.analysis.history import ProcessKey
from gputui.analysis.vocabulary import owner_of
from gputui.model import EndedProcess, GpuProcess, HostProcess, Job, ProbeReport, Snapshot
from gputui.model.record import Record
from gputui.model.verdicts import LeakVerdict, ProcessTrend
from gputui.ui.table.cells import (
    Context,
    ended_cells,
    ended_trend,
    parent_cells,
    probe_only_cells,
    process_cells,
    trend_text,
)
from gputui.ui.table.columns import COLUMNS


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
    job: Job | None = None  # the job view's line of a job (gputui.ui.table.job_rows)
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


def owners_beyond_users(rows: Iterable[Row]) -> bool:
    """Whether any row's process has an owner besides its user (a pod, container, Slurm job, unit):
    without one the OWNER column would only repeat USER, and is left out."""
    return any(r.process is not None and r.process.owner is not None and r.process.owner.key[0] != "user"
               for r in rows)


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
