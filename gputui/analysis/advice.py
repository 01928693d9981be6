"""Advice: rules that turn a process's memory breakdown and verdicts into ranked, concrete suggestions.

Each rule looks at what the monitor and the probe saw, says it in numbers, proposes the change (with a
snippet), and estimates the saving where it can. Healthy processes get no advice at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gputui.analysis.ranking import ranked
from gputui.analysis.sites import keeper_text
from gputui.analysis.whatif import eight_bit_optimizer, step_peaks
from gputui.model import Device, GpuProcess, LeakKeeper, ProbeDevice, ProbeReport, Snapshot, StepRecord
from gputui.model.probe import KEEPER_GRAPH
from gputui.model.record import Record
from gputui.model.verdicts import (
    LEAK_CACHE_GROWTH,
    LEAK_CLEAN,
    LEAK_FRAGMENTATION,
    LEAK_LEAK,
    TREND_GROWING,
    Advice,
    GrowingSite,
    LeakVerdict,
    ProcessTrend,
)
from gputui.units import size, span

MIB = 1 << 20
GIB = 1 << 30

OOM_CRITICAL = 30 * 60.0  # seconds: an OOM closer than this is the first thing to hear about
OOM_WARNING = 6 * 3600.0
MIN_ACTIVATIONS = 16 * MIB  # saved activations below this outside training are not worth a word
EVAL_GAP_STEPS = 20  # no step for this many step times (and at least EVAL_GAP s): not training now
EVAL_GAP = 30.0
ACTIVATIONS_SHARE = 0.4  # of a step's peak: activations dominate
OPTIMIZER_SHARE = 0.35  # of allocated memory: optimizer state dominates
CACHE_SHARE = 0.25  # of reserved memory: the cache is far above what is allocated
OTHERS_SHARE = 0.10  # of the device: other processes' share worth mentioning
CROWDED = 0.9  # device use above this share makes other processes a warning


@dataclass(frozen=True, eq=False, repr=False)
class _Seen(Record):
    """Everything the rules look at, gathered once."""

    snapshot: Snapshot
    process: GpuProcess | None
    device: Device | None
    report: ProbeReport | None
    probe: ProbeDevice | None
    steps: tuple[StepRecord, ...]
    trend: ProcessTrend | None
    verdict: LeakVerdict | None
    sites: tuple[GrowingSite, ...]


def advise(
    *,
    snapshot: Snapshot,
    process: GpuProcess | None,
    report: ProbeReport | None = None,
    trend: ProcessTrend | None = None,
    verdict: LeakVerdict | None = None,
    sites: Sequence[GrowingSite] = (),
) -> tuple[Advice, ...]:
    """Suggestions for one process, most urgent and most rewarding first (``rank`` 1, 2, ...)."""
    device = None
    if process is not None:
        device = next((d for d in snapshot.devices if d.index == process.device_index), None)
    probe = _probe_device(report, device, verdict)
    steps: tuple[StepRecord, ...] = ()
    if report is not None and probe is not None:
        steps = tuple(s for s in report.steps if s.device in (probe.device, None))
    seen = _Seen(snapshot, process, device, report, probe, steps, trend, verdict, tuple(sites))
    return ranked(advice for rule in RULES if (advice := rule(seen)) is not None)


def _probe_device(report: ProbeReport | None, device: Device | None,
                  verdict: LeakVerdict | None) -> ProbeDevice | None:
    """The probe's view of the device the process is on (by UUID), else of the device judged."""
    if report is None or not report.devices:
        return None
    for pd in report.devices:
        if device is not None and device.uuid is not None and pd.uuid == device.uuid:
            return pd
    for pd in report.devices:
        if verdict is not None and pd.device == verdict.device:
            return pd
    return max(report.devices, key=lambda pd: pd.allocator.reserved if pd.allocator else -1)


