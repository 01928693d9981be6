"""A job's ranks side by side, and what is unusual among them: imbalance, stragglers, the first rank
to run out of memory, and advice. Pure functions of a Job, its Snapshot, probe reports and trends.

A job's ranks run the same code on the same model, so they should look alike; the one that does not is
the news. Each comparison is against the median of the *others*, so one outlier cannot drag the yardstick
towards itself (in a 2-slot job that median is simply the other slot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gputui.analysis import robust
from gputui.analysis.ranking import ranked
from gputui.model import BY_DEVICES, Advice, Job, MemoryCategories, ProbeReport, Snapshot
from gputui.model.job_verdicts import FirstOom, Imbalance, JobAnalysis, ShardedModel, Slot, Straggler
from gputui.model.verdicts import TREND_GROWING, TREND_STEADY, TREND_WARMING_UP, ProcessTrend
from gputui.units import size, span, step_time

GIB = 1 << 30
MIB = 1 << 20

# Imbalance: far above the others' median means both. 1.5x: symmetric ranks (DDP, FSDP) differ by a few
# percent (cache warm-up, rank 0's logging and checkpoint buffers: rarely 20 %), while DataParallel's
# device 0 holds 1.5-3x a replica (the master weights, reduced gradients, optimizer state, gathered
# outputs and the loss); 1 GiB, so a small job's cache noise is no alarm.
FAR = 1.5
MIN_EXCESS = 1 * GIB
# Stragglers: utilisation under 75 % of the others' median and at least 15 points below it (the
# driver's samples swing by several points); a step time 25 % above the others' median.
SLOW_UTILISATION = 0.75
MIN_UTILISATION_GAP = 15
SLOW_STEP = 1.25
STEPS_TIMED = 20  # recent steps whose median step time stands for a rank
# A rank's step time is said (and judged) once this many steps were timed: a rank's first steps carry its
# start (torch's first calls, a loaded machine's scheduling), and a median of one or two of them called the
# faster rank of a real job a straggler.
MIN_STEPS_TIMED = 5
FULL = 0.9  # of a device: the micro-batch advice applies when the fullest slot is past this
OOM_HORIZON = 6 * 3600.0  # the first OOM worth advising on (as the process advice's OOM_WARNING)
TrendKey = tuple[int, int]  # (NVML pid, device index), as gputui.analysis.trends keys them


def analyse_job(job: Job, snapshot: Snapshot, *, trends: Mapping[TrendKey, ProcessTrend] | None = None) -> JobAnalysis:
    """Everything the job view shows about ``job``; ``trends`` (from gputui.analysis.trends) give the
    first rank to run out of memory and a leak on one rank, and are unknown to a one-shot print."""
    trends = trends or {}
    slots = job_slots(job, snapshot)
    imbalance = find_imbalance(slots)
    stragglers = find_stragglers(slots)
    first_oom = find_first_oom(job, snapshot, trends)
    growing = growing_alone(job, snapshot, trends)
    advice = ranked(a for a in (
        _dataparallel(job, imbalance),
        _micro_batch(job, slots, first_oom),
        _leak_on_one_rank(job, growing),
        _straggler(stragglers),
    ) if a is not None)
    return JobAnalysis(job=job, slots=slots, imbalance=imbalance, stragglers=stragglers, first_oom=first_oom,
                       advice=advice, model=sharded_model(job, snapshot))


def job_slots(job: Job, snapshot: Snapshot) -> tuple[Slot, ...]:
    """One slot per rank and device (a CPU rank has one, with no device), in rank order."""
    devices = {d.index: d for d in snapshot.devices}
    sm = {(p.own_pid, p.device_index): p.sm_util for p in snapshot.processes}
    reports = {r.pid: r for r in snapshot.probes}
    slots = []
    for rank in job.ranks:
        steps = _step_time(reports.get(rank.pid))
        for d in rank.devices or (None,):
            device = devices.get(d.index) if d is not None else None
            utilisation = sm.get((rank.pid, d.index)) if d is not None else None
            if utilisation is None and device is not None:
                utilisation = device.gpu_util
            slots.append(Slot(
                pid=rank.pid, rank=rank.rank, device=d.index if d is not None else None,
                gpu_memory=d.gpu_memory if d is not None else None,
                memory_total=device.memory_total if device is not None else None,
                utilisation=utilisation, step_time=steps, probed=rank.probed))
    return tuple(slots)


def sharded_model(job: Job, snapshot: Snapshot) -> ShardedModel | None:
    """The whole model of a sharded job (FSDP2): its probed ranks' shards added up. None where a probed
    rank holds no shards (replicas, as DDP's, are each the whole model already) or none is probed."""
    reports = {r.pid: r for r in snapshot.probes}
    each = [_main_categories(reports[rank.pid]) for rank in job.ranks if rank.probed and rank.pid in reports]
    found = [c for c in each if c is not None and c.gathered is not None]
    if not found or len(found) < len(each):
        return None

    def total(name: str) -> int:
        return sum(getattr(c, name) or 0 for c in found)

    return ShardedModel(parameters=total("parameters"), gradients=total("gradients"),
                        optimizer_state=total("optimizer_state"), gathered=max(c.gathered or 0 for c in found),
                        ranks=len(found), world_size=job.world_size)


def _main_categories(report: ProbeReport) -> MemoryCategories | None:
    """The categories of the device that holds a rank's model (most parameter bytes)."""
    cats = [d.categories for d in report.devices if d.categories is not None]
    return max(cats, key=lambda c: c.parameters or 0) if cats else None


def _step_time(report: ProbeReport | None) -> float | None:
    if report is None:
        return None
    times = [s.duration for s in report.steps[-STEPS_TIMED:] if s.duration is not None]
    return robust.median(times) if len(times) >= MIN_STEPS_TIMED else None


def find_imbalance(slots: Sequence[Slot]) -> Imbalance | None:
    """The slot furthest above the median of the others, when it is FAR above and MIN_EXCESS more."""
    known = [s for s in slots if s.gpu_memory is not None]
    worst = None
    for i, slot in enumerate(known):
        assert slot.gpu_memory is not None
        others = [s.gpu_memory for j, s in enumerate(known) if j != i and s.gpu_memory is not None]
        if not others:
            continue
        median = robust.median(others)
        if median > 0 and slot.gpu_memory >= FAR * median and slot.gpu_memory - median >= MIN_EXCESS:
            found = Imbalance(pid=slot.pid, rank=slot.rank, device=slot.device, memory=slot.gpu_memory,
                              others=int(median), ratio=round(slot.gpu_memory / median, 2))
            if worst is None or found.ratio > worst.ratio:
                worst = found
    return worst


def find_stragglers(slots: Sequence[Slot]) -> tuple[Straggler, ...]:
    """Ranks whose utilisation or step time lags the other ranks' median (jobs of several ranks)."""
    by_rank: dict[int, list[Slot]] = {}
    for slot in slots:
        by_rank.setdefault(slot.pid, []).append(slot)
    if len(by_rank) < 2:
        return ()  # one process (DataParallel): its replicas wait on device 0 by design
    util = {pid: robust.mean(u) for pid, ss in by_rank.items()
            if (u := [s.utilisation for s in ss if s.utilisation is not None])}
    steps = {pid: ss[0].step_time for pid, ss in by_rank.items() if ss[0].step_time is not None}
    found = []
    for pid, ss in by_rank.items():
        others = [v for p, v in util.items() if p != pid]
        if pid in util and others:
            median = robust.median(others)
            if util[pid] < SLOW_UTILISATION * median and median - util[pid] >= MIN_UTILISATION_GAP:
                found.append(Straggler(pid, ss[0].rank, "utilisation", round(util[pid], 1), round(median, 1)))
        others = [v for p, v in steps.items() if p != pid]
        if pid in steps and others:
            median = robust.median(others)
            if steps[pid] > SLOW_STEP * median:
                found.append(Straggler(pid, ss[0].rank, "step time", steps[pid], median))
    return tuple(found)


def _trend_of(snapshot: Snapshot, trends: Mapping[TrendKey, ProcessTrend]) -> dict[TrendKey, ProcessTrend]:
    """The trends by (pid as the job knows it, device): NVML's pids differ inside containers."""
    return {(p.own_pid, p.device_index): t for p in snapshot.processes
            if (t := trends.get((p.pid, p.device_index))) is not None}


def find_first_oom(job: Job, snapshot: Snapshot, trends: Mapping[TrendKey, ProcessTrend]) -> FirstOom | None:
    """The slot whose device fills first at its current growth, and when."""
    mine = _trend_of(snapshot, trends)
    first = None
    for rank in job.ranks:
        for d in rank.devices:
            trend = mine.get((rank.pid, d.index))
            if trend is None or trend.verdict != TREND_GROWING or trend.time_to_oom is None:
                continue
            if first is None or trend.time_to_oom < first.seconds:
                first = FirstOom(pid=rank.pid, rank=rank.rank, device=d.index, seconds=trend.time_to_oom,
                                 rate=trend.rate or 0.0)
    return first


def growing_alone(job: Job, snapshot: Snapshot,
                  trends: Mapping[TrendKey, ProcessTrend]) -> tuple[int, ProcessTrend] | None:
    """(pid, trend) of the one rank whose memory grows while every other rank's holds steady."""
    if len(job.ranks) < 2:
        return None
    mine = _trend_of(snapshot, trends)
    growing, settled = [], 0
    for rank in job.ranks:
        verdicts = [t for d in rank.devices if (t := mine.get((rank.pid, d.index))) is not None]
        if any(t.verdict == TREND_GROWING for t in verdicts):
            growing.append((rank.pid, next(t for t in verdicts if t.verdict == TREND_GROWING)))
        elif verdicts and all(t.verdict in (TREND_STEADY, TREND_WARMING_UP) for t in verdicts):
            settled += 1
    return growing[0] if len(growing) == 1 and settled == len(job.ranks) - 1 else None


def who(rank: int | None, pid: int, device: int | None = None) -> str:
    """"rank 3", or for a process without a rank "GPU 0" (DataParallel) or "pid 4242"."""
    if rank is not None:
        return f"rank {rank}"
    return f"GPU {device}" if device is not None else f"pid {pid}"


# ----------------------------------------------------------------------------------------- advice

def _dataparallel(job: Job, imbalance: Imbalance | None) -> Advice | None:
    if job.grouped_by != BY_DEVICES or imbalance is None:
        return None
    replicas = len(job.devices)
    return Advice(
        kind="dataparallel", severity="warning",
        title="Use DistributedDataParallel instead of DataParallel",
        detail=f"One process drives {replicas} GPUs, and GPU {imbalance.device} holds {size(imbalance.memory)} "
               f"where the others hold {size(imbalance.others)}: nn.DataParallel keeps the weights, the reduced "
               "gradients and the optimizer state on its first device, and gathers every replica's outputs "
               "there for the loss. That device runs out while the others have room.",
        action=f"Run one process per GPU with DistributedDataParallel, so each GPU holds one replica and its "
               f"share of the batch:\n"
               f"    torchrun --nproc-per-node={replicas} train.py\n"
               f"    model = DDP(model.to(local_rank), device_ids=[local_rank])",
        estimated_saving=imbalance.memory - imbalance.others,
    )


def _micro_batch(job: Job, slots: Sequence[Slot], first_oom: FirstOom | None) -> Advice | None:
    full = [s for s in slots if s.gpu_memory is not None and s.memory_total
            and s.gpu_memory >= FULL * s.memory_total]
    soon = first_oom is not None and first_oom.seconds < OOM_HORIZON
    if not full and not soon:
        return None
    if soon:
        assert first_oom is not None
        where = who(first_oom.rank, first_oom.pid, first_oom.device)
        seen = (f"{where} runs out of memory first, in about {span(first_oom.seconds)} "
                f"(growing {first_oom.rate * 60 / MIB:.0f} MiB/min).")
    else:
        fullest = max(full, key=lambda s: (s.gpu_memory or 0) / (s.memory_total or 1))
        seen = (f"{who(fullest.rank, fullest.pid, fullest.device)} uses {size(fullest.gpu_memory)} of its "
                f"GPU's {size(fullest.memory_total)}.")
    return Advice(
        kind="micro-batch", severity="critical" if soon and first_oom and first_oom.seconds < 1800 else "warning",
        title="Cut the micro-batch and accumulate gradients",
        detail=f"{seen} Activations grow with the micro-batch: halving it halves them, and accumulating "
               "gradients over two micro-batches keeps the batch the optimizer sees.",
        action="Halve the per-GPU batch size and step the optimizer every 2 micro-batches:\n"
               "    loss = loss_fn(model(x), y) / ACCUMULATE\n"
               "    loss.backward()\n"
               "    if (i + 1) % ACCUMULATE == 0: optimizer.step(); optimizer.zero_grad()\n"
               "With DDP, wrap the micro-batches that do not step in model.no_sync().",
    )


def _leak_on_one_rank(job: Job, growing: tuple[int, ProcessTrend] | None) -> Advice | None:
    if growing is None:
        return None
    pid, trend = growing
    rank = next(r for r in job.ranks if r.pid == pid)
    return Advice(
        kind="leak-one-rank", severity="critical",
        title=f"Only {who(rank.rank, pid)}'s memory grows",
        detail=f"{who(rank.rank, pid).capitalize()} grows {trend.mib_per_min or 0:.0f} MiB/min while the "
               f"other {len(job.ranks) - 1} ranks hold steady: they run the same training step, so the leak is "
               "in code only this rank runs (logging, metrics, evaluation, checkpoints on rank 0).",
        action="Look at what runs under `if rank == ...:` and keep numbers, not tensors:\n"
               "    history.append(loss.item())     # not: history.append(loss)\n"
               f"`gputui probe {pid}` on that rank shows which tensors grow.",
    )


def _straggler(stragglers: Sequence[Straggler]) -> Advice | None:
    if not stragglers:
        return None
    s = stragglers[0]
    if s.measure == "utilisation":
        seen = f"its GPU is busy {s.value:.0f}% of the time where the other ranks' are {s.others:.0f}%"
    else:
        seen = f"its steps take {step_time(s.value)} where the other ranks' take {step_time(s.others)}"
    return Advice(
        kind="straggler", severity="warning",
        title=f"Find what slows {who(s.rank, s.pid)}",
        detail=f"{who(s.rank, s.pid).capitalize()} is a straggler: {seen}. Every collective waits for the "
               "slowest rank, so the whole job runs at its pace.",
        action="Find what slows that rank: its data loader (more num_workers, pin_memory), a GPU throttled by "
               "heat or power (the device's throttle reasons), or other processes on its GPU or CPU cores.",
    )
