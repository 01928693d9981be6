"""``--once``'s short "Jobs" section: each job spread over several ranks or GPUs, its ranks side by side.

Jobs of one process on one GPU are the process table's rows already, so they are left out.
"""

from __future__ import annotations

from gputui import units
from gputui.analysis.jobs import who
from gputui.model import BY_DEVICES, Job, JobRank, Snapshot
from gputui.model.job_verdicts import JobAnalysis, ShardedModel
from gputui.model.judgement import Judgements
from gputui.plain.styled import Line, flow, text
from gputui.units import indices
from gputui.untrusted import visible


def job_lines(snapshot: Snapshot, judgements: Judgements, width: int, ellipsis: str) -> list[Line]:
    """The section, or nothing when no job is spread over several ranks or devices; each job's findings
    are the judgements'."""
    jobs = [job for job in snapshot.jobs if job.spread]
    if not jobs:
        return []
    head = Line().add("Jobs", "head")
    if any(rank.probed for job in jobs for rank in job.ranks):  # the legend of a mark that is shown
        head.add("  * probed", "dim")
    lines = [Line(), head]
    for job in jobs:
        lines.append(Line().add(job.name, "bold").add("  ").add(job_summary(job), "dim").cropped(width, ellipsis))
        lines += flow([_rank_chunk(rank) for rank in job.ranks], width, first=Line().add("  "), indent=2,
                      ellipsis=ellipsis)
        for note in job.notes:
            lines += flow([text(note, "warn")], width, first=text("  ! ", "warn"), indent=4, ellipsis=ellipsis)
        analysis = judgements.job(job.key)
        if analysis is None:
            continue
        if analysis.model is not None:
            lines += flow([text(model_line(analysis.model), "dim")], width, first=Line().add("  "), indent=4,
                          ellipsis=ellipsis)
        for finding in findings(analysis):
            lines += flow([text(finding, "warn")], width, first=text("  ! ", "warn"), indent=4, ellipsis=ellipsis)
    return lines


def model_line(model: ShardedModel) -> str:
    """A sharded job's whole model in one phrase: its ranks' shards added up, and the most one rank gathers."""
    of = f" of {model.world_size}" if model.world_size and model.world_size != model.ranks else ""
    return (f"sharded model, {model.ranks}{of} ranks added up: parameters {units.size(model.parameters)}, "
            f"gradients {units.size(model.gradients)}, optimizer state {units.size(model.optimizer_state)}; "
            f"a rank gathers up to {units.size(model.gathered)} unsharded for forward/backward")


def findings(analysis: JobAnalysis, *, advice: bool = True) -> list[str]:
    """What is unusual in a job, a phrase each with its figures, and (``advice``) its first advice's
    title: --once keeps it short."""
    said = []
    i = analysis.imbalance
    if i is not None:
        said.append(f"{who(i.rank, i.pid, i.device)} holds {units.size(i.memory)}, {i.ratio:.1f}x the others' "
                    f"median {units.size(i.others)}")
    lagging: dict[str, list[str]] = {}
    for s in analysis.stragglers:
        lagging.setdefault(who(s.rank, s.pid), []).append(
            f"{s.value:.0f}% busy vs {s.others:.0f}%" if s.measure == "utilisation"
            else f"{units.step_time(s.value)} a step vs {units.step_time(s.others)}")
    said += [f"{name} lags the others: {', '.join(figures)}" for name, figures in lagging.items()]
    oom = analysis.first_oom
    if oom is not None:
        said.append(f"{who(oom.rank, oom.pid, oom.device)} runs out of memory first, in about "
                    f"{units.span(oom.seconds)}")
    if advice and analysis.advice:
        said.append(f"advice: {visible(analysis.advice[0].title)}")
    return said


# How soon a first OOM is the worst news of a job (as the micro-batch advice's critical one).
OOM_SOON = 1800.0


def worst_finding(analysis: JobAnalysis) -> tuple[str, bool] | None:
    """The finding that matters most, in a few words ("GPU 0 OOM in 2 min"), and whether it is urgent
    (an OOM within OOM_SOON): the job view's job line has room for no more."""
    oom, i = analysis.first_oom, analysis.imbalance
    if oom is not None and (oom.seconds < OOM_SOON or i is None):
        return f"{who(oom.rank, oom.pid, oom.device)} OOM in {units.span(oom.seconds)}", oom.seconds < OOM_SOON
    if i is not None:
        return f"{who(i.rank, i.pid, i.device)} holds {i.ratio:.1f}x", False
    if analysis.stragglers:
        s = analysis.stragglers[0]
        return f"{who(s.rank, s.pid)} lags", False
    return None


def job_summary(job: Job) -> str:
    """"8 ranks of 16, GPUs 0-7, 470 GiB, torchrun pid 48210": the job in one phrase."""
    parts = [rank_count(job)]
    if job.devices:
        parts.append(("GPU " if len(job.devices) == 1 else "GPUs ") + indices(job.devices))
    if job.gpu_memory is not None:
        parts.append(units.size(job.gpu_memory))
    if job.launcher_pid is not None:
        parts.append(f"{job.launcher} pid {job.launcher_pid}")
    else:
        parts.append(f"grouped by {job.key}")
    return ", ".join(parts)


def rank_count(job: Job) -> str:
    """"8 ranks of 16" (the ranks seen here, of the whole job's), or "1 process" for DataParallel."""
    if job.grouped_by == BY_DEVICES:
        return "1 process"
    ranks = f"{len(job.ranks)} rank{'s' if len(job.ranks) != 1 else ''}"
    if job.world_size is not None and job.world_size != len(job.ranks):
        ranks += f" of {job.world_size}"
    return ranks


def rank_label(rank: JobRank) -> str:
    """"rank 3" where the environment says, else "pid 4242"."""
    return f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"


def _rank_chunk(rank: JobRank) -> Line:
    line = Line().add(rank_label(rank) + ("*" if rank.probed else ""), "bold")
    for device in rank.devices:
        line.add(f" GPU{device.index} {units.size_compact(device.gpu_memory)}")
    if not rank.devices:
        line.add(" CPU", "dim")
    return line
