"""The owner view's rows (key ``o``): the process table's rows under one line per owner (pod, container,
Slurm job, unit or user: ``Owner.key``), each owner collapsible, as the job view groups ranks.

Pure logic over rows already filtered and sorted (gputui.ui.table.rows): an owner's line takes the place of
its first row, its rows follow in their order. Rows of no GPU process (parents, probe-only) stay as
they are.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gputui import units
from gputui.analysis import robust
from gputui.analysis.vocabulary import owner_of
from gputui.model import GpuProcess
from gputui.ui.table.columns import COLUMNS
from gputui.ui.table.job_rows import MARKS, group_rows
from gputui.ui.table.rows import Row


def owner_row_key(process: GpuProcess, host: str | None = None) -> str:
    """An owner line's key: its owner's kind and name, apart from any process row's or job line's."""
    kind, who = process.owner.key if process.owner is not None else ("user", process.user or "")
    return f"owner:{kind}:{who}" if host is None else f"{host}//owner:{kind}:{who}"


def group_by_owner(rows: Sequence[Row], folded: Collection[str] = (), *, ascii: bool = False) -> list[Row]:
    """``rows`` with each owner's rows under a line of its own; an owner whose line key is in ``folded``
    shows its line alone."""
    return group_rows(rows, lambda row: None if row.process is None else owner_row_key(row.process, row.host),
                      lambda key, group, shut: owner_line(key, group, shut=shut, ascii=ascii), folded, ascii=ascii)


def owner_line(key: str, rows: Sequence[Row], *, shut: bool = False, ascii: bool = False) -> Row:
    """An owner's line: who, how many processes, its GPUs, their GPU memory and mean SM %."""
    processes = [r.process for r in rows if r.process is not None]

    def look() -> tuple[dict, dict]:
        pids = {p.own_pid for p in processes}
        memory = [p.gpu_memory for p in processes if p.gpu_memory is not None]
        busy = [float(p.sm_util) for p in processes if p.sm_util is not None]
        from gputui.plain.jobs import indices

        cells = {c: "" for c in COLUMNS}
        cells.update(host=rows[0].host or "", user=",".join(sorted({p.user for p in processes if p.user})) or units.NA,
                     owner=owner_of(processes[0]), gpu=indices(tuple({p.device_index for p in processes})),
                     gpu_memory=units.size_short(sum(memory)) if memory else units.NA,
                     sm=units.percent(robust.mean(busy)) if busy else "",
                     command=MARKS[ascii][shut] + f"{owner_of(processes[0]) or units.NA} · {len(pids)} process"
                     + ("es" if len(pids) != 1 else ""))
        return cells, {"gpu": "bold", "gpu_memory": "bold", "command": "bold"}

    return Row(key, rows[0].pid, None, look, host=rows[0].host, group=key)
