"""Where a probed process's memory on one device goes: the product's central figure.

Computed once, by :func:`gputui.analysis.breakdown.explain`, and shown the same way by the live
monitor's bar, ``--once``, ``--json`` and ``gputui probe``.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a breakdown can hold, in the order every view lists it: the probe's tensor categories, then
# what the allocator and NVML add (bytes allocated but not categorised, the allocator's cache, its
# fragmentation, and the CUDA context and libraries that only NVML counts).
BREAKDOWN_ITEMS = ("parameters", "gradients", "optimizer_state", "buffers", "activations", "other",
                   "untracked", "cache", "fragmentation", "context")


@dataclass(frozen=True)
class BreakdownItem:
    """One part of a breakdown."""

    key: str  # one of BREAKDOWN_ITEMS
    label: str  # the part in words, e.g. "activations (step 40's peak; freed to the cache between steps)"
    size: int  # bytes


@dataclass(frozen=True)
class Breakdown:
    """The parts of one probed process's memory on one device, and the total they explain."""

    pid: int
    device: str  # the probe's name for the device: "cuda:0", "cpu"
    uuid: str | None  # matches Device.uuid
    items: tuple[BreakdownItem, ...]
    total: int  # NVML's per-process figure when the parts add up to it, else the parts' sum
    nvml: int | None  # NVML's per-process memory on this device, when the driver lists the process
    basis: str  # what the total is, in words
    note: str = ""  # why the parts do not quite add up, when they do not

    def size_of(self, key: str) -> int:
        """Bytes of one part; 0 when the breakdown has none."""
        return next((item.size for item in self.items if item.key == key), 0)
