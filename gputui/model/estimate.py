"""What ``gputui estimate`` found: a training step's memory, phase by phase, against a device.

Sizes are bytes. The phases are those of one training step as the probe names them, with the memory
after the model is built before them and the steady state after the second step behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.model.fielddoc import doc
from gputui.model.probe import MemoryCategories
from gputui.model.record import Record

CREATED, FORWARD, BACKWARD, OPTIMIZER, STEADY = "created", "forward", "backward", "optimizer", "steady"
ESTIMATE_PHASES = (CREATED, FORWARD, BACKWARD, OPTIMIZER, STEADY)
# What --precision and --optimizer offer (gputui/estimate/step.py runs them).
PRECISIONS = ("fp32", "bf16", "fp16", "amp")
OPTIMIZER_CHOICES = ("adam", "adamw", "sgd", "sgd-plain", "adagrad", "rmsprop")
# The table's rows: after model creation, then the peaks of the step's phases, then what stays.
PHASE_WORDS = {CREATED: "model created", FORWARD: "forward", BACKWARD: "backward",
               OPTIMIZER: "optimizer step", STEADY: "steady state"}
# Where a job runs out, in words for the verdict.
RUNS_OUT_WORDS = {CREATED: "building the model", FORWARD: "the forward pass", BACKWARD: "the backward pass",
                  OPTIMIZER: "the optimizer step", STEADY: "between steps"}


@dataclass(frozen=True, eq=False, repr=False)
class PhaseMemory(Record):
    """Live tensor bytes at one phase's peak (or at its end, for created and steady)."""

    phase: str = field(metadata=doc("the phase", enum=list(ESTIMATE_PHASES)))
    categories: MemoryCategories = field(metadata=doc("the live bytes by category at the peak"))
    total: int = field(metadata=doc("every live tensor byte at the peak (bytes)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class PhasePeak(Record):
    """One phase of one step as it ran: its peak."""

    phase: str = field(metadata=doc("the phase", enum=[FORWARD, BACKWARD, OPTIMIZER]))
    total: int = field(metadata=doc("every live tensor byte at the phase's peak (bytes)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class WhatIf(Record):
    """The same job with one change: its peak, and what it saves against the job as asked."""

    change: str = field(metadata=doc('the change, in words: "bf16", "activation checkpointing" ...'))
    peak: int = field(metadata=doc("the changed job's peak (bytes)", minimum=0))
    saving: int = field(metadata=doc("the job's peak less the changed job's (bytes; negative: it costs more)"))
    measured: bool = field(metadata=doc(
        "true: the changed job was run on fake tensors; false: computed from the measured categories"))
    largest_batch: int | None = field(default=None, metadata=doc(
        "the largest batch size that fits the device with the change (with --max-batch; null otherwise "
        "or where the batch does not limit it)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class Headroom(Record):
    """A live probed job's room on one GPU: what it could still take, and what changes would free."""

    device: str = field(metadata=doc('the probe\'s name for the device: `"cuda:0"`'))
    free: int = field(metadata=doc("the GPU's free memory (NVML; bytes)", minimum=0))
    cache: int = field(metadata=doc(
        "the job's allocator cache: reserved less allocated and fragmentation, as the breakdown's (bytes)", minimum=0))
    step_peak: int | None = field(default=None, metadata=doc(
        "the latest measured step's peak allocation (bytes)", minimum=0))
    activations: int | None = field(default=None, metadata=doc(
        "that step's activations at their peak (bytes)", minimum=0))
    batch_factor: float | None = field(default=None, metadata=doc(
        "the largest batch that would fit, as a multiple of the current batch: the room above the step's "
        "peak filled with more of its activations; null where it is withheld", minimum=0))
    what_ifs: tuple[WhatIf, ...] = field(default=(), metadata=doc(
        "the step's peak with one change each, computed from its measured categories"))
    withheld: str | None = field(default=None, metadata=doc(
        "why no largest batch is given: the job's memory grows toward OOM (what grows, how fast, when it "
        "runs out), so the room above its peak is being used up; null: not withheld"))

    @property
    def headroom(self) -> int:
        """What the job could still use now: the GPU's free memory and its own cache."""
        return self.free + self.cache


@dataclass(frozen=True, eq=False, repr=False)
class Estimate(Record):
    """One training step measured without real memory, and the device it was measured against."""

    job: str = field(metadata=doc("SCRIPT:FUNCTION that built the model and batch"))
    optimizer: str = field(metadata=doc("the optimizer stepped, by class name"))
    precision: str = field(metadata=doc("fp32, bf16, fp16 or amp", enum=list(PRECISIONS)))
    checkpointing: bool = field(metadata=doc("activation checkpointing of the model's blocks"))
    phases: tuple[PhaseMemory, ...] = field(metadata=doc(
        "each phase's peak: the highest of the two steps run"))
    timeline: tuple[PhasePeak, ...] = field(metadata=doc(
        "each phase of both steps, in the order they ran: where a device runs out first"))
    activations_peak: int = field(default=0, metadata=doc(
        "the most bytes saved for backward at once, in either step (the probe's `activations_peak`)", minimum=0))
    host_state: int = field(default=0, metadata=doc(
        "optimizer state a GPU job keeps on the host, in no phase's figures: the step counters of Adam and most of "
        "torch's optimizers, unless capturable or fused (bytes)", minimum=0))
    batch_size: int | None = field(default=None, metadata=doc("the batch size asked for; null: the function's own",
                                                              minimum=1))
    device_total: int | None = field(default=None, metadata=doc(
        "the device's total memory (bytes); null: no device given", minimum=0))
    device_usable: int | None = field(default=None, metadata=doc(
        "what tensors may use: the total less the CUDA context (bytes)", minimum=0))
    device_name: str | None = field(default=None, metadata=doc("the device, as named"))
    what_ifs: tuple[WhatIf, ...] = field(default=(), metadata=doc("the same job with one change each"))
    left_out: tuple[str, ...] = field(default=(), metadata=doc(
        'what-ifs asked for that could not be measured here, each with why: "FSDP2 over 8 GPUs, a rank: ..." '
        "(--fsdp2 where this torch has no fake process group, or FSDP2 refuses the model)"))
    largest_batch: int | None = field(default=None, metadata=doc(
        "the largest batch size that fits the device's usable memory (with --max-batch; null otherwise or "
        "where the batch does not limit it)", minimum=0))
    safe_batch: int | None = field(default=None, metadata=doc(
        "the largest batch size that fits with SAFETY_MARGIN of the usable memory held back", minimum=0))

    @property
    def peak(self) -> int:
        return max(p.total for p in self.phases)

    def phase(self, name: str) -> PhaseMemory:
        return next(p for p in self.phases if p.phase == name)

    def runs_out_in(self) -> str | None:
        """The first phase, in the order they ran, whose peak is more than the device's usable memory;
        None where it fits or no device is known."""
        if self.device_usable is None:
            return None
        if self.phase(CREATED).total > self.device_usable:
            return CREATED
        return next((p.phase for p in self.timeline if p.total > self.device_usable), None)

    def fits(self) -> bool | None:
        return None if self.device_usable is None else self.peak <= self.device_usable


# What a device's CUDA context takes before any tensor: 742 MiB on an H100 (docs/validation.md), 500 to
# 750 MiB on other cards and drivers. The usable memory is the total less this.
CUDA_CONTEXT = 742 << 20
# Held back from the usable memory for --max-batch's safe batch: the caching allocator's cache and
# fragmentation, cuBLAS and cuDNN workspaces, which the estimate does not see.
SAFETY_MARGIN = 0.10


def usable(total: int) -> int:
    """What tensors may use of a device with ``total`` bytes."""
    return max(0, total - CUDA_CONTEXT)
