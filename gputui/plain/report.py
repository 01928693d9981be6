"""Text for the probe commands: ``gputui probes`` (a table) and ``gputui probe PID`` (one full report).

Pure: reports in, a string out, in the same style and width rules as the snapshot text.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Callable, Sequence

from gputui import units
from gputui.analysis.phases import accounts, headline
from gputui.analysis.sites import keeper_text
from gputui.analysis.text import figures_age, headroom_lines, probe_history
from gputui.analysis.vocabulary import ASCII, UNICODE, Glyphs
from gputui.model import (
    AllocatorStats,
    Headroom,
    Job,
    MemoryCategories,
    OomRecord,
    Placement,
    ProbeReport,
    Snapshot,
    StepRecord,
)
from gputui.model.judgement import Judgements, ProcessJudgement
from gputui.plain.jobs import job_summary
from gputui.plain.render import MIN_WIDTH, probe_summary, verdict_lines
from gputui.plain.styled import Line, flow, text
from gputui.untrusted import visible_all

HOW_TO_START = (
    "Start one with `gputui run -- python train.py`, with `GPUTUI_PROBE=1 python train.py`, "
    "or by calling `gputui.probe.start()` in the training script."
)
STEPS_SHOWN = 10


def render_probe_list(reports: list[ProbeReport], unreachable: dict[int, str], *, color: bool = False,
                      ascii: bool = False, width: int = 100, jobs: Sequence[Job] = (),
                      judgements: Judgements | None = None) -> str:
    """One row per probed process: pid, rank, torch version, allocated/reserved, last step, command,
    and under it its leak verdict as ``gputui probe PID`` says it; the ranks of one job together under
    a line naming it."""
    reports, unreachable, jobs = visible_all(reports), visible_all(unreachable), visible_all(tuple(jobs))
    width = max(MIN_WIDTH, width)
    glyphs = ASCII if ascii else UNICODE
    lines: list[Line] = []
    if not reports and not unreachable:
        lines.append(text("No probed processes found.", "bold"))
        lines += flow([text(word) for word in HOW_TO_START.split(" ")], width, indent=0, gap=1)
    if reports:
        groups = _by_job(reports, jobs)
        rows = {r.pid: _list_row(r) for r in reports}
        titles = ["PID", "RANK", "TORCH", "ALLOCATED", "RESERVED", "STEP", "HOST MEM"]
        if all(row[-1] == units.NA for row in rows.values()):  # no CPU job here: GPU rows would all say n/a
            titles.pop()
            rows = {pid: row[:-1] for pid, row in rows.items()}
        widths = [max(len(t), *(len(row[i]) for row in rows.values())) for i, t in enumerate(titles)]
        header = Line()
        for title, size in zip(titles, widths):
            header.add((title.rjust(size) if title != "TORCH" else title.ljust(size)) + " ", "head")
        lines.append(header.add("COMMAND", "head").cropped(width, glyphs.ellipsis))
        for job, members in groups:
            if job is not None:
                lines.append(Line().add(job.name, "bold").add("  ").add(job_summary(job), "dim")
                             .cropped(width, glyphs.ellipsis))
            for report in members:
                row = rows[report.pid]
                line = Line().add(row[0].rjust(widths[0]) + " ", "bold").add(row[1].rjust(widths[1]) + " ")
                line.add(row[2].ljust(widths[2]) + " ")
                for value, size in zip(row[3:], widths[3:]):
                    line.add(value.rjust(size) + " ")
                line.add(" ".join(report.command) or "?")
                lines.append(line.cropped(width, glyphs.ellipsis))
                judgement = judgements.of(report.pid) if judgements is not None else None
                if judgement is not None and report.steps:  # (as probe_summary: no verdict before a step)
                    lines += verdict_lines(judgement, width, glyphs, indent=6, advice=0)
    for pid, reason in sorted(unreachable.items()):
        lines += flow([text(reason, "warn")], width, first=Line().add(f"{pid} ", "bold").add(
            "did not answer: ", "warn"), indent=4, ellipsis=glyphs.ellipsis)
    return _finish(lines, color, ascii)


def placement_text(placement: Placement) -> str:
    """"rank 9 of 16 (local rank 1, node 1), torchelastic gpt13b-0412": where a rank sits in its job."""
    where = []
    if placement.local_rank is not None:
        where.append(f"local rank {placement.local_rank}")
    if placement.group_rank is not None:
        where.append(f"node {placement.group_rank}")
    said = "rank ?" if placement.rank is None else f"rank {placement.rank}"
    if placement.world_size is not None:
        said += f" of {placement.world_size}"
    if where:
        said += f" ({', '.join(where)})"
    return f"{said}, {placement.rendezvous}" if placement.rendezvous else said


def _by_job(reports: list[ProbeReport], jobs: Sequence[Job]) -> list[tuple[Job | None, list[ProbeReport]]]:
    """The reports of each job together, by rank, in the jobs' order; those in no job, alone, after."""
    of = {r.pid: r for r in reports}
    groups: list[tuple[Job | None, list[ProbeReport]]] = []
    for job in jobs:
        members = [of.pop(rank.pid) for rank in job.ranks if rank.pid in of]
        if members:
            groups.append((job, members))
    return groups + [(None, [r]) for r in reports if r.pid in of]