def _oom_soon(seen: _Seen) -> Advice | None:
    forecasts = []
    v, t = seen.verdict, seen.trend
    if v is not None and v.oom_in is not None:
        forecasts.append((v.oom_in, f"at {size(_rate(v) or v.reserved_per_step or 0)} per step "
                          f"({v.state.replace('_', ' ')}), the device is full by step {v.oom_step}"))
    # The probe's per-step forecast knows the cache and the step's peak: prefer it to NVML's.
    if not forecasts and t is not None and t.verdict == TREND_GROWING and t.time_to_oom is not None:
        forecasts.append((t.time_to_oom, f"its memory grows {t.mib_per_min:.0f} MiB/min and "
                          f"{_free_text(seen)} is left"))
    if not forecasts:
        return None
    seconds, why = min(forecasts)
    if seconds >= OOM_WARNING:
        return None
    return Advice(
        kind="oom-soon", severity="critical" if seconds < OOM_CRITICAL else "warning",
        title=f"Out of memory in about {span(seconds)}",
        detail=f"{why[0].upper()}{why[1:]}.",
        action="Apply the fix below before then, or save a checkpoint now so the run can resume.",
    )


def _free_text(seen: _Seen) -> str:
    d = seen.device
    if d is not None and d.memory_free is not None:
        return size(d.memory_free)
    return "the rest of the device"


def _rate(v: LeakVerdict) -> float | None:
    """Bytes per step the leak grows by: host memory's for a CPU job's untracked tensors."""
    if v.category == "other" and v.host_other_per_step is not None:
        return max(v.host_other_per_step, v.allocated_per_step or 0.0)
    return v.allocated_per_step


def _site_text(seen: _Seen) -> str:
    kept = _keeper_text(seen)
    if not seen.sites:
        if kept:
            return kept
        if seen.report is not None and seen.report.recording:
            return " The probe is recording allocation sites now, to find the line."
        return " Record allocation sites from the detail screen to find the line."
    top = seen.sites[0]
    return kept + f" Allocated at: {top.where} (+{size(top.bytes_per_step)}/step)."


def _keeper(seen: _Seen) -> LeakKeeper | None:
    """The name that keeps the leak, where the probe found its lines."""
    keepers = [k for k in (seen.report.keepers if seen.report is not None else ()) if k.where]
    return keepers[0] if keepers else None


def _keeper_text(seen: _Seen) -> str:
    """Where the job keeps the leak: the line to change."""
    keeper = _keeper(seen)
    return f" Kept at: {keeper.where[0]} ({keeper_text(keeper)})." if keeper is not None else ""


def _graph_keeper(seen: _Seen) -> LeakKeeper | None:
    """The keeper, if it is one tensor whose autograd graph grows: a running total of losses
    (``total_loss += loss``) that links every step's graph to the next."""
    keeper = _keeper(seen)
    return keeper if keeper is not None and keeper.what == KEEPER_GRAPH else None


def _keep_less(keeper: LeakKeeper | None, on_gpu: bool) -> str | None:
    """The fix written for the keeper's own kind (a list appended to, a dict assigned into), with its
    name: a list of losses is told ``losses.append(loss.item())``, not a dict's example. None where the
    kind has no one way of adding (a tensor, a set, a closure): the general example then."""
    if keeper is None:
        return None
    name = keeper.name
    item = "loss" if "loss" in name.rsplit(".", 1)[-1].lower() else "value"
    tensor = f"{item}.detach().cpu()" if on_gpu else f"{item}.detach()"
    if keeper.what in ("a list", "a deque"):
        return (f"    {name}.append({item}.item())   # a number; not: {name}.append({item})\n"
                f"    {name}.append({tensor})   # to keep a tensor, without its graph\n"
                f"    del {name}[:-LIMIT]   # and keep only the latest")
    if keeper.what == "a dict":
        return (f"    {name}[key] = {item}.item()   # a number; or {tensor} to keep a tensor\n"
                f"    if len({name}) > LIMIT: {name}.pop(next(iter({name})))")
    return None


