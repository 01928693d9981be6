"""The command-line filters (--only, --only-visible, --user, --pid) applied to a snapshot.

Pure: a snapshot in, a smaller snapshot out. GPU filters drop devices and their processes; user and
PID filters drop processes only, so every chosen GPU is still shown even when nothing matches on it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Mapping

from gputui.collect.visible import VARIABLE, is_visible, with_cuda_indices
from gputui.errors import UserError
from gputui.model import Device, GpuProcess, HostProcess, Snapshot


def select(
    snapshot: Snapshot,
    *,
    only: Iterable[str] = (),
    only_visible: bool = False,
    users: Iterable[str] = (),
    pids: Iterable[int] = (),
    environ: Mapping[str, str] | None = None,
) -> Snapshot:
    """The part of ``snapshot`` the filters ask for. Raises UserError for a GPU that does not exist.

    ``environ`` re-reads CUDA_VISIBLE_DEVICES from that environment; otherwise the CUDA indices the
    collector already set are used.
    """
    only, users, pids = tuple(only), set(users), set(pids)
    if not (only or only_visible or users or pids or environ is not None):
        return snapshot
    devices = snapshot.devices
    if environ is not None:
        devices = with_cuda_indices(devices, environ)
    if only:
        chosen = {_match_gpu(entry, devices) for entry in only}
        devices = tuple(d for d in devices if d.index in chosen)
    if only_visible:
        devices = tuple(d for d in devices if is_visible(d))
    kept = {d.index for d in devices}
    on_kept = [p for p in snapshot.processes if p.device_index in kept]
    processes = tuple(
        p for p in on_kept
        if (not users or p.user in users)
        and (not pids or p.pid in pids or p.local_pid in pids)
    )
    why = _why_empty(snapshot, devices, on_kept, processes, only_visible=only_visible,
                     users=users, pids=pids, environ=environ)
    return dataclasses.replace(snapshot, devices=devices, processes=processes,
                               parents=_ancestors(processes, snapshot.parents),
                               problems=snapshot.problems + why)


def _why_empty(snapshot: Snapshot, devices: tuple[Device, ...], on_kept: list[GpuProcess],
               processes: tuple[GpuProcess, ...], *, only_visible: bool, users: set[str],
               pids: set[int], environ: Mapping[str, str] | None) -> tuple[str, ...]:
    """A line saying which filter left the screen empty, so an empty list is not a mystery."""
    if only_visible and snapshot.devices and not devices:
        value = (os.environ if environ is None else environ).get(VARIABLE)
        shown = "is empty" if value == "" else f"is {value!r}" if value is not None else "is unset"
        here = ", ".join(str(d.index) for d in snapshot.devices)
        return (f"--only-visible: no GPU here is visible to CUDA ({VARIABLE} {shown}; "
                f"the GPUs here are {here})",)
    if processes or not on_kept:
        return ()
    if users and not any(p.user in users for p in on_kept):
        owners = sorted({p.user for p in on_kept if p.user})
        return (f"--user {','.join(sorted(users))}: no GPU process of that user "
                f"(GPU processes here belong to {', '.join(owners) or 'unknown users'})",)
    if pids and not any(p.pid in pids or p.local_pid in pids for p in on_kept):
        return (f"--pid {','.join(str(p) for p in sorted(pids))}: no such process on the GPUs",)
    return ()


def _match_gpu(entry: str, devices: tuple[Device, ...]) -> int:
    """An NVML index, or a GPU UUID or unique prefix of one (any case), to a device index."""
    text = entry.strip()
    if text.isdigit():
        if any(d.index == int(text) for d in devices):
            return int(text)
    else:
        matches = [d.index for d in devices if d.uuid and d.uuid.lower().startswith(text.lower())]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UserError(f"--only {text}: more than one GPU has a UUID starting with that")
    known = ", ".join(f"{d.index} ({d.uuid})" if d.uuid else str(d.index) for d in devices)
    raise UserError(f"--only {text}: no such GPU; the GPUs here are {known or 'none'}")


def _ancestors(processes: tuple[GpuProcess, ...],
               parents: tuple[HostProcess, ...]) -> tuple[HostProcess, ...]:
    """The parent processes still leading to a kept GPU process."""
    by_pid = {p.pid: p for p in parents}
    keep: set[int] = set()
    for process in processes:
        ppid = process.ppid
        while ppid in by_pid and ppid not in keep:
            keep.add(ppid)
            ppid = by_pid[ppid].ppid
    return tuple(p for p in parents if p.pid in keep)