def _list_row(report: ProbeReport) -> list[str]:
    allocated = [d.allocator.allocated for d in report.devices if d.allocator is not None]
    reserved = [d.allocator.reserved for d in report.devices if d.allocator is not None]
    step = str(report.steps[-1].step) if report.steps else "-"
    rank = report.placement.rank if report.placement is not None else None
    host = next((s.host_memory for s in reversed(report.steps) if s.host_memory is not None), None)
    return [
        str(report.pid),
        str(rank) if rank is not None else "-",
        report.torch_version or "?",
        units.size_compact(sum(allocated)) if allocated else "n/a",
        units.size_compact(sum(reserved)) if reserved else "n/a",
        step,
        # Resident memory, which the probe reads for CPU jobs (no allocator to ask): their memory figure.
        units.size_compact(host) if host is not None else units.NA,
    ]


def render_probe(report: ProbeReport, snapshot: Snapshot | None = None, judgement: ProcessJudgement | None = None, *,
                 color: bool = False, ascii: bool = False, width: int = 100, tz: tzinfo | None = None) -> str:
    """Everything one probe reports, for a person or a bug report, with its ``judgement`` (the leak
    verdict and advice: gputui.sample.judge.judge_report's).

    ``snapshot`` (the GPUs now, when NVML can be read) adds NVML's share of the process's memory and
    the time to OOM from the GPU's free memory; without it the verdict comes from the steps alone.
    """
    report, snapshot = visible_all(report), visible_all(snapshot)  # (the judgement: made visible where shown)
    width = max(MIN_WIDTH, width)
    glyphs = ASCII if ascii else UNICODE
    title = Line().add(f"process {report.pid}", "title")
    lines = flow([text(" ".join(report.command) or "?")], width, first=title, indent=2,
                 ellipsis=glyphs.ellipsis)
    lines.append(Line().add(f"  report at {units.clock_time(report.taken_at, tz, date=True, zone=True)}"))
    lines += flow([text(word) for word in probe_history(report, tz).split(" ")], width, gap=1,
                  first=Line().add("  "), indent=4, ellipsis=glyphs.ellipsis)
    if report.placement is not None:
        lines.append(Line().add(f"  {placement_text(report.placement)}").cropped(width, glyphs.ellipsis))
    lines += probe_summary(report, snapshot or Snapshot(taken_at=report.taken_at), width, glyphs,
                           tz, indent=0, judgement=judgement)
    for room in (visible_all(judgement.headroom) if judgement is not None else ()):  # the judge's, not worked out here
        lines += _headroom_lines(room, width, glyphs)
    for device in report.devices:
        if device.allocator is not None:
            lines += _allocator_lines(device.device, device.allocator, width, glyphs)
    if report.steps:
        lines += _step_table(report, width, glyphs)
        lines += _phase_lines(report, width, glyphs)
    if report.last_oom is not None and report.last_oom.message:
        lines += flow([text(report.last_oom.message, "bad")], width,
                      first=Line().add("OOM message: ", "bold"), indent=2, ellipsis=glyphs.ellipsis)
        when = oom_when(report.last_oom)
        if when:
            lines.append(Line().add(f"  {when}").cropped(width, glyphs.ellipsis))
        for frame in report.last_oom.where:
            lines.append(Line().add(f"  {frame}").cropped(width, glyphs.ellipsis))
    if report.sites:
        lines.append(Line().add("Allocation sites (live bytes at the last recorded step)", "head"))
        for site in report.sites:
            live = units.size_compact(site.live_bytes[-1]) if site.live_bytes else "n/a"
            lines.append(Line().add(f"  {live:>9} ").add(site.where).cropped(width, glyphs.ellipsis))
    if report.keepers:
        lines.append(Line().add("Kept by (names that held more at each recorded step)", "head"))
        for keeper in report.keepers:
            lines.append(Line().add(f"  {keeper_text(keeper)}").cropped(width, glyphs.ellipsis))
            for where in keeper.where:
                lines.append(Line().add(f"    {where}").cropped(width, glyphs.ellipsis))
    for limit in report.limits:
        lines += flow([text(word, "dim") for word in limit.split(" ")], width, gap=1,
                      first=Line().add("Not seen: ", "dim"), indent=2, ellipsis=glyphs.ellipsis)
    lines.append(text(figures_age(report.read_at, report.read_at_step, report.taken_at), "dim"))
    if report.probe_cpu_seconds is not None:
        lines.append(text(f"probe CPU time {report.probe_cpu_seconds:.2f}s", "dim"))
    return _finish(lines, color, ascii)