def _leak(seen: _Seen) -> Advice | None:
    v = seen.verdict
    if v is None or v.state != LEAK_LEAK:
        return None
    # The leak analysis loads with the first probe report: an unprobed machine's advice goes without it.
    from gputui.analysis.leaks import WINDOW_STEPS

    per_step = size(_rate(v) or 0)
    over = v.window_steps or min(v.steps_seen, WINDOW_STEPS)
    head = f"Allocated memory grows {per_step} per step over {over} steps"
    level = next((g.level for g in v.growth if g.name == v.category), None)
    on_host = v.category == "other" and v.host_other_per_step is not None
    total = _graph_keeper(seen)
    if total is not None and v.category != "activations":
        # Backward freed the saved tensors, but each step's graph nodes stay linked to the total.
        where = "Host memory" if on_host else "Memory outside the tracked categories"
        return Advice(
            kind="keep-graph", severity="critical",
            title="Each step's autograd graph is kept alive",
            detail=f"{where} grows {per_step} per step over {over} steps: {total.name} is a running total that "
            f"still carries its autograd graph, so every step's graph stays linked to the next." + _site_text(seen),
            action=f"Add numbers, not graphs, to a running total:\n"
            f"    {total.name} += loss.item()          # not: {total.name} += loss\n"
            f"    {total.name} += loss.detach()        # to keep a tensor, without its graph",
        )
    if v.category == "activations":
        return Advice(
            kind="keep-graph", severity="critical",
            title="Each step's autograd graph is kept alive",
            detail=f"{head}, in tensors saved for backward ({size(level or 0)} now, where a finished step "
            f"should hold none): a loss or output that still carries its graph is being kept."
            + _site_text(seen),
            action="Keep numbers, not graphs, across steps:\n" + (
                _keep_less(_keeper(seen), on_gpu=False) or
                "    total_loss += loss.item()          # not: total_loss += loss\n"
                "    outputs.append(out.detach())       # not: outputs.append(out)"),
            # (on CPU, the graphs of the steps the probe did not measure are in the untracked growth)
            estimated_saving=((level or 0) + v.untracked_growth) if v.untracked_growth else level,
        )
    if on_host:
        return Advice(
            kind="growing-tensors", severity="critical",
            title="A collection of tensors keeps growing",
            detail=f"Host memory beyond parameters, gradients, optimizer state and activations grows "
            f"{per_step} per step over {over} steps: a list, dict or cache of tensors that is never "
            f"emptied." + _site_text(seen),
            action="Bound it, or keep numbers instead of tensors:\n" + (
                _keep_less(_keeper(seen), on_gpu=False) or
                "    cache[key] = value.detach()          # no graph; or value.item() for a number\n"
                "    if len(cache) > LIMIT: cache.pop(next(iter(cache)))"),
            estimated_saving=v.untracked_growth,
        )
    if v.category == "other":
        return Advice(
            kind="growing-tensors", severity="critical",
            title="A collection of tensors keeps growing",
            detail=f"{head}, in tensors that are neither parameters, gradients, optimizer state nor "
            f"activations ({size(level or 0)} now): a list, dict or cache that is never emptied."
            + _site_text(seen),
            action="Bound it or move it off the GPU:\n" + (
                _keep_less(_keeper(seen), on_gpu=True) or
                "    cache[key] = value.detach().cpu()   # or keep .item() numbers\n"
                "    if len(cache) > LIMIT: cache.pop(next(iter(cache)))"),
        )
    if v.category in ("parameters", "gradients", "optimizer_state"):
        return Advice(
            kind="model-in-loop", severity="critical",
            title=f"{v.category.replace('_', ' ').capitalize()} grow every step",
            detail=f"{head}, in {v.category.replace('_', ' ')}: a model, layer or optimizer is created "
            f"inside the training loop." + _site_text(seen),
            action="Create the model and the optimizer once, before the loop; build layers in __init__, "
            "not in forward().",
        )
    return Advice(
        kind="growing-tensors", severity="critical", title="Allocated memory grows every step",
        detail=f"{head}; the probe cannot tell which tensors they are." + _site_text(seen),
        action="Look for tensors kept across steps: running losses (use .item()), outputs kept for "
        "metrics (use .detach().cpu()), caches that are never emptied.",
    )


def _untracked_growth(seen: _Seen) -> Advice | None:
    """A CPU job's host memory grows beyond the tensors the probe tracks, before (or without) a leak
    verdict: advice ranks it by its size, so no smaller part the probe does see comes first."""
    v = seen.verdict
    if v is None or v.untracked_growth is None or v.state in (LEAK_LEAK, LEAK_CLEAN):
        return None  # a leak has its own advice; a clean job grew only while warming up
    return Advice(
        kind="untracked-growth", severity="warning",
        title="Host memory grows beyond the tensors the probe tracks",
        detail=f"Host memory beyond parameters, gradients, optimizer state and activations grew "
        f"{size(v.untracked_growth)} since step {v.untracked_since}, in what the probe cannot attribute: "
        f"tensors kept across steps (a running loss with its graph, a list or cache of tensors) or memory "
        f"outside torch. {v.reason[0].upper()}{v.reason[1:]}." + _site_text(seen),
        action="Keep numbers, not tensors, across steps, and bound what you collect:\n"
        "    total_loss += loss.item()          # not: total_loss += loss\n"
        "    outputs.append(out.detach())       # and empty the list now and then",
        estimated_saving=v.untracked_growth,
    )


