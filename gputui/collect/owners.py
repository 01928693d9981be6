"""Whose each GPU process is, from what the host already says: its cgroup, its environment, and the
runtimes' state on disk (no daemon asked, no gRPC).

``parse_cgroup`` is pure: a /proc/PID/cgroup text (cgroup v1 or v2, systemd or cgroupfs driver) to the
container, pod, Slurm job and unit it names. ``OwnerReader`` reads through a ``Files`` (the host's, or
the simulated machine's for ``--demo``), names what it can, says once per process why it could not,
and reads each process once per life (pid and start time).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

from gputui.model import ContainerOwner, Owner, PodOwner, SlurmOwner
from gputui.model.codec import parse_json
from gputui.model.owner import Runtime
from gputui.model.record import Record

HEX_ID = r"[0-9a-f]{64}"
# systemd driver scopes: "docker-ID.scope", "cri-containerd-ID.scope", "crio-ID.scope", "libpod-ID.scope"
_SCOPE = re.compile(rf"^(docker|cri-containerd|nerdctl|crio|libpod)-({HEX_ID})\.scope$")
_SCOPE_RUNTIME: dict[str, Runtime] = {"docker": "docker", "cri-containerd": "containerd", "nerdctl": "containerd",
                                      "crio": "cri-o", "libpod": "podman"}
# cgroupfs driver parents: "/docker/ID", "/libpod_parent/libpod-ID" ...
_PARENT_RUNTIME: dict[str, Runtime] = {"docker": "docker", "libpod_parent": "podman"}
_POD_SLICE = re.compile(r"^kubepods(?:-[a-z]+)?-pod([0-9a-f_]{36})\.slice$")  # systemd driver: "_" for "-"
_POD_DIR = re.compile(r"^pod([0-9a-f-]{36})$")  # cgroupfs driver
_JOB = re.compile(r"^job_(\d+)$")
_STEP = re.compile(r"^step_(\w+)$")
# Units that say nothing of an owner: a login session, the user's own manager, systemd's init scope.
_NOT_OWNERS = re.compile(r"^(session-.*\.scope|user@\d+\.service|init\.scope|slurmstepd\.scope|.*\.slice)$")

NAMES_LIMIT = 4 << 20  # a runtime's state file: podman's containers.json grows with every container
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
GPU_RESOURCE = "nvidia.com/"  # nvidia.com/gpu, and MIG's nvidia.com/mig-1g.10gb ...


@dataclass(frozen=True, eq=False, repr=False)
class CgroupFacts(Record):
    """What a cgroup path says of its process."""

    runtime: Runtime | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    slurm_job: str | None = None
    slurm_step: str | None = None
    unit: str | None = None


def parse_cgroup(text: str) -> CgroupFacts:
    """The facts of a /proc/PID/cgroup: v2's one line "0::/path", or v1's lines "N:controllers:/path".

    Under v1 each controller has a path of its own (Slurm's job under memory, systemd's unit under
    name=systemd): the facts of all of them are put together, the first path to say each one winning.
    """
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for key, value in _path_facts(parts[2]).items():
                if value is not None and found.get(key) is None:
                    found[key] = value
    if found.get("container_id") or found.get("pod_uid") or found.get("slurm_job"):
        found["unit"] = None  # then the unit is the runtime's or slurmd's (v1's name=systemd), not an owner
    return CgroupFacts(**found)  # type: ignore[arg-type]  # keys are CgroupFacts' fields


def _path_facts(path: str) -> dict[str, str | None]:
    facts: dict[str, str | None] = {}
    names = [n for n in path.split("/") if n]
    for i, name in enumerate(names):
        parent = names[i - 1] if i else ""
        if (m := _SCOPE.match(name)) is not None:
            facts.update(runtime=_SCOPE_RUNTIME[m[1]], container_id=m[2])
        elif re.fullmatch(HEX_ID, name) and facts.get("container_id") is None:
            # cgroupfs: "/docker/ID", or a pod's container "/kubepods/burstable/podUID/ID" (no runtime said)
            facts.update(runtime=_PARENT_RUNTIME.get(parent), container_id=name)
        elif (m := _POD_SLICE.match(name)) is not None:
            facts["pod_uid"] = m[1].replace("_", "-")
        elif (m := _POD_DIR.match(name)) is not None and "kubepods" in names[:i]:
            facts["pod_uid"] = m[1]
        elif (m := _JOB.match(name)) is not None:
            facts["slurm_job"] = m[1]
        elif (m := _STEP.match(name)) is not None and facts.get("slurm_job") is not None:
            facts["slurm_step"] = m[1]
        elif name.endswith((".service", ".scope")) and not _NOT_OWNERS.match(name):
            facts["unit"] = name
    return facts


class Files(Protocol):
    """The files the owners are read from: the host's, or the simulated machine's."""

    def read(self, path: str, limit: int) -> bytes:
        """The file's bytes (at most ``limit``); OSError when it cannot be read."""
        ...

    def listdir(self, path: str) -> list[str]:
        """The names in a directory; OSError when it cannot be listed."""
        ...


