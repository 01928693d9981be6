"""The memory breakdown of a probed process, computed in one place for every view.

The probe knows the tensor categories and the caching allocator; NVML knows what the driver charges
the process. Together they explain the whole NVML figure: the categories, bytes allocated but not
categorised, the allocator's cache (reserved minus allocated, less its fragmentation), its
fragmentation (free bytes stuck in split blocks) and the CUDA context and libraries (NVML minus
reserved). Where the figures disagree the breakdown says so in ``note`` instead of hiding it.
"""

from __future__ import annotations

from gputui.model import TENSOR_CATEGORIES, MemoryCategories, ProbeDevice, ProbeReport, Snapshot
from gputui.model.breakdown import BREAKDOWN_ITEMS, Breakdown, BreakdownItem
from gputui.units import size

LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "buffers": "buffers (BatchNorm statistics, encodings)",
    "activations": "activations",
    "gathered": "gathered parameters (FSDP, unsharded for forward/backward)",
    "other": "other tensors",
    "untracked": "allocated, not categorised",
    "untracked_growth": "untracked growth",
    "cache": "allocator cache (reserved, free to reuse)",
    "fragmentation": "fragmentation (inactive split blocks)",
    "context": "CUDA context and libraries (NVML - reserved)",
}


def explain(pid: int, device: ProbeDevice | None, nvml: int | None,
            untracked: tuple[int, int] | None = None) -> Breakdown | None:
    """The breakdown of one probed device; None when the probe has no figures for it yet.

    ``nvml`` is the memory the driver charges process ``pid`` on that device (None when unlisted).
    ``untracked``: a CPU-only job's untracked growth (bytes, since which step; see
    leaks.untracked_growth), shown as a part of its own: tensors the probe cannot attribute (a list
    of them, a running total's graphs) show nowhere else.
    """
    if device is None:
        return None
    alloc, cats = device.allocator, device.categories
    sizes: dict[str, int] = {}
    if cats is not None:
        for key in TENSOR_CATEGORIES:
            value = getattr(cats, key)
            if value:
                sizes[key] = value
        if cats.gathered:
            sizes["gathered"] = cats.gathered
    note = ""
    # Activations read between steps are the last measured step's peak: not allocated now, but
    # the room the next step's forward pass will take again, kept in the allocator's cache. So are
    # the parameters FSDP2 gathers (always a step's peak).
    between = cats is not None and cats.activations_step is not None
    in_cache = (sizes.get("activations", 0) if between else 0) + sizes.get("gathered", 0)
    if alloc is not None:
        tracked = sum(sizes.values()) - in_cache
        if alloc.allocated > tracked:
            sizes["untracked"] = alloc.allocated - tracked
        elif tracked > alloc.allocated:
            note = (f"the categories hold {size(tracked - alloc.allocated)} more than the "
                    "allocator counts as allocated (a tensor counted twice, or a report taken "
                    "mid-step)")
        held = max(0, alloc.reserved - alloc.allocated)
        split = min(held, alloc.inactive_split or 0)
        if in_cache > held - split:
            note = (f"the activations of {cats.activations_when() if cats else ''} are more than the "
                    "allocator's cache holds now (it was emptied, or the next step needs new memory)")
        elif held - split - in_cache:
            sizes["cache"] = held - split - in_cache
        if split:
            sizes["fragmentation"] = split
        if nvml is not None:
            if nvml >= alloc.reserved:
                if nvml - alloc.reserved:
                    sizes["context"] = nvml - alloc.reserved
            else:
                note = (f"NVML counts {size(alloc.reserved - nvml)} less than the allocator "
                        "reserves (the two were read at different moments)")
    if alloc is None and untracked is not None:
        sizes["untracked_growth"] = untracked[0]
    if not sizes:
        return None
    since = untracked[1] if untracked is not None else None
    items = tuple(BreakdownItem(key, _label(key, cats, alloc is not None, since), sizes[key])
                  for key in BREAKDOWN_ITEMS if key in sizes)
    total = sum(item.size for item in items)
    if alloc is not None and nvml is not None and nvml >= alloc.reserved and not note:
        total, basis = nvml, "NVML per-process memory"
    elif alloc is not None:
        basis = "what the allocator reserved" if nvml is None else "allocator and NVML figures"
    elif "untracked_growth" in sizes:
        basis = "tracked tensors and the host memory grown beyond them; no CUDA allocator"
    else:
        basis = "tracked tensors; no CUDA allocator"
    return Breakdown(pid, device.device, device.uuid, items, total, nvml, basis, note)


def _label(key: str, cats: MemoryCategories | None, cached: bool, since: int | None) -> str:
    if key == "untracked_growth":
        return f"untracked growth (host memory beyond the tracked tensors, since step {since})"
    if key == "gathered":
        where = "; freed to the cache between steps" if cached else ""
        return f"{LABELS[key]} (the latest measured step's peak{where})"
    if key == "activations" and cats is not None and cats.activations_step is not None:
        where = "; freed to the cache between steps" if cached else ""
        return f"activations ({cats.activations_when()}{where})"
    return LABELS[key]


def nvml_memory(snapshot: Snapshot | None, pid: int, uuid: str | None) -> int | None:
    """The memory NVML charges process ``pid`` (its own PID namespace's pid) on the device ``uuid``."""
    if snapshot is None or uuid is None:
        return None
    indices = {d.index for d in snapshot.devices if d.uuid == uuid}
    charged = [p.gpu_memory for p in snapshot.processes
               if p.own_pid == pid and p.device_index in indices and p.gpu_memory is not None]
    return sum(charged) if charged else None


# A GPU job keeps a little on the host by design: Adam and AdamW keep each parameter's step counter
# there (4 bytes each, on a real H100 job "optimizer 24B" beside gigabytes on cuda:0). Under this, a
# host entry beside a CUDA device explains nothing and is left out of what the views list.
HOST_SHOWN_FROM = 1 << 20


def devices_shown(report: ProbeReport) -> tuple[ProbeDevice, ...]:
    """The probe's devices worth listing: every CUDA device, and the host unless it only holds crumbs
    beside a CUDA device (a CPU-only job's host entry is always shown)."""
    on_cuda = any(d.allocator is not None for d in report.devices)

    def worth(device: ProbeDevice) -> bool:
        if device.allocator is not None or not on_cuda:
            return True
        held = device.categories.tensor_bytes() if device.categories is not None else None
        return (held or 0) >= HOST_SHOWN_FROM

    return tuple(d for d in report.devices if worth(d))


def breakdown_of(report: ProbeReport, device: ProbeDevice, snapshot: Snapshot | None) -> Breakdown | None:
    """The breakdown of one of the report's devices, with NVML's figure for it from ``snapshot``."""
    # Imported here: the leak analysis loads only where there is a probe to explain,
    # not before the live monitor's first frame, which imports this module through plain's renderer.
    from gputui.analysis.leaks import untracked_growth

    untracked = untracked_growth(report, device.device) if device.allocator is None else None
    return explain(report.pid, device, nvml_memory(snapshot, report.pid, device.uuid), untracked)


def breakdowns(report: ProbeReport, snapshot: Snapshot | None) -> tuple[Breakdown, ...]:
    """The breakdown of every device worth listing, with NVML's figures from ``snapshot``."""
    found = (breakdown_of(report, device, snapshot) for device in devices_shown(report))
    return tuple(b for b in found if b is not None)