def _eval_with_grad(seen: _Seen) -> Advice | None:
    cats = seen.probe.categories if seen.probe else None
    if seen.report is None or cats is None or not cats.activations or cats.activations < MIN_ACTIVATIONS:
        return None
    if cats.activations_step is not None:
        return None  # a training step's peak, not activations held now
    if not seen.steps and (seen.report.started_at is None
                           or seen.report.taken_at - seen.report.started_at < EVAL_GAP):
        return None  # the first training step may still be on its way to optimizer.step()
    if seen.steps:
        last = seen.steps[-1]
        step_time = (seen.verdict.step_time if seen.verdict else None) or last.duration or 0.0
        idle = seen.report.taken_at - last.ended_at
        if idle < max(EVAL_GAP, EVAL_GAP_STEPS * step_time):
            return None
        when = f"no optimizer step for {span(idle)}"
    else:
        when = "no optimizer step seen at all"
    return Advice(
        kind="no-grad-eval", severity="warning",
        title="Evaluation or inference runs with gradients enabled",
        detail=f"{size(cats.activations)} of activations are saved for backward, with {when}: "
        f"autograd keeps them for a backward pass that never comes.",
        action="Run evaluation without autograd:\n"
        "    model.eval()\n"
        "    with torch.inference_mode():       # or torch.no_grad()\n"
        "        outputs = model(inputs)",
        estimated_saving=cats.activations,
    )


def _activations_dominate(seen: _Seen) -> Advice | None:
    # Judged on the latest measured step (the only ones with peaks), so that advice does not come
    # and go with each poll as steps with and without readings alternate.
    last = next((s for s in reversed(seen.steps) if s.step > 1 and step_peaks(s)), None)
    if last is None or last.allocated is None:
        return None
    peaks = step_peaks(last)
    peak = max(peaks)
    activations = peak - last.allocated  # what a step adds on top of what it keeps: mostly activations
    if peak <= 0 or activations < ACTIVATIONS_SHARE * peak:
        return None
    total = seen.device.memory_total if seen.device else None
    tight = total is not None and peak > 0.8 * total
    return Advice(
        kind="activations", severity="warning" if tight else "info",
        title="Activations dominate the step's peak memory",
        detail=f"A step peaks at {size(peak)}, {size(activations)} ({activations / peak:.0%}) above what it "
        f"keeps between steps: activations saved for backward."
        + (f" That is {peak / total:.0%} of the device." if total else ""),
        action="Any of these roughly halves activation memory:\n"
        "    # recompute activations in backward instead of keeping them\n"
        "    from torch.utils.checkpoint import checkpoint\n"
        "    x = checkpoint(block, x, use_reentrant=False)\n"
        "    # half the micro-batch, accumulate 2 of them per optimizer step\n"
        "    (loss / 2).backward(); ...; optimizer.step() every 2nd micro-batch\n"
        "    # mixed precision\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)",
        estimated_saving=activations // 2,
    )


def _optimizer_dominates(seen: _Seen) -> Advice | None:
    cats = seen.probe.categories if seen.probe else None
    if cats is None or not cats.optimizer_state:
        return None
    held = cats.tensor_bytes() or 0
    unseen = (seen.verdict.untracked_growth if seen.verdict is not None else None) or 0
    if held <= 0 or cats.optimizer_state < OPTIMIZER_SHARE * held or cats.optimizer_state <= unseen:
        return None  # (not the largest part where the host memory the probe cannot see grew more)
    ratio = f", {cats.optimizer_state / cats.parameters:.1f}x the parameters" if cats.parameters else ""
    return Advice(
        kind="optimizer-state", severity="info",
        title="Optimizer state is the largest part of memory",
        detail=f"Optimizer state holds {size(cats.optimizer_state)} ({cats.optimizer_state / held:.0%} of "
        f"the tensors{ratio}).",
        action="Use a leaner optimizer state, or shard it across GPUs:\n"
        "    import bitsandbytes as bnb\n"
        "    optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)   # ~1/4 of Adam's state\n"
        "    # or: torch.distributed.optim.ZeroRedundancyOptimizer / FSDP to shard it over ranks",
        estimated_saving=eight_bit_optimizer(cats),
    )