def oom_when(record: OomRecord) -> str:
    """Where in the training step and the job's code an OOM came, and the report it left: "in the
    backward pass of step 12; at train.py:42 in forward; report: PATH"."""
    parts = []
    if record.step is not None:
        phase = PHASE_WORDS.get(record.phase or "", "")
        parts.append(f"in {phase}step {record.step + 1}" if phase else f"at step {record.step + 1}")
    if record.line:
        parts.append(f"at {record.line}")
    if record.report_file:
        parts.append(f"report: {record.report_file}")
    return "; ".join(parts)


# Where an OOM came, as its line says it ("other": the loop around the model, e.g. a loss outside it).
PHASE_WORDS = {"forward": "the forward pass of ", "backward": "the backward pass of ",
               "optimizer": "the optimizer's step of ", "other": "the loop, outside the model, during "}


def _headroom_lines(room: Headroom, width: int, glyphs: Glyphs) -> list[Line]:
    """Room to grow on one GPU, the largest batch that would fit, and what the changes would save."""
    head, *what_ifs = headroom_lines(room)
    lines = flow([text(head)], width, first=Line().add(f"Will it fit ({room.device}): ", "head"), indent=2,
                 ellipsis=glyphs.ellipsis)
    return lines + [Line().add(f"  {line}").cropped(width, glyphs.ellipsis) for line in what_ifs]


def _allocator_lines(device: str, stats: AllocatorStats, width: int, glyphs: Glyphs) -> list[Line]:
    pairs = [
        ("allocated", stats.allocated, stats.allocated_peak),
        ("reserved", stats.reserved, stats.reserved_peak),
        ("active", stats.active, stats.active_peak),
        ("inactive split", stats.inactive_split, stats.inactive_split_peak),
        ("requested", stats.requested, stats.requested_peak),
    ]
    chunks = []
    for label, now, peak in pairs:
        if now is None:
            continue
        figure = f"{label} {units.size_compact(now)}"
        if peak is not None:
            figure += f" (peak {units.size_compact(peak)})"
        chunks.append(text(figure))
    if stats.largest_free_block is not None:
        chunks.append(text(f"largest free block {units.size_compact(stats.largest_free_block)}"))
    for label, count in (("segments", stats.segments), ("alloc retries", stats.alloc_retries),
                         ("OOMs", stats.ooms)):
        if count is not None:
            chunks.append(text(f"{label} {count}", "warn" if count and label != "segments" else None))
    if stats.expandable_segments is not None:
        chunks.append(text(f"expandable_segments {'on' if stats.expandable_segments else 'off'}"))
    if stats.settings:
        chunks.append(text(f"PYTORCH_CUDA_ALLOC_CONF={stats.settings}"))
    return flow(chunks, width, first=Line().add(f"allocator {device}:", "bold"), indent=2,
                ellipsis=glyphs.ellipsis)


