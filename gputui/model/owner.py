"""Whose a GPU process is: its user, container, Kubernetes pod, Slurm job and systemd unit.

Read from what the host already says (the process's cgroup, its environment, the runtimes' state on
disk) by gputui/collect/owners.py. ``Owner.most_specific()`` is the most specific of them, the one word the
OWNER column, ``--once`` and the grouping by owner use; ``Owner.key`` is what a summary groups by.

What a process can set itself never stands as the kubelet's or slurmd's word: a Slurm job its
environment alone names is marked so (``SlurmOwner.source``), a container in a cgroup its user made
is marked rootless, and both are grouped apart from other users' (``Owner.key``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gputui.model.fielddoc import doc
from gputui.model.record import Record

Runtime = Literal["docker", "containerd", "cri-o", "podman"]
RUNTIMES: tuple[Runtime, ...] = ("docker", "containerd", "cri-o", "podman")
SlurmSource = Literal["cgroup", "environment"]
SLURM_SOURCES: tuple[SlurmSource, ...] = ("cgroup", "environment")
FROM_CGROUP: SlurmSource = "cgroup"
FROM_ENVIRONMENT: SlurmSource = "environment"
SHORT_ID = 12  # how docker and podman show a container id


@dataclass(frozen=True, eq=False, repr=False)
class ContainerOwner(Record):
    """The container a process runs in."""

    id: str = field(metadata=doc("the container's full id (64 hex digits)"))
    runtime: Runtime | None = field(default=None, metadata=doc(
        "the container runtime, from the cgroup path; null where the path does not say (Kubernetes' cgroupfs "
        "driver)", enum=RUNTIMES))
    name: str | None = field(default=None, metadata=doc(
        "the container's name where the runtime's state is readable to gputui's user; null otherwise"))
    rootless: bool = field(default=False, metadata=doc(
        "its cgroup is one its user made (beneath `user@UID.service`, or a directory that user owns): a rootless "
        "runtime's container, named only from that user's own state, never grouped with another user's"))

    @property
    def label(self) -> str:
        return self.name or self.id[:SHORT_ID]


@dataclass(frozen=True, eq=False, repr=False)
class PodOwner(Record):
    """The Kubernetes pod a process runs in."""

    uid: str = field(metadata=doc("the pod's UID, from the cgroup path the kubelet made"))
    namespace: str | None = field(default=None, metadata=doc(
        "the pod's namespace, from the kubelet's log directory `/var/log/pods/NAMESPACE_POD_UID`; null where unread"))
    name: str | None = field(default=None, metadata=doc("the pod's name, from the same directory; null where unread"))
    container: str | None = field(default=None, metadata=doc(
        "the container's name within the pod (the log directory's subdirectory); null where unread"))
    gpus: tuple[str, ...] = field(default=(), metadata=doc(
        "the GPUs the kubelet assigned to this container (device ids, GPU UUIDs with NVIDIA's device plugin), from "
        "the kubelet's device-plugin checkpoint; `[]` where none or unread"))

    @property
    def label(self) -> str:
        if self.name is None:
            return f"pod {self.uid[:8]}"
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, eq=False, repr=False)
class SlurmOwner(Record):
    """The Slurm job (and step) a process runs in."""

    job: str = field(metadata=doc("the job id, from the cgroup path or `SLURM_JOB_ID` (see `source`)"))
    step: str | None = field(default=None, metadata=doc(
        'the step: a number, `"batch"` or `"extern"`; null where unread'))
    user: str | None = field(default=None, metadata=doc(
        "the job's user: from slurmd's cgroup path (`/slurm/uid_N/`) or scontrol, else `SLURM_JOB_USER` where it "
        "is the process's own user; null where unread"))
    name: str | None = field(default=None, metadata=doc("the job's name (`SLURM_JOB_NAME`, else scontrol); null "
                                                        "where unread"))
    source: SlurmSource = field(default=FROM_CGROUP, metadata=doc(
        "where the job id comes from: `cgroup` (a cgroup slurmd made: `/slurm/uid_N/job_N` or "
        "`system.slice/slurmstepd.scope/job_N`), or `environment` (the process's own `SLURM_JOB_ID`, no "
        "cgroup of slurmd's holds it: its word only, grouped apart from other users' processes)",
        enum=SLURM_SOURCES))

    @property
    def claimed(self) -> bool:
        """Whether only the process's environment says it (no cgroup of slurmd's)."""
        return self.source == FROM_ENVIRONMENT

    @property
    def label(self) -> str:
        return (f"slurm {self.job}" + (f".{self.step}" if self.step is not None else "")
                + (" (env)" if self.claimed else ""))


@dataclass(frozen=True, eq=False, repr=False)
class Owner(Record):
    """Who a process belongs to, as specifically as the host says."""

    user: str | None = field(default=None, metadata=doc("the process's user name"))
    container: ContainerOwner | None = field(default=None, metadata=doc("its container; null outside one"))
    pod: PodOwner | None = field(default=None, metadata=doc("its Kubernetes pod; null outside one"))
    slurm: SlurmOwner | None = field(default=None, metadata=doc("its Slurm job; null outside one"))
    unit: str | None = field(default=None, metadata=doc(
        'the systemd unit it runs in (a service or a `systemd-run` scope), e.g. `"train.service"`; null for '
        "a login session's processes"))
    note: str | None = field(default=None, metadata=doc(
        "what could not be read and why (e.g. the container's name: its runtime's state is root's); null when "
        "everything was read"))

    def most_specific(self) -> str:
        """The most specific owner, in a few characters: pod, container, Slurm job, unit, then user."""
        if self.pod is not None:
            return self.pod.label
        if self.container is not None:
            return self.container.label
        if self.slurm is not None:
            return self.slurm.label
        if self.unit is not None:
            return self.unit
        return self.user or ""

    def describe(self) -> str:
        """Everything known, for the detail screen: "pod ml/train-0 (container trainer); containerd
        container 3f4e9c0d1a2b; user alice"."""
        parts = []
        if self.pod is not None:
            inside = ", ".join(x for x in (self.pod.container and f"container {self.pod.container}",
                                           self.pod.gpus and f"{len(self.pod.gpus)} GPUs assigned") if x)
            parts.append(f"pod {self.pod.label}" + (f" ({inside})" if inside else ""))
        if self.container is not None:
            parts.append(("rootless " if self.container.rootless else "")
                         + f"{self.container.runtime or 'a'} container {self.container.label}")
        if self.slurm is not None:
            extra = ", ".join(x for x in ("from its environment only" if self.slurm.claimed else "",
                                          self.slurm.name and f"name {self.slurm.name}",
                                          self.slurm.user and f"user {self.slurm.user}") if x)
            parts.append(f"Slurm job {self.slurm.job}" + (f" step {self.slurm.step}" if self.slurm.step else "")
                         + (f" ({extra})" if extra else ""))
        if self.unit is not None:
            parts.append(f"systemd unit {self.unit}")
        if self.user:
            parts.append(f"user {self.user}")
        return "; ".join(parts) + (f" ({self.note})" if self.note else "")

    @property
    def key(self) -> tuple[str, str]:
        """What a grouping or a summary groups processes by: (kind, who), e.g. ("pod", "ml/train-0").

        What its user could name itself (a rootless container's id, a Slurm job its environment claims)
        carries the user, so that it never adds to another user's container or job."""
        if self.pod is not None:
            return ("pod", self.pod.uid if self.pod.name is None else self.pod.label)
        if self.container is not None:
            return ("container", self.container.id + (f" ({self.user or '?'}'s)" if self.container.rootless else ""))
        if self.slurm is not None:
            return ("slurm", self.slurm.job + (f" ({self.user or '?'}'s environment)" if self.slurm.claimed else ""))
        if self.unit is not None:
            return ("unit", self.unit)
        return ("user", self.user or "")