class HostFiles:
    """The machine's own files, under ``root`` (a fake tree in tests)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = os.fspath(root)

    def _at(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path: str, limit: int) -> bytes:
        # O_NONBLOCK: these paths are fixed, but a runtime's directory is no place to hang on a FIFO.
        fd = os.open(self._at(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self._at(path))


def _why(exc: OSError) -> str:
    return "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))


SCONTROL_SECONDS = 2.0  # a slurmctld that does not answer must not stall a sample for longer


class Scontrol:
    """A Slurm job's user and name from ``scontrol show job -o``, where scontrol is installed: asked
    once per job (cached, failures too), with a timeout."""

    def __init__(self, run: Callable[[str], str | None] | None) -> None:
        """``run(job)`` is scontrol's output for a job, None where it failed; ``run`` None: no scontrol."""
        self.run = run
        self._jobs: dict[str, tuple[str | None, str | None]] = {}

    @classmethod
    def installed(cls) -> Scontrol:
        """This machine's scontrol, where it has one."""
        return cls(_run_scontrol if shutil.which("scontrol") else None)

    def job(self, job: str) -> tuple[str | None, str | None] | None:
        """(user, name) of a job; None where there is no scontrol."""
        if self.run is None:
            return None
        if job not in self._jobs:
            self._jobs[job] = _job_fields(self.run(job) or "")
        return self._jobs[job]


def _run_scontrol(job: str) -> str | None:
    try:
        done = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                              timeout=SCONTROL_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _job_fields(line: str) -> tuple[str | None, str | None]:
    """(user, name) from "JobId=81234 JobName=pretrain UserId=bob(1000) ..."."""
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    user = fields.get("UserId", "").split("(", 1)[0] or None
    return user, fields.get("JobName") or None