# Step-table columns: (title, value of a step). A column no step has a figure for is left out, so a
# CPU-only job (no CUDA allocator) shows its host memory instead of a row of n/a.
_STEP_COLUMNS: tuple[tuple[str, Callable[[StepRecord], int | None]], ...] = (
    ("ALLOCATED", lambda s: s.allocated),
    ("RESERVED", lambda s: s.reserved),
    ("PEAK FWD", lambda s: s.peak_forward),
    ("PEAK BWD", lambda s: s.peak_backward),
    ("PEAK OPT", lambda s: s.peak_optimizer),
    ("TENSORS", lambda s: _tensor_bytes(s.categories)),
    ("HOST MEM", lambda s: s.host_memory),
)


def _tensor_bytes(categories: MemoryCategories | None) -> int | None:
    """What the probe accounts for in tensors: parameters, gradients, optimizer state, activations."""
    return None if categories is None else categories.tensor_bytes()


def _sized(value: Callable[[StepRecord], int | None]) -> Callable[[StepRecord], str]:
    return lambda s: units.size_compact(value(s))


def _step_table(report: ProbeReport, width: int, glyphs: Glyphs) -> list[Line]:
    # The probe reads memory at some steps only (its time budget): those are the rows worth showing.
    measured = [s for s in report.steps if any(value(s) is not None for _, value in _STEP_COLUMNS)]
    steps = (measured or list(report.steps))[-STEPS_SHOWN:]
    columns: list[tuple[str, Callable[[StepRecord], str]]] = [
        ("STEP", lambda s: str(s.step)), ("TIME", lambda s: units.step_time(s.duration))]
    columns += [(title, _sized(value)) for title, value in _STEP_COLUMNS if any(value(s) is not None for s in steps)]
    if any(title == "ALLOCATED" for title, _ in columns):
        columns = [c for c in columns if c[0] != "TENSORS"]  # the allocator's figures say more
    titles = [title for title, _ in columns]
    rows = [[value(s) for _, value in columns] for s in steps]
    widths = [max(len(t), *(len(r[i]) for r in rows)) for i, t in enumerate(titles)]
    if measured and len(measured) < len(report.steps):
        # The report keeps a window of the latest steps (and the first measured ones): say which
        # steps it spans, not how many it holds, which is no count of the job's steps.
        heading = (f"Last {len(rows)} of {len(measured)} measured steps (steps {report.steps[0].step} to "
                   f"{report.steps[-1].step}; the probe reads memory every few steps)")
    else:
        heading = f"Last {len(rows)} of {len(report.steps)} steps"
    lines = [Line().add(heading, "head")]
    lines.append(Line().add(" ".join(t.rjust(w) for t, w in zip(titles, widths)), "bold")
                 .cropped(width, glyphs.ellipsis))
    for row in rows:
        lines.append(Line().add(" ".join(v.rjust(w) for v, w in zip(row, widths)))
                     .cropped(width, glyphs.ellipsis))
    return lines


def _phase_lines(report: ProbeReport, width: int, glyphs: Glyphs) -> list[Line]:
    """The first measured step and the latest, phase by phase: where each one's peak comes from."""
    lines: list[Line] = []
    for account in accounts(report.steps, attached=report.via == "attach"):
        lines.append(Line().add(headline(account), "head"))
        lines += flow([text(part + ";") for part in account.lines[:-1]] + [text(account.lines[-1])],
                      width, first=Line().add("  "), indent=2, ellipsis=glyphs.ellipsis)
    return lines


def _finish(lines: list[Line], color: bool, ascii: bool) -> str:
    out = "\n".join(line.write(color) for line in lines) + "\n"
    if ascii:
        out = out.encode("ascii", "replace").decode("ascii")
    return out
