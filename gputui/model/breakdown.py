"""Where a probed process's memory on one device goes: the product's central figure.

Computed once, by :func:`gputui.analysis.breakdown.explain`, and shown the same way by the live
monitor's bar, ``--once``, ``--json`` and ``gputui probe``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.model.fielddoc import doc
from gputui.model.record import Record

# What a breakdown can hold, in the order every view lists it: the probe's tensor categories, then
# what the allocator and NVML add (bytes allocated but not categorised, the allocator's cache, its
# fragmentation, and the CUDA context and libraries that only NVML counts). A CPU-only job has no
# allocator: what its host memory beyond the tracked tensors grew by is its untracked growth.
BREAKDOWN_ITEMS = ("parameters", "gradients", "optimizer_state", "buffers", "activations", "gathered", "other",
                   "untracked", "untracked_growth", "cache", "fragmentation", "context")


@dataclass(frozen=True, eq=False, repr=False)
class BreakdownItem(Record):
    """One part of a breakdown."""

    key: str = field(metadata=doc(
        "`parameters`, `gradients`, `optimizer_state`, `buffers`, `activations`, `other` (the probe's tensor "
        "categories), `gathered` (the unsharded parameters FSDP2 gathers, at the latest measured step's peak), "
        "`untracked` (allocated but in no category), `untracked_growth` (a CPU-only job: host "
        "memory beyond the tracked tensors grown since the first measured step), `cache` (reserved, free and "
        "reusable), `fragmentation` (free bytes stuck in split blocks), `context` (the CUDA context and "
        "libraries: NVML less reserved)", enum=BREAKDOWN_ITEMS))
    # e.g. "activations (step 40's peak; freed to the cache between steps)"
    label: str = field(metadata=doc(
        "the part in words, as the monitor shows it (activations read between steps name their step)"))
    size: int = field(metadata=doc("bytes", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class Breakdown(Record):
    """The parts of one probed process's memory on one device, and the total they explain."""

    pid: int = field(metadata=doc("PID of the probed process (as it sees itself)", minimum=1))
    device: str = field(metadata=doc('the probe\'s name for the device: `"cuda:0"`, `"cpu"`'))
    uuid: str | None = field(metadata=doc("the device's UUID, to join with `Device.uuid`"))
    items: tuple[BreakdownItem, ...] = field(metadata=doc("the parts, in the order every view lists them"))
    total: int = field(metadata=doc(
        "NVML's per-process figure when the parts add up to it, else the parts' sum (bytes)", minimum=0))
    nvml: int | None = field(metadata=doc(
        "NVML's per-process memory on the device (bytes); null when the driver does not list the process",
        minimum=0))
    basis: str = field(metadata=doc(
        'what the total is, in words: `"NVML per-process memory"`, `"what the allocator reserved"` ...'))
    note: str = field(default="", metadata=doc(
        "why the parts do not quite add up (figures read at different moments); empty when they do"))

    def size_of(self, key: str) -> int:
        """Bytes of one part; 0 when the breakdown has none."""
        return next((item.size for item in self.items if item.key == key), 0)
