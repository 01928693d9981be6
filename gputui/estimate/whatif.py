"""The what-if table and the largest batch: the same job run again with one change where fake tensors
can run it, computed from the measured categories where they cannot (analysis/whatif.py's savings); and,
where asked (--fsdp2), FSDP2's sharding: one rank measured (sharded.py), several times slower to run."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from gputui.analysis.whatif import computed, largest_batch
from gputui.errors import UserError
from gputui.estimate import sharded
from gputui.estimate.step import Measured, Settings, measure
from gputui.model import MemoryCategories, WhatIf
from gputui.model.estimate import BACKWARD, FORWARD, OPTIMIZER

PEAK_PHASES = (FORWARD, BACKWARD, OPTIMIZER)


def peak(measured: Measured, saving: Callable[[MemoryCategories], int] | None = None) -> int:
    """The highest phase, less what ``saving`` frees at each phase's peak."""
    return max(p.total - (saving(p.categories) if saving else 0) for p in measured.phases)


def batch_size_of(function: Callable[..., Any], settings: Settings) -> int | None:
    """The batch size the job runs at: the one asked for, else FUNCTION's default, else unknown."""
    if settings.batch_size is not None:
        return settings.batch_size
    parameter = inspect.signature(function).parameters.get("batch_size")
    default = None if parameter is None else parameter.default
    return default if isinstance(default, int) and default > 0 else None


def changes(settings: Settings, batch: int | None) -> list[tuple[str, Settings]]:
    """The changes fake tensors can run, each as the settings to run it with."""
    out = []
    if settings.precision == "fp32":
        out += [("bf16 weights and activations", dataclasses.replace(settings, precision="bf16")),
                ("amp: bf16 autocast, fp32 weights", dataclasses.replace(settings, precision="amp"))]
    if not settings.checkpointing:
        out.append(("activation checkpointing", dataclasses.replace(settings, checkpointing=True)))
    if settings.optimizer != "sgd":
        out.append(("SGD with momentum", dataclasses.replace(settings, optimizer="sgd")))
    if batch is not None and batch >= 2:
        out.append((f"batch {batch // 2}, 2x accumulation", dataclasses.replace(settings, batch_size=batch // 2)))
    return out


def what_ifs(function: Callable[..., Any], settings: Settings, base: Measured, gpus: int,
             room: int | None, max_batch: bool) -> list[WhatIf]:
    """Each change's peak and saving against ``base``; each one's largest batch where asked."""
    batch = batch_size_of(function, settings)
    base_peak = peak(base)
    out = []
    for words, changed in changes(settings, batch):
        try:
            # half the batch with twice the accumulation: a largest batch would undo the change
            same_batch = changed.batch_size == settings.batch_size
            out.append(measured_row(function, words, changed, base_peak, room, max_batch and same_batch))
        except UserError:
            continue  # the job does not run so changed (a cast its code refuses): no row rather than a guess
    for words, saving in computed(gpus):
        largest = None
        if max_batch and room is not None:
            largest = largest_batch_of(function, settings, room, base, saving)
        out.append(WhatIf(words, peak(base, saving), base_peak - peak(base, saving), False, largest))
    return out


def measured_row(function: Callable[..., Any], words: str, changed: Settings, base_peak: int, room: int | None,
                 max_batch: bool) -> WhatIf:
    """The job run with ``changed``: its row, with its largest batch where asked (at the job's own batch size)."""
    measured = measure(function, changed)
    largest = None
    if max_batch and room is not None:
        largest = largest_batch_of(function, changed, room, measured)
    return WhatIf(words, peak(measured), base_peak - peak(measured), True, largest)


def fsdp2_row(function: Callable[..., Any], settings: Settings, base: Measured, gpus: int, room: int | None,
          max_batch: bool) -> WhatIf | str:
    """The FSDP2 row (--fsdp2): one rank of ``gpus`` measured; where it cannot be measured here, why not."""
    if gpus < 2:
        return "FSDP2 over 1 GPU: one GPU shards nothing, give --zero-gpus 2 or more"
    words = f"FSDP2 over {gpus} GPUs, a rank"
    why = sharded.available()
    if why is None:
        try:
            return measured_row(function, words, dataclasses.replace(settings, world_size=gpus), peak(base), room,
                                max_batch)
        except UserError as exc:
            why = str(exc).splitlines()[0]
    return f"{words}: {why}"


def largest_batch_of(function: Callable[..., Any], settings: Settings, room: int, at: Measured,
                     saving: Callable[[MemoryCategories], int] | None = None) -> int | None:
    """The largest batch size whose every phase fits ``room``: each phase's peak measured at the job's
    batch size (``at``) and at twice it, fitted as a fixed part plus a cost per sample."""
    batch = batch_size_of(function, settings)
    if batch is None:
        raise UserError("--max-batch needs FUNCTION to take batch_size (with a default, or give --batch-size)")
    double = measure(function, dataclasses.replace(settings, batch_size=2 * batch))
    limits = []
    for name in PEAK_PHASES:
        phases = {size: next(p for p in m.phases if p.phase == name) for size, m in ((batch, at), (2 * batch, double))}
        fitted = largest_batch({size: p.total - (saving(p.categories) if saving else 0)
                                for size, p in phases.items()}, room)
        if fitted is not None:
            limits.append(fitted)
    return min(limits) if limits else None
