"""Who is wasting GPUs: each owner's GPU memory, its mean SM utilisation over a window, and the GPUs it
holds idle, with the window and thresholds the judgement used (gputui/analysis/waste.py makes it).

Sizes are bytes, times seconds, utilisation percent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gputui.model.fielddoc import doc
from gputui.model.record import Record

OwnerKind = Literal["pod", "container", "slurm", "unit", "user"]
OWNER_KINDS: tuple[OwnerKind, ...] = ("pod", "container", "slurm", "unit", "user")
# Whose utilisation an owner's SM figure is: its processes' own, or its GPUs' standing in where the driver
# gives none for the processes (an upper bound, never lower than theirs): every output says which.
SmSource = Literal["processes", "gpu"]
SM_SOURCES: tuple[SmSource, ...] = ("processes", "gpu")


@dataclass(frozen=True, eq=False, repr=False)
class WasteRules(Record):
    """When an owner's GPU counts as held idle, and the window its mean utilisation is taken over."""

    window: float = field(default=600.0, metadata=doc("the mean SM utilisation's window (seconds)", minimum=0))
    min_memory: int = field(default=1 << 30, metadata=doc(
        "memory an owner holds on a GPU at least, for the GPU to count as held (bytes)", minimum=0))
    max_util: float = field(default=5.0, metadata=doc(
        "SM utilisation under which a held GPU is idle (percent)", minimum=0, maximum=100))
    idle_after: float = field(default=600.0, metadata=doc(
        "how long a GPU must stay held and idle, without a break, before it is called idle (seconds)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class IdleGpu(Record):
    """A GPU an owner has held idle for at least the rules' `idle_after`."""

    device: int = field(metadata=doc("NVML index of the GPU", minimum=0))
    memory: int = field(metadata=doc("memory the owner holds there now (bytes)", minimum=0))
    idle_for: float = field(metadata=doc("how long it has been held idle, as watched (seconds)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class OwnerUse(Record):
    """What one owner (a pod, container, Slurm job, systemd unit or user) holds and does on this machine's GPUs."""

    kind: OwnerKind = field(metadata=doc("what the owner is", enum=OWNER_KINDS))
    name: str = field(metadata=doc(
        '`namespace/pod`, a container\'s name or short id, a Slurm job id, a unit, or a user name ("" where unread)'))
    pids: tuple[int, ...] = field(default=(), metadata=doc("its GPU processes' PIDs", minimum=1))
    gpus: tuple[int, ...] = field(default=(), metadata=doc("NVML indices of the GPUs its processes are on", minimum=0))
    memory: int = field(default=0, metadata=doc("GPU memory it holds now, on all its GPUs (bytes)", minimum=0))
    sm_util: float | None = field(default=None, metadata=doc(
        "its mean SM utilisation over the window, its GPUs weighted alike (percent; where the driver has no "
        "figure for its processes, the GPU's own utilisation stands in, as an upper bound: see `sm_source`); "
        "null where unknown", minimum=0))
    sm_source: SmSource | None = field(default=None, metadata=doc(
        "whose utilisation `sm_util` is: `processes`, its processes' own figures; `gpu`, the GPU's own "
        "utilisation stood in for theirs in some or all of the window's samples, where the driver gave no figure "
        "for them (`sm_util` is then an upper bound, never lower than theirs); null where `sm_util` is, or in a "
        "document of a gputui older than the field", enum=SM_SOURCES))
    idle_for: float = field(default=0.0, metadata=doc(
        "the longest any of its GPUs has been held idle without a break, as watched, even short of `idle_after` "
        "(seconds); 0 when none is", minimum=0))
    idle: tuple[IdleGpu, ...] = field(default=(), metadata=doc(
        "the GPUs it has held idle for `idle_after` or longer"))


@dataclass(frozen=True, eq=False, repr=False)
class Waste(Record):
    """Who holds what on the GPUs and who holds them idle, judged over the samples watched."""

    rules: WasteRules = field(default=WasteRules(), metadata=doc("the window and thresholds used"))
    watched: float = field(default=0.0, metadata=doc(
        "how long this gputui has watched (seconds): no GPU is called idle before `idle_after` of it", minimum=0))
    owners: tuple[OwnerUse, ...] = field(default=(), metadata=doc(
        "each owner of a GPU process, those holding the most idle GPUs first, then the most memory"))

    @property
    def idle_gpus(self) -> int:
        return sum(len(o.idle) for o in self.owners)


@dataclass(frozen=True, eq=False, repr=False)
class OwnerAcross(Record):
    """One owner (a pod, container, Slurm job, unit or user) over the hosts of the many-host view: what
    each host's own judgement says of it, added up."""

    kind: OwnerKind = field(metadata=doc("what the owner is", enum=OWNER_KINDS))
    name: str = field(metadata=doc("its name, as each host's judgement gives it"))
    hosts: tuple[str, ...] = field(default=(), metadata=doc("the hosts it holds GPUs on"))
    gpus: int = field(default=0, metadata=doc("GPUs its processes are on, over all those hosts", minimum=0))
    memory: int = field(default=0, metadata=doc("GPU memory it holds now, over all those hosts (bytes)", minimum=0))
    sm_util: float | None = field(default=None, metadata=doc(
        "its mean SM utilisation, each GPU weighted alike (percent); null where no host knows it", minimum=0))
    sm_source: SmSource | None = field(default=None, metadata=doc(
        "`gpu` where a GPU's own utilisation stood in for some of it on some host (an upper bound), "
        "`processes` where every host read its processes' own; null where unknown", enum=SM_SOURCES))
    idle_gpus: int = field(default=0, metadata=doc("GPUs it holds idle, by each host's rules", minimum=0))
    idle_for: float = field(default=0.0, metadata=doc(
        "the longest any of its GPUs has been held idle on any host (seconds)", minimum=0))
