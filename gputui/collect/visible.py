"""CUDA_VISIBLE_DEVICES as CUDA reads it: which GPUs and MIG instances a CUDA program would see.

Entries are NVML indices, GPU UUIDs or MIG UUIDs (also the older MIG-GPU-<uuid>/<gi>/<ci> form),
each UUID possibly shortened to a unique prefix. Like CUDA, the list stops at the first entry that is
invalid, ambiguous or repeated; an empty value hides every GPU; unset shows them all. We assume
PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID, or GPUs of one model), which is NVML's order.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from gputui.model import Device

VARIABLE = "CUDA_VISIBLE_DEVICES"

# A key of parse_visible_devices: an NVML index for a whole GPU, a "MIG-..." UUID for an instance.
Target = int | str


def parse_visible_devices(value: str | None, devices: Sequence[Device]) -> dict[Target, int]:
    """Map each GPU (NVML index) or MIG instance (its UUID) that CUDA would see to its CUDA index."""
    if value is None:
        return {d.index: i for i, d in enumerate(sorted(devices, key=lambda d: d.index))}
    visible: dict[Target, int] = {}
    for entry in value.split(","):
        target = _resolve(entry.strip(), devices)
        if target is None or target in visible:
            break  # CUDA ignores this entry and everything after it
        visible[target] = len(visible)
    return visible


def _resolve(entry: str, devices: Sequence[Device]) -> Target | None:
    if not entry:
        return None
    if entry.isdigit():  # CUDA also rejects negative numbers ("-1" is the usual "no GPU")
        index = int(entry)
        return index if any(d.index == index for d in devices) else None
    upper = entry.upper()
    if upper.startswith("MIG-GPU-"):  # MIG-GPU-<gpu uuid>/<gi>/<ci>, drivers before R470
        return _resolve_old_mig(entry[4:], devices)
    if upper.startswith("MIG-"):
        matches = [m.uuid for d in devices for m in d.mig_instances
                   if m.uuid and m.uuid.upper().startswith(upper)]
        return matches[0] if len(matches) == 1 else None
    if upper.startswith("GPU-"):
        indices = [d.index for d in devices if d.uuid and d.uuid.upper().startswith(upper)]
        return indices[0] if len(indices) == 1 else None
    return None


def _resolve_old_mig(spec: str, devices: Sequence[Device]) -> Target | None:
    parts = spec.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    gpu_uuid, gi, ci = parts[0].upper(), int(parts[1]), int(parts[2])
    matches = [m.uuid for d in devices if d.uuid and d.uuid.upper().startswith(gpu_uuid)
               for m in d.mig_instances
               if m.uuid and m.gpu_instance_id == gi and m.compute_instance_id == ci]
    return matches[0] if len(matches) == 1 else None


def with_cuda_indices(devices: Sequence[Device], environ: Mapping[str, str]) -> tuple[Device, ...]:
    """The devices with ``cuda_index`` set (or None when hidden) for the given environment."""
    visible = parse_visible_devices(environ.get(VARIABLE), devices)
    out = []
    for device in devices:
        instances = tuple(
            dataclasses.replace(m, cuda_index=visible.get(m.uuid) if m.uuid else None)
            for m in device.mig_instances
        )
        out.append(dataclasses.replace(device, cuda_index=visible.get(device.index),
                                       mig_instances=instances))
    return tuple(out)


def is_visible(device: Device) -> bool:
    """True when CUDA sees the GPU itself or one of its MIG instances."""
    return device.cuda_index is not None or any(m.cuda_index is not None for m in device.mig_instances)
