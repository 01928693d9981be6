"""The job view's rows: the process table's rows grouped under one line per job, each job collapsible.

Pure logic over rows already filtered and sorted (gputui.ui.table.rows), so sorting and the filter work inside
the groups as they do outside: a job takes the place of its first row in that order, and its rows follow
it in theirs. Only jobs spread over several ranks or GPUs (``Job.spread``) get a line: any other
process is listed as before. A job line's cells, and the analysis they need, are worked out only when
the line is drawn, as a process row's are.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gputui import units
from gputui.analysis import robust
from gputui.analysis.history import ProcessKey
from gputui.model import Job, Snapshot
from gputui.model.job_verdicts import JobAnalysis
from gputui.model.judgement import Judgements
from gputui.model.record import Record
from gputui.model.verdicts import ProcessTrend
from gputui.ui.table.columns import COLUMNS
from gputui.ui.table.rows import BRANCHES, Row

# A job line's mark: open (its rows shown under it) or folded, by --ascii.
MARKS = {False: ("▾ ", "▸ "), True: ("v ", "> ")}


@dataclass(frozen=True, eq=False, repr=False)
class JobSource(Record):
    """One host's jobs and what their lines need: its snapshot, its NVML trends (for the first OOM), and
    the sampling pipeline's judgements where it made them with those trends."""

    snapshot: Snapshot
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)
    host: str | None = None  # the many-host view's host; None: this machine
    judgements: Judgements | None = None  # None: none made (each line judges its job)


def job_row_key(job: Job, host: str | None = None) -> str:
    """A job line's key: stable while the job lives (Job.key), apart from any process row's."""
    return f"job:{job.key}" if host is None else f"{host}//job:{job.key}"


def group_by_job(rows: Sequence[Row], sources: Sequence[JobSource], folded: Collection[str] = (), *,
                 ascii: bool = False) -> list[Row]:
    """``rows`` with each spread job's rows under a line of its own; a job whose line key is in
    ``folded`` shows its line alone. A job none of whose rows is in ``rows`` (filtered out) has no line."""
    owner: dict[tuple[str | None, int], tuple[Job, JobSource]] = {}
    for source in sources:
        for job in source.snapshot.jobs:
            if job.spread:
                for rank in job.ranks:
                    owner[(source.host, rank.pid)] = (job, source)
    if not owner:
        return list(rows)
    found: dict[str, tuple[Job, JobSource]] = {}

    def job_of(row: Row) -> str | None:
        pid = row.process.own_pid if row.process is not None else row.pid  # the pid a job knows it by
        job = owner.get((row.host, pid))
        if job is None:
            return None
        key = job_row_key(job[0], row.host)
        found.setdefault(key, job)
        return key

    return group_rows(rows, job_of, lambda key, _, shut: job_row(key, *found[key], shut=shut, ascii=ascii),
                      folded, ascii=ascii)


def group_rows(rows: Sequence[Row], key_of: Callable[[Row], str | None],
               line_of: Callable[[str, list[Row], bool], Row], folded: Collection[str] = (), *,
               ascii: bool = False) -> list[Row]:
    """``rows`` with those of one group (``key_of``: its line's key, None for a row of no group) under
    the group's line (``line_of(key, its rows, shut)``), where its first row was, in their order; a
    group whose key is in ``folded`` shows its line alone. The job view's and the owner view's."""
    order: list[Row | str] = []  # rows of no group, and the keys of groups where their first row was
    members: dict[str, list[Row]] = {}
    for row in rows:
        key = key_of(row)
        if key is None:
            order.append(row)
            continue
        if key not in members:
            members[key] = []
            order.append(key)
        members[key].append(row)
    out: list[Row] = []
    tee, last, _, _ = BRANCHES[ascii]
    for item in order:
        if isinstance(item, Row):
            out.append(item)
            continue
        group, shut = members[item], item in folded
        out.append(line_of(item, group, shut))
        if not shut:
            out += [under(row, item, last if i == len(group) - 1 else tee) for i, row in enumerate(group)]
    return out


def job_row(key: str, job: Job, source: JobSource, *, shut: bool = False, ascii: bool = False) -> Row:
    """A job's line: its worst finding, name and ranks, its GPUs, total GPU memory and mean SM %."""
    def look() -> tuple[dict, dict]:
        return job_cells(job, source, shut=shut, ascii=ascii)

    return Row(key, job.launcher_pid or job.ranks[0].pid, None, look, host=source.host, job=job, group=key)


def job_cells(job: Job, source: JobSource, *, shut: bool = False, ascii: bool = False) -> tuple[dict, dict]:
    """Texts and styles of every column for a job's line."""
    # Here, not at import: a job's words (plain.jobs) are resident memory that a machine with no job
    # spread over GPUs never needs.
    from gputui.plain.jobs import indices, rank_count, worst_finding

    analysis = job_analysis(job, source.snapshot, source.trends, source.judgements)
    worst = worst_finding(analysis)
    ranks = {r.pid for r in job.ranks}
    users = {p.user for p in source.snapshot.processes if p.own_pid in ranks and p.user}
    busy = [s.utilisation for s in analysis.slots if s.utilisation is not None]
    # The finding first: it is the news, and the command column is narrow (its end is cut).
    words = [*([worst[0]] if worst else []), job.name, rank_count(job)]
    cells = {c: "" for c in COLUMNS}
    cells.update(host=source.host or "", pid="" if job.launcher_pid is None else str(job.launcher_pid),
                 user=",".join(sorted(users)) or units.NA, gpu=indices(job.devices) or "-",
                 gpu_memory=units.size_short(job.gpu_memory), sm=units.percent(robust.mean(busy)) if busy else "",
                 command=MARKS[ascii][shut] + " · ".join(words))
    style = "bold" if worst is None else "bold $error" if worst[1] else "bold $warning"
    return cells, {"pid": "$text-muted", "gpu": "bold", "gpu_memory": "bold", "command": style}


def job_analysis(job: Job, snapshot: Snapshot, trends: Mapping[ProcessKey, ProcessTrend],
                 judgements: Judgements | None) -> JobAnalysis:
    """The sampling pipeline's findings on ``job`` (made with ``trends``), or, where it made none, the
    job judged here."""
    judged = judgements.job(job.key) if judgements is not None else None
    if judged is not None and judged.job is job:
        return judged
    # Here, not at import: a job's analysis (analysis.jobs with the advice it ranks) is 0.3 MB of resident
    # memory that a machine with no job spread over GPUs never needs.
    from gputui.analysis.jobs import analyse_job

    return analyse_job(job, snapshot, trends=trends)


def under(row: Row, group: str, branch: str) -> Row:
    """A row as it stands under its group's line (a job's, an owner's): its command on a branch."""
    looked = row.look

    def look() -> tuple[dict, dict]:
        cells, styles = looked()
        return {**cells, "command": branch + cells["command"]}, styles

    return Row(row.key, row.pid, row.device_index, look, host=row.host, process=row.process,
               parent=row.parent, report=row.report, trend=row.trend, group=group)
