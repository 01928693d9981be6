"""What-ifs: what a change to a training job saves, computed from its measured categories.

The one place these savings are written: the advice (advice.py), ``gputui estimate``'s what-if table
(for the changes it cannot run on fake tensors) and the live job's report all use them. Each takes the
live bytes by category at one moment (a phase's peak) and says how many bytes the change frees then.
Parameters, gradients and optimizer state do not depend on the batch; activations grow with it.
"""

from __future__ import annotations

from collections.abc import Callable

from gputui.model import MemoryCategories

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
