"""What the analysis says about a job (gputui/analysis/jobs.py): its ranks side by side and what is unusual.

Frozen dataclasses, like verdicts.py's. A "slot" is one rank on one device: a DDP job has one per rank, a
DataParallel process one per GPU, so both are compared the same way. Sizes are bytes, times seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gputui.model.fielddoc import doc
from gputui.model.job import Job
from gputui.model.record import Record
from gputui.model.verdicts import Advice

# Straggler.measure values
LagMeasure = Literal["utilisation", "step time"]


@dataclass(frozen=True, eq=False, repr=False)
class Slot(Record):
    """One rank on one device: the figures the job view shows side by side."""

    pid: int = field(metadata=doc("PID of the rank's process", minimum=1))
    rank: int | None = field(metadata=doc(
        "its rank; null where the environment does not say (DataParallel: one process)", minimum=0))
    device: int | None = field(metadata=doc("NVML index of its GPU; null for a CPU rank", minimum=0))
    gpu_memory: int | None = field(metadata=doc("what NVML charges the rank on this device (bytes)", minimum=0))
    memory_total: int | None = field(metadata=doc("the device's memory (bytes)", minimum=0))
    utilisation: int | None = field(metadata=doc(
        "percent: the process's SM share where the driver says, else the device's", minimum=0))
    step_time: float | None = field(metadata=doc(
        "the probe's median of its recent steps (seconds), once 5 are timed; null before, or unprobed", minimum=0))
    probed: bool = field(default=False, metadata=doc("whether a probe reports from it"))


@dataclass(frozen=True, eq=False, repr=False)
class Imbalance(Record):
    """One slot holding far more memory than the median of the others."""

    pid: int = field(metadata=doc("PID of the rank's process", minimum=1))
    rank: int | None = field(metadata=doc("its rank; null where not known", minimum=0))
    device: int | None = field(metadata=doc("NVML index of its GPU", minimum=0))
    memory: int = field(metadata=doc("what it holds (bytes)", minimum=0))
    others: int = field(metadata=doc("the median of the other slots (bytes)", minimum=0))
    ratio: float = field(metadata=doc("`memory` / `others`", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class Straggler(Record):
    """A rank whose utilisation or step time lags the others'."""

    pid: int = field(metadata=doc("PID of the rank's process", minimum=1))
    rank: int | None = field(metadata=doc("its rank; null where not known", minimum=0))
    measure: LagMeasure = field(metadata=doc("what lags", enum=("utilisation", "step time")))
    value: float = field(metadata=doc("its figure: percent, or seconds per step"))
    others: float = field(metadata=doc("the median of the other ranks, in the same unit"))


@dataclass(frozen=True, eq=False, repr=False)
class FirstOom(Record):
    """The slot that runs out of memory first at the current trends."""

    pid: int = field(metadata=doc("PID of the rank's process", minimum=1))
    rank: int | None = field(metadata=doc("its rank; null where not known", minimum=0))
    device: int | None = field(metadata=doc("NVML index of its GPU", minimum=0))
    seconds: float = field(metadata=doc("seconds until its device is full", minimum=0))
    rate: float = field(metadata=doc("its growth (bytes/s)"))


@dataclass(frozen=True, eq=False, repr=False)
class ShardedModel(Record):
    """A sharded job's model (FSDP2), added up over its probed ranks: each rank holds only its shard."""

    parameters: int = field(metadata=doc("the whole model's parameters, all shards (bytes)", minimum=0))
    gradients: int = field(metadata=doc("its gradients, all shards (bytes)", minimum=0))
    optimizer_state: int = field(metadata=doc("its optimizer state, all shards (bytes)", minimum=0))
    gathered: int = field(metadata=doc(
        "the most any rank gathered unsharded at once, its latest measured step's peak (bytes)", minimum=0))
    ranks: int = field(metadata=doc("the probed ranks added up", minimum=0))
    world_size: int | None = field(metadata=doc("the job's ranks, where known", minimum=1))


@dataclass(frozen=True, eq=False, repr=False)
class JobAnalysis(Record):
    """A job's slots and verdicts, for the job view, the job detail screen and --once."""

    job: Job = field(metadata=doc("the job judged"))
    slots: tuple[Slot, ...] = field(default=(), metadata=doc("its ranks on their devices, side by side"))
    imbalance: Imbalance | None = field(default=None, metadata=doc(
        "a slot holding far more memory than the others; null where none does"))
    stragglers: tuple[Straggler, ...] = field(default=(), metadata=doc("ranks that lag the others"))
    first_oom: FirstOom | None = field(default=None, metadata=doc(
        "the slot that runs out of memory first at the current trends; null where none grows"))
    advice: tuple[Advice, ...] = field(default=(), metadata=doc("what to do about it, the first thing first"))
    model: ShardedModel | None = field(default=None, metadata=doc(
        "a sharded job's whole model; null for replicas (DDP) or unprobed jobs"))
