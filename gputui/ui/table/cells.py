"""The process table's cells: each row's text and style, column by column (the words themselves are
analysis/vocabulary.py's), and the trend figures they show.

Pure logic (no Textual): the rows (gputui.ui.table.rows) work a row's cells out only when the table draws it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.analysis.history import ProcessKey
from gputui.analysis.vocabulary import command_line
from gputui.model import PROCESS_OK, EndedProcess, GpuProcess, HostProcess, ProbeReport
from gputui.model.record import Record
from gputui.model.verdicts import (
    LEAK_GROWING,
    LEAK_LEAK,
    TREND_GROWING,
    LeakVerdict,
    ProcessTrend,
)


@dataclass(frozen=True, eq=False, repr=False)
class Context(Record):
    """Everything besides the process that a cell needs."""

    taken_at: float
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)
    probes: dict[int, ProbeReport] = field(default_factory=dict)  # by own pid
    ascii: bool = False
    leaks: Mapping[int, LeakVerdict] = field(default_factory=dict)  # by own pid
    host: str | None = None  # the many-host view's host of these processes; None: this machine


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
    cells = {c: "" for c in vocab.COLUMNS}
    cells.update(host=host or "", pid=str(h.pid), user=h.user or units.NA, gpu="-",
                 command=prefix + command_line(h.command, h.name))
    return cells, {"pid": "$text-muted", "user": "$text-muted", "command": "$text-muted"}


def probe_only_cells(report: ProbeReport, ctx: Context, proc: HostProcess | None) -> tuple[dict, dict]:
    """Texts and styles of every column for a probed process NVML does not list."""
    leak = ctx.leaks.get(report.pid)
    mark, mark_style = probe_mark(leak, ascii=ctx.ascii)
    trend, trend_style = trend_text(None, ascii=ctx.ascii, leak=leak, now=ctx.taken_at)
    trend_mark = trend_text(None, ascii=ctx.ascii, leak=leak, now=ctx.taken_at, short=True)[0]
    gpu_memory = [d.allocator.reserved for d in report.devices if d.allocator is not None]
    last = report.steps[-1] if report.steps else None
    cells = {c: "" for c in vocab.COLUMNS}
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


def ended_trend(ended: EndedProcess, ascii: bool = False) -> str:
    """The trend cell of an ended process: "✗ OOM 03:12"."""
    return f"{'x' if ascii else '✗'} OOM {units.clock_time(ended.ended_at)}"


def ended_cells(ended: EndedProcess, ctx: Context) -> tuple[dict, dict]:
    """Texts and styles of every column for a probed process an OOM ended."""
    report = ended.report
    cells = {c: "" for c in vocab.COLUMNS}
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