class OwnerReader:
    """Each process's Owner, read once per process life and cached."""

    def __init__(self, files: Files, environ: Callable[[int], Mapping[str, str] | None], proc: str = "/proc",
                 home: str | None = None, scontrol: Scontrol | None = None) -> None:
        """``environ(pid)`` is a process's environment (None where unread: another user's); ``proc`` where
        the processes' /proc lives within ``files``; ``home`` the user's, where rootless podman keeps its
        containers."""
        self.files = files
        self.environ = environ
        self.scontrol = scontrol if scontrol is not None else Scontrol(None)
        self.proc = proc
        self.home = home if home is not None else os.path.expanduser("~")
        self._cache: dict[int, tuple[float | None, Owner]] = {}

    def owners(self, processes: Mapping[int, tuple[float | None, str | None]]) -> dict[int, Owner]:
        """The owner of each ``pid: (start time, user)``; processes not asked for are forgotten."""
        for pid in [p for p in self._cache if p not in processes]:
            del self._cache[pid]
        found = {}
        for pid, (started, user) in processes.items():
            cached = self._cache.get(pid)
            if cached is None or cached[0] != started:
                cached = self._cache[pid] = (started, self.read(pid, user))
            found[pid] = cached[1]
        return found

    def read(self, pid: int, user: str | None) -> Owner:
        """One process's owner, read now."""
        notes: list[str] = []
        try:
            facts = parse_cgroup(self.files.read(f"{self.proc}/{pid}/cgroup", 64 << 10).decode(errors="replace"))
        except OSError as exc:
            facts = CgroupFacts()
            notes.append(f"its cgroup could not be read ({_why(exc)})")
        pod = self._pod(facts, notes) if facts.pod_uid is not None else None
        container = None
        if facts.container_id is not None:
            container = ContainerOwner(runtime=facts.runtime, id=facts.container_id,
                                       name=None if pod is not None else self._container_name(facts, notes))
        return Owner(user=user, container=container, pod=pod, slurm=self._slurm(pid, facts, notes), unit=facts.unit,
                     note="; ".join(notes) or None)

    def _slurm(self, pid: int, facts: CgroupFacts, notes: list[str]) -> SlurmOwner | None:
        """The Slurm job from the cgroup path, its user and name from the job's environment (readable for
        one's own processes), else from scontrol where it is installed."""
        environ = self.environ(pid)
        env = environ or {}
        job = facts.slurm_job or env.get("SLURM_JOB_ID")
        if not job:
            return None
        same = env.get("SLURM_JOB_ID") == job
        step = facts.slurm_step or (env.get("SLURM_STEP_ID") if same else None)
        user, name = (env.get("SLURM_JOB_USER"), env.get("SLURM_JOB_NAME")) if same else (None, None)
        if user is None or name is None:
            asked = self.scontrol.job(job)
            if asked is not None:
                user, name = user or asked[0], name or asked[1]
            if user is None and name is None:
                notes.append("the Slurm job's user and name: " + (
                    "its environment is another user's" if environ is None else "its environment does not say")
                    + (" and scontrol does not know the job" if asked is not None else " and scontrol is not here"))
        return SlurmOwner(job=job, step=step, user=user, name=name)

    def _container_name(self, facts: CgroupFacts, notes: list[str]) -> str | None:
        cid = facts.container_id
        if facts.runtime == "docker":
            path = f"/var/lib/docker/containers/{cid}/config.v2.json"
            try:
                config = parse_json(self.files.read(path, NAMES_LIMIT))
            except OSError as exc:
                # one wording for every container, so the cause is said once, not once per container
                notes.append("docker's container names are in /var/lib/docker/containers/ID/config.v2.json, which "
                             f"gputui's user cannot read ({_why(exc)}; root can)")
                return None
            except ValueError:
                notes.append(f"the container's name: {path} is not JSON")
                return None
            name = config.get("Name") if isinstance(config, dict) else None
            return name.lstrip("/") if isinstance(name, str) and name else None
        if facts.runtime == "podman":
            for path in ("/var/lib/containers/storage/overlay-containers/containers.json",
                         f"{self.home}/.local/share/containers/storage/overlay-containers/containers.json"):
                try:
                    listed = parse_json(self.files.read(path, NAMES_LIMIT))
                except (OSError, ValueError):
                    continue
                for entry in listed if isinstance(listed, list) else ():
                    if isinstance(entry, dict) and entry.get("id") == cid and entry.get("names"):
                        return str(entry["names"][0])
            notes.append("the container's name: podman's containers.json (root's, or its user's) is not readable "
                         "here or does not list it")
        return None

    def _pod(self, facts: CgroupFacts, notes: list[str]) -> PodOwner:
        """The pod named by the kubelet's log directories: /var/log/pods/NAMESPACE_POD_UID/CONTAINER/."""
        uid = facts.pod_uid or ""
        try:
            directory = next((d for d in self.files.listdir("/var/log/pods") if d.endswith(f"_{uid}")), None)
        except OSError as exc:
            notes.append(f"the pod's name: /var/log/pods cannot be read ({_why(exc)})")
            return PodOwner(uid=uid)
        if directory is None:
            notes.append("the pod's name: /var/log/pods has no directory for its UID")
            return PodOwner(uid=uid)
        namespace, name = directory[:-len(uid) - 1].split("_", 1)
        container = self._pod_container(f"/var/log/pods/{directory}", facts.container_id)
        return PodOwner(uid=uid, namespace=namespace, name=name, container=container,
                        gpus=self._assigned_gpus(uid, container, notes))

    def _assigned_gpus(self, uid: str, container: str | None, notes: list[str]) -> tuple[str, ...]:
        """The devices the kubelet gave the container, from its device-plugin checkpoint (JSON the kubelet
        writes; the pod-resources socket says the same over gRPC, a dependency this avoids)."""
        try:
            checkpoint = parse_json(self.files.read(CHECKPOINT, NAMES_LIMIT))
        except OSError as exc:
            notes.append(f"the pod's assigned GPUs: {CHECKPOINT} cannot be read ({_why(exc)})")
            return ()
        except ValueError:
            notes.append(f"the pod's assigned GPUs: {CHECKPOINT} is not JSON")
            return ()
        data = checkpoint.get("Data") if isinstance(checkpoint, dict) else None
        entries = data.get("PodDeviceEntries") if isinstance(data, dict) else None
        found: list[str] = []
        for entry in entries if isinstance(entries, list) else ():
            if (isinstance(entry, dict) and entry.get("PodUID") == uid
                    and str(entry.get("ResourceName")).startswith(GPU_RESOURCE)
                    and (container is None or entry.get("ContainerName") == container)):
                ids = entry.get("DeviceIDs")
                # by NUMA node ({"0": [...]}) since Kubernetes 1.20, a plain list before
                lists = ids.values() if isinstance(ids, dict) else [ids]
                found += [str(i) for ids_ in lists if isinstance(ids_, list) for i in ids_]
        return tuple(sorted(set(found)))

    def _pod_container(self, directory: str, cid: str | None) -> str | None:
        """The container's name: /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log names it by its id;
        without that link, a pod's only container is the one."""
        try:
            if cid is not None:
                for link in self.files.listdir("/var/log/containers"):
                    if link.endswith(f"-{cid}.log"):
                        return link[:-len(cid) - 5].rsplit("_", 1)[-1]
        except OSError:
            pass
        try:
            containers = self.files.listdir(directory)
        except OSError:
            return None
        return containers[0] if len(containers) == 1 else None