def _expandable_segments(seen: _Seen) -> Advice | None:
    alloc = seen.probe.allocator if seen.probe else None
    if alloc is None or alloc.expandable_segments:
        return None
    state = seen.verdict.state if seen.verdict else None
    cached = alloc.reserved - alloc.allocated
    retries = alloc.alloc_retries or 0
    far_above = cached >= CACHE_SHARE * alloc.reserved and cached >= 256 * MIB
    if not (state in (LEAK_FRAGMENTATION, LEAK_CACHE_GROWTH) or (far_above and retries > 0)):
        return None
    stuck = alloc.inactive_split
    detail = f"Reserved {size(alloc.reserved)} but allocated {size(alloc.allocated)}: {size(cached)} cached"
    if stuck is not None:
        detail += f", {size(stuck)} of it free but split inside blocks"
    detail += f"; {retries} alloc retries (each one frees the cache and stalls the step)."
    if state == LEAK_CACHE_GROWTH:
        detail += " Reserved keeps growing while allocated stays flat."
    return Advice(
        kind="expandable-segments", severity="warning",
        title="The allocator's cache is fragmented",
        detail=detail,
        action="Let segments grow instead of splitting fixed blocks (PyTorch 2.1+):\n"
        "    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
        "Varying tensor shapes (sequence lengths) fragment it too: pad to a few fixed sizes.",
        estimated_saving=stuck if stuck is not None else cached,
    )


def _other_processes(seen: _Seen) -> Advice | None:
    proc, device = seen.process, seen.device
    if proc is None or device is None:
        return None
    others = [
        p for p in seen.snapshot.processes
        if p.device_index == proc.device_index and p.pid != proc.pid and p.gpu_memory
    ]
    held = sum(p.gpu_memory or 0 for p in others)  # (every one known: filtered above)
    total = device.memory_total
    if not others or held < (OTHERS_SHARE * total if total else GIB):
        return None
    others.sort(key=lambda p: -(p.gpu_memory or 0))
    listed = ", ".join(
        f"{p.pid} ({p.user or '?'}, {p.name or '?'}) {size(p.gpu_memory)}" for p in others[:3]
    )
    crowded = total is not None and device.memory_used is not None and device.memory_used > CROWDED * total
    action = "Ask their owners, or run on a GPU with room"
    spare = [d for d in seen.snapshot.devices
             if d.index != device.index and d.memory_free is not None and d.lost is None]
    if spare:
        best = max(spare, key=lambda d: d.memory_free or 0)
        target = best.cuda_index if best.cuda_index is not None else best.index
        action += f":\n    CUDA_VISIBLE_DEVICES={target} python train.py   # GPU {best.index}: " \
                  f"{size(best.memory_free)} free"
    else:
        action += "."
    return Advice(
        kind="other-processes", severity="warning" if crowded else "info",
        title=f"Other processes hold {size(held)} on GPU {device.index}",
        detail=f"{len(others)} other process{'es' if len(others) > 1 else ''} on this GPU: {listed}.",
        action=action,
        estimated_saving=held,
    )


def _attach_probe(seen: _Seen) -> Advice | None:
    t, proc = seen.trend, seen.process
    if seen.report is not None or t is None or t.verdict != TREND_GROWING or proc is None:
        return None
    import shlex  # here: only a growing process without a probe needs it (issue 31 item 21)

    command = shlex.join(proc.command) if proc.command else "python train.py"
    return Advice(
        kind="attach-probe", severity="warning",
        title="Memory grows: attach the probe to see why",
        detail=f"NVML shows this process at {size(t.level or 0)}, growing {t.mib_per_min:.0f} MiB/min; "
        f"without the probe the monitor cannot tell a leak from a growing cache.",
        action=f"Restart it under the probe (no code change):\n    gputui run -- {command}\n"
        f"or: GPUTUI_PROBE=1 {command}",
    )


RULES: tuple[Callable[[_Seen], Advice | None], ...] = (
    _oom_soon, _leak, _untracked_growth, _eval_with_grad, _activations_dominate, _optimizer_dominates,
    _expandable_segments, _other_processes, _attach_probe,
)
