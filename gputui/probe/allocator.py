"""Read the CUDA caching allocator: turn torch.cuda.memory_stats() and memory_snapshot() into AllocatorStats.

The parsing functions take the plain dicts and lists torch returns, so they are tested against recorded
outputs on machines without a GPU. The few that call torch (:func:`devices_in_use`,
:func:`memory_snapshot`, :func:`device_uuid`) use its public API only, and only once the process has
initialised CUDA itself.
"""

from __future__ import annotations

import os
import sys

from gputui.model import AllocatorStats

# memory_stats() keys: "<stat>.all.current" / ".peak" aggregate the small and large pools.
_PAIRS = {
    "allocated": "allocated_bytes.all",
    "reserved": "reserved_bytes.all",
    "active": "active_bytes.all",
    "inactive_split": "inactive_split_bytes.all",
    "requested": "requested_bytes.all",
}


def stats_from_memory_stats(
    stats: dict, *, largest_free_block: int | None = None, settings: str | None = None
) -> AllocatorStats | None:
    """AllocatorStats from a ``torch.cuda.memory_stats(device)`` dict; None when the dict is empty.

    An allocator that has never allocated on the device returns an empty dict (or zeros): there is
    nothing to report for it then.
    """
    if not stats or "allocated_bytes.all.current" not in stats:
        return None
    values: dict = {}
    for name, key in _PAIRS.items():
        current = stats.get(f"{key}.current")
        peak = stats.get(f"{key}.peak")
        values[name] = int(current) if current is not None else None
        if name not in ("allocated", "reserved") or peak is not None:
            values[f"{name}_peak"] = int(peak) if peak is not None else None
    segments = stats.get("segment.all.current")
    return AllocatorStats(
        allocated=values["allocated"] or 0,
        reserved=values["reserved"] or 0,
        active=values["active"],
        inactive_split=values["inactive_split"],
        requested=values["requested"],
        allocated_peak=values.get("allocated_peak"),
        reserved_peak=values.get("reserved_peak"),
        active_peak=values.get("active_peak"),
        inactive_split_peak=values.get("inactive_split_peak"),
        requested_peak=values.get("requested_peak"),
        alloc_retries=_int_or_none(stats.get("num_alloc_retries")),
        ooms=_int_or_none(stats.get("num_ooms")),
        segments=_int_or_none(segments),
        largest_free_block=largest_free_block,
        settings=settings,
        expandable_segments=expandable_from_settings(settings),
    )


def largest_free_block(segments: list, device: int) -> int | None:
    """The biggest inactive block on ``device`` in a ``memory_snapshot()`` segment list.

    That is the largest request the allocator can serve from its cache without a new cudaMalloc.
    None when the snapshot has no segment for the device.
    """
    best = None
    for segment in segments:
        if segment.get("device") != device:
            continue
        best = best or 0
        for block in segment.get("blocks", ()):
            if block.get("state") == "inactive":
                best = max(best, int(block.get("size", 0)))
    return best


def allocator_settings(environ=None) -> str | None:
    """The allocator configuration the process runs with (PYTORCH_CUDA_ALLOC_CONF or its new name)."""
    environ = os.environ if environ is None else environ
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = environ.get(name)
        if value:
            return value
    return None


def expandable_from_settings(settings: str | None) -> bool:
    """Whether the allocator settings turn ``expandable_segments`` on (the last mention wins).

    No settings (None) means the allocator's defaults, which do not expand segments: False.
    """
    if settings is None:
        return False
    enabled = False
    for option in settings.split(","):
        key, _, value = option.partition(":")
        if key.strip() == "expandable_segments":
            enabled = value.strip().lower() in ("true", "1")
    return enabled


def _int_or_none(value) -> int | None:
    return int(value) if value is not None else None


def cuda_ready() -> bool:
    """True when torch is loaded and the process itself has initialised CUDA (never initialise it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def devices_in_use() -> list[int]:
    """CUDA device indices the process has allocated on (empty unless CUDA is initialised).

    The allocator's counters are host-side bookkeeping: reading them does not touch the device.
    """
    if not cuda_ready():
        return []
    import torch

    used = []
    for index in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(index)
        if stats.get("reserved_bytes.all.peak", 0) or stats.get("allocated_bytes.all.peak", 0):
            used.append(index)
    return used


def memory_snapshot() -> list:
    """The allocator's segments on every device, each block with the Python frames that asked for it
    while the allocator's history is on (see allocator_history), without the history's event log."""
    import torch

    try:
        return torch.cuda.memory_snapshot(include_traces=False)
    except TypeError:  # torch before 2.6 has no include_traces
        return torch.cuda.memory_snapshot()


def device_uuid(index: int) -> str | None:
    """The device's UUID as NVML spells it ("GPU-..."), to join probe and NVML views."""
    import torch

    uuid = str(torch.cuda.get_device_properties(index).uuid)
    if not uuid:
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
