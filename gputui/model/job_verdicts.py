"""What the analysis says about a job (gputui/analysis/jobs.py): its ranks side by side and what is unusual.

Frozen dataclasses, like verdicts.py's. A "slot" is one rank on one device: a DDP job has one per rank, a
DataParallel process one per GPU, so both are compared the same way. Sizes are bytes, times seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gputui.model.job import Job
from gputui.model.verdicts import Advice
from gputui.model.record import Record

# Straggler.measure values
LagMeasure = Literal["utilisation", "step time"]


@dataclass(frozen=True, eq=False, repr=False)
class Slot(Record):
    """One rank on one device: the figures the job view shows side by side."""

    pid: int
    rank: int | None  # None where the environment does not say (DataParallel: one process)
    device: int | None  # NVML index; None for a CPU rank
    gpu_memory: int | None  # what NVML charges the rank on this device
    memory_total: int | None  # the device's memory
    utilisation: int | None  # percent: the process's SM share where the driver says, else the device's
    step_time: float | None  # the probe's median of recent steps; None unprobed
    probed: bool = False


@dataclass(frozen=True, eq=False, repr=False)
class Imbalance(Record):
    """One slot holding far more memory than the median of the others."""

    pid: int
    rank: int | None
    device: int | None
    memory: int
    others: int  # the median of the other slots
    ratio: float  # memory / others


@dataclass(frozen=True, eq=False, repr=False)
class Straggler(Record):
    """A rank whose utilisation or step time lags the others'."""

    pid: int
    rank: int | None
    measure: LagMeasure
    value: float  # percent, or seconds per step
    others: float  # the median of the other ranks, same unit


@dataclass(frozen=True, eq=False, repr=False)
class FirstOom(Record):
    """The slot that runs out of memory first at the current trends."""

    pid: int
    rank: int | None
    device: int | None
    seconds: float  # until its device is full
    rate: float  # its growth, bytes/s


@dataclass(frozen=True, eq=False, repr=False)
class ShardedModel(Record):
    """A sharded job's model (FSDP2), added up over its probed ranks: each rank holds only its shard."""

    parameters: int
    gradients: int
    optimizer_state: int
    gathered: int  # the most any rank gathered unsharded at once (its latest measured step's peak)
    ranks: int  # the probed ranks added up
    world_size: int | None  # the job's ranks, where known


@dataclass(frozen=True, eq=False, repr=False)
class JobAnalysis(Record):
    """A job's slots and verdicts, for the job view, the job detail screen and --once."""

    job: Job
    slots: tuple[Slot, ...] = ()
    imbalance: Imbalance | None = None
    stragglers: tuple[Straggler, ...] = ()
    first_oom: FirstOom | None = None
    advice: tuple[Advice, ...] = ()
    model: ShardedModel | None = None  # a sharded job's whole model; None for replicas (DDP) or unprobed
