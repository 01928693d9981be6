"""What-ifs: what a change to a training job saves, computed from its measured categories.

The one place these savings are written, and their words (``effect``: a change can cost more): the
advice (advice.py), ``gputui estimate``'s what-if table (for the changes it cannot run on fake tensors)
and the live job's report all use them. Each takes the live bytes by category at one moment (a
phase's peak) and says how many bytes the change frees then.
Parameters, gradients and optimizer state do not depend on the batch; activations grow with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gputui.model import Headroom, MemoryCategories, ProbeDevice, ProbeReport, Snapshot, StepRecord, WhatIf
from gputui.model.verdicts import (
    LEAK_CACHE_GROWTH,
    LEAK_FRAGMENTATION,
    LEAK_GROWING,
    LEAK_LEAK,
    TREND_GROWING,
    LeakVerdict,
    ProcessTrend,
)
from gputui.units import size, span

EIGHT_BIT_KEEPS = 1 / 4  # an 8-bit optimizer (bitsandbytes AdamW8bit) keeps 1 byte a value of Adam's 4
ZERO_GPUS = 8  # ZeRO's sharding over this many GPUs, unless told


def _bytes(value: int | None) -> int:
    return value or 0


def eight_bit_optimizer(c: MemoryCategories) -> int:
    """Adam's two fp32 moments kept in 8 bits: three quarters of the state freed."""
    return round(_bytes(c.optimizer_state) * (1 - EIGHT_BIT_KEEPS))


def zero_sharding(gpus: int = ZERO_GPUS) -> Callable[[MemoryCategories], int]:
    """ZeRO stage 2 over ``gpus`` GPUs: each keeps 1/gpus of the optimizer state and the gradients."""
    def saving(c: MemoryCategories) -> int:
        return (_bytes(c.optimizer_state) + _bytes(c.gradients)) * (gpus - 1) // gpus
    return saving


def half_activations(c: MemoryCategories) -> int:
    """Half the micro-batch (and twice the gradient accumulation), checkpointing or mixed precision,
    without measuring them: each roughly halves the activations."""
    return _bytes(c.activations) // 2


def largest_batch(peaks: dict[int, int], room: int) -> int | None:
    """The largest batch size whose peak fits ``room`` bytes, from peaks measured at two or more batch
    sizes (``peaks``: batch size -> peak bytes), fitted as a fixed part plus a cost per sample.
    0 where the fixed part alone does not fit; None where a sample costs nothing (no limit)."""
    (small, low), (large, high) = min(peaks.items()), max(peaks.items())
    per_sample = (high - low) / (large - small)
    fixed = low - per_sample * small
    if fixed > room:
        return 0
    if per_sample <= 0:
        return None
    return int((room - fixed) // per_sample)


def effect(saving: int, size_of: Callable[[int], str] = size) -> str:
    """What a change does to the peak, in words: "saves 1.50 GiB", "saves nothing", or "costs 1.00 MiB
    more" (checkpointing can raise the peak: its recomputed outputs outweigh small activations).
    ``size_of`` writes the bytes (``units.size_compact`` in tables)."""
    if saving < 0:
        return f"costs {size_of(-saving)} more"
    return f"saves {size_of(saving)}" if saving else "saves nothing"


def computed(gpus: int = ZERO_GPUS) -> list[tuple[str, Callable[[MemoryCategories], int]]]:
    """The changes computed from measured categories, with their savings, as the tables name them."""
    return [("8-bit optimizer state", eight_bit_optimizer), (f"ZeRO-2 over {gpus} GPUs", zero_sharding(gpus))]


def headroom(report: ProbeReport, device: ProbeDevice, snapshot: Snapshot | None,
             growing: str | None = None) -> Headroom | None:
    """A live job's room on one GPU from its latest measured step; None without the GPU's free memory
    (no NVML) or the allocator's figures (a CPU job). ``growing`` (see :func:`growing_toward_oom`)
    withholds the largest batch, with that reason."""
    gpu = next((d for d in snapshot.devices if d.uuid == device.uuid), None) if snapshot and device.uuid else None
    stats = device.allocator
    if gpu is None or gpu.memory_free is None or stats is None:
        return None
    # The cache as the breakdown counts it: reserved, not allocated, not stuck in split blocks.
    cache = max(0, stats.reserved - stats.allocated - (stats.inactive_split or 0))
    step = next((s for s in reversed(report.steps) if s.device == device.device and s.activations_peak
                 and s.categories is not None and _peak(s) is not None), None)
    if step is None or step.categories is None:
        return Headroom(device.device, gpu.memory_free, cache)
    peak = _peak(step) or 0
    activations = step.activations_peak or 0
    at_peak = dataclasses.replace(step.categories, activations=activations)
    world = report.placement.world_size if report.placement and report.placement.world_size else 1
    gpus = world if world > 1 else ZERO_GPUS  # a job on one GPU: what sharding over a node would save
    changes = [*computed(gpus), ("half the micro-batch, 2x accumulation", half_activations)]
    room = gpu.memory_free + stats.reserved - peak  # what the step's peak could still grow into
    # A job growing toward OOM uses that room up step by step: it has none for a bigger batch.
    factor = None if growing else 1 + max(0, room) / activations
    return Headroom(device.device, gpu.memory_free, cache, peak, activations, factor,
                    tuple(WhatIf(words, peak - saving(at_peak), saving(at_peak), False) for words, saving in changes),
                    withheld=growing)


def step_peaks(step: StepRecord) -> list[int]:
    """The step's phases' peaks that were measured."""
    return [p for p in (step.peak_forward, step.peak_backward, step.peak_optimizer) if p is not None]


def _peak(step: StepRecord) -> int | None:
    return max(step_peaks(step), default=None)


def headrooms(report: ProbeReport, snapshot: Snapshot | None, *, leak: LeakVerdict | None = None,
              trend: ProcessTrend | None = None) -> tuple[Headroom, ...]:
    """``headroom`` for each of the report's devices where it can be had, the largest batch withheld
    while the job grows toward OOM: by ``leak`` (judged here from the report when not given) or by
    NVML's ``trend``."""
    if snapshot is None:
        return ()  # no NVML: no free memory, no headroom
    if leak is None and report.steps:
        from gputui.analysis.leaks import snapshot_leak_verdict  # loaded with the first probe report

        leak = snapshot_leak_verdict(report, snapshot)
    growing = growing_toward_oom(leak, trend, snapshot.taken_at)
    found = (headroom(report, device, snapshot, growing) for device in report.devices)
    return tuple(h for h in found if h is not None)


# The figure that grows in each of the leak verdict's growing states.
GROWING_FIGURE = {LEAK_LEAK: "allocated", LEAK_CACHE_GROWTH: "reserved", LEAK_FRAGMENTATION: "split free blocks"}


def growing_toward_oom(leak: LeakVerdict | None, trend: ProcessTrend | None, now: float | None) -> str | None:
    """What grows toward OOM, how fast and when it runs out, in words (the probe's verdict first, it
    knows the step's peak; else NVML's trend); None where neither sees growth."""
    if leak is not None and leak.state in LEAK_GROWING:
        what = GROWING_FIGURE.get(leak.state, "memory")
        words = f"{what} grows {size(leak.growth_per_step or 0)} per step ({leak.state.replace('_', ' ')})"
        left = leak.seconds_to_oom(now)
    elif trend is not None and trend.verdict == TREND_GROWING:
        words = f"memory grows {size((trend.rate or 0) * 60)}/min (NVML)"
        left = trend.time_to_oom
    else:
        return None
    return words if left is None else f"{words}, out of memory in about {span(left)}"
