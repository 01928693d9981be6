"""Whose each GPU process is, from what the host already says: its cgroup, its environment, and the
runtimes' state on disk (no daemon asked, no gRPC).

``parse_cgroup`` is pure: a /proc/PID/cgroup text (cgroup v1 or v2, systemd or cgroupfs driver) to the
container, pod, Slurm job and unit it names. ``OwnerReader`` reads through a ``Files`` (the host's, or
the simulated machine's for ``--demo``), names what it can, says once per process why it could not,
and reads each process once per life (pid and start time).

What a process can set itself is hostile and never outranks what the kernel, the kubelet or slurmd
set: a pod or Slurm job counts only in a cgroup they made (in their places, not in one its user made),
a job's user must be the process's own, a job its environment alone names is marked so, every string
taken in is bounded, and no input can take a sample down (one owner lost, with a note).
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Mapping, NamedTuple, Protocol, TypeVar

from gputui.model import ContainerOwner, Owner, PodOwner, SlurmOwner
from gputui.model.codec import parse_json
from gputui.model.owner import FROM_CGROUP, FROM_ENVIRONMENT, Runtime
from gputui.model.record import Record
from gputui.untrusted import bounded

HEX_ID = r"[0-9a-f]{64}"
# systemd driver scopes: "docker-ID.scope", "cri-containerd-ID.scope", "crio-ID.scope", "libpod-ID.scope"
_SCOPE = re.compile(rf"^(docker|cri-containerd|nerdctl|crio|libpod)-({HEX_ID})\.scope$")
_SCOPE_RUNTIME: dict[str, Runtime] = {"docker": "docker", "cri-containerd": "containerd", "nerdctl": "containerd",
                                      "crio": "cri-o", "libpod": "podman"}
# cgroupfs driver parents: "/docker/ID", "/libpod_parent/libpod-ID" ...
_PARENT_RUNTIME: dict[str, Runtime] = {"docker": "docker", "libpod_parent": "podman"}
_POD_SLICE = re.compile(r"^kubepods(?:-[a-z]+)?-pod([0-9a-f_]{36})\.slice$")  # systemd driver: "_" for "-"
_POD_DIR = re.compile(r"^pod([0-9a-f-]{36})$")  # cgroupfs driver
# The kubelet's own levels above a pod: it makes pods only there, at the top of the hierarchy.
_KUBEPODS = re.compile(r"^(kubepods(-[a-z]+)?\.slice|kubepods|burstable|besteffort)$")
_JOB = re.compile(r"^job_(\d+)$")
_STEP = re.compile(r"^step_(\w+)$")
# Where slurmd makes a job's cgroup: v1 /slurm/uid_N/job_N (slurm_NODE with several slurmd on a node),
# v2 /system.slice/slurmstepd.scope/job_N (NODE_slurmstepd.scope).
_SLURM_ROOT = re.compile(r"^slurm(_[\w.-]+)?$")
_UID_DIR = re.compile(r"^uid_(\d+)$")
_STEPD = re.compile(r"^([\w.-]+_)?slurmstepd\.scope$")
# systemd hands this subtree to its user (Delegate=yes): whatever lies beneath, the user made.
_USER_MANAGER = re.compile(r"^user@\d+\.service$")
# Units that say nothing of an owner: a login session, the user's own manager, systemd's init scope.
_NOT_OWNERS = re.compile(r"^(session-.*\.scope|user@\d+\.service|init\.scope|(.*_)?slurmstepd\.scope|.*\.slice)$")
_JOB_ID = re.compile(r"^\d{1,20}$")  # SLURM_JOB_ID: a number (an array task has one of its own)
_STEP_ID = re.compile(r"^\w{1,20}$")

NAMES_LIMIT = 4 << 20  # a runtime's state file: podman's containers.json grows with every container
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
GPU_RESOURCE = "nvidia.com/"  # nvidia.com/gpu, and MIG's nvidia.com/mig-1g.10gb ...
POD_LOGS = "/var/log/pods"
CONTAINER_LOGS = "/var/log/containers"
# Where each cgroup hierarchy is mounted: cgroup v2 alone, or beside v1's controllers ("hybrid").
CGROUP_MOUNTS = "/sys/fs/cgroup"
RACY_SECONDS = 1.0  # a directory read this soon after it changed is read again at the next sample

# A cgroup directory's owner: (controllers, path) -> its uid, None where unknown.
MadeBy = Callable[[str, str], "int | None"]


@dataclass(frozen=True, eq=False, repr=False)
class CgroupFacts(Record):
    """What a cgroup path says of its process."""

    runtime: Runtime | None = None
    container_id: str | None = None
    rootless: bool | None = None  # the container's cgroup is one its user made
    pod_uid: str | None = None
    slurm_job: str | None = None
    slurm_step: str | None = None
    slurm_uid: int | None = None  # the job's user, from slurmd's /slurm/uid_N/
    unit: str | None = None
    refused: str | None = None  # "pod", "Slurm job": named so by a cgroup neither the kubelet nor slurmd made


def parse_cgroup(text: str, made_by: MadeBy | None = None) -> CgroupFacts:
    """The facts of a /proc/PID/cgroup: v2's one line "0::/path", or v1's lines "N:controllers:/path".

    Under v1 each controller has a path of its own (Slurm's job under memory, systemd's unit under
    name=systemd): the facts of all of them are put together, the first path to say each one winning.
    A pod or a Slurm job counts only where the kubelet or slurmd makes them, never in a cgroup its
    user made: beneath ``user@UID.service``, or (``made_by``, where it can tell) a directory not root's.
    """
    found: dict[str, object] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for key, value in _path_facts(parts[1], parts[2], made_by).items():
                if value is not None and found.get(key) is None:
                    found[key] = value
    if found.get("container_id") or found.get("pod_uid") or found.get("slurm_job"):
        found["unit"] = None  # then the unit is the runtime's or slurmd's (v1's name=systemd), not an owner
    return CgroupFacts(**found)  # type: ignore[arg-type]  # keys are CgroupFacts' fields


def _path_facts(controllers: str, path: str, made_by: MadeBy | None) -> dict[str, object]:
    facts: dict[str, object] = {}
    names = [n for n in path.split("/") if n]
    # Seen from inside a cgroup namespace of its own (gputui in a pod) the path starts with "..": what
    # follows is real, the top of the hierarchy is not in view, and no directory can be looked up.
    relative = bool(names) and names[0] == ".."
    while names and names[0] == "..":
        names.pop(0)
    if made_by is None or relative or "." in names or ".." in names:
        made_by = None
    delegated = next((i for i, n in enumerate(names) if _USER_MANAGER.match(n)), None)

    def users_own(i: int) -> bool:
        """Whether the cgroup names[:i + 1] is one its user made."""
        if delegated is not None and i >= delegated:
            return True
        uid = made_by(controllers, "/" + "/".join(names[:i + 1])) if made_by is not None else None
        return uid not in (None, 0)

    for i, name in enumerate(names):
        parent = names[i - 1] if i else ""
        if (m := _SCOPE.match(name)) is not None:
            facts.update(runtime=_SCOPE_RUNTIME[m[1]], container_id=m[2], rootless=users_own(i) or None)
        elif re.fullmatch(HEX_ID, name) and facts.get("container_id") is None:
            # cgroupfs: "/docker/ID", or a pod's container "/kubepods/burstable/podUID/ID" (no runtime said)
            facts.update(runtime=_PARENT_RUNTIME.get(parent), container_id=name, rootless=users_own(i) or None)
        elif (m := _POD_SLICE.match(name) or (_POD_DIR.match(name) if "kubepods" in names[:i] else None)) is not None:
            if all(_KUBEPODS.match(n) for n in names[:i]) and not users_own(i):
                facts["pod_uid"] = m[1].replace("_", "-")
            else:
                facts["refused"] = "pod"
        elif (m := _JOB.match(name)) is not None:
            placed, uid = _slurmd_place(names[:i], relative)
            if placed and not users_own(i):
                facts.update(slurm_job=m[1], slurm_uid=uid)
            else:
                facts["refused"] = "Slurm job"
        elif (m := _STEP.match(name)) is not None and facts.get("slurm_job") is not None:
            facts["slurm_step"] = m[1]
        elif name.endswith((".service", ".scope")) and not _NOT_OWNERS.match(name):
            facts["unit"] = name
    return facts


def _slurmd_place(above: list[str], relative: bool) -> tuple[bool, int | None]:
    """Whether a job_N under ``above`` is where slurmd makes jobs, and the uid its uid_N level names.
    A path seen from a cgroup namespace may begin below the top: then the levels in view must fit."""
    if above and (m := _UID_DIR.match(above[-1])) is not None:
        top = above[:-1]
        fits = (len(top) == 1 and _SLURM_ROOT.match(top[0]) is not None) or (relative and not top)
        return fits, int(m[1])
    if above and _STEPD.match(above[-1]):
        return above[:-1] == ["system.slice"] or (relative and len(above) == 1), None
    return False, None


class FileStat(NamedTuple):
    """Who owns a file or directory, and what changes when it does."""

    uid: int
    mtime_ns: int = 0
    ctime_ns: int = 0
    inode: int = 0
    size: int = 0


class Files(Protocol):
    """The files the owners are read from: the host's, or the simulated machine's."""

    def read(self, path: str, limit: int) -> bytes:
        """The regular file's bytes (at most ``limit``); OSError when it cannot be read."""
        ...

    def listdir(self, path: str) -> list[str]:
        """The names in a directory; OSError when it cannot be listed."""
        ...

    def lstat(self, path: str) -> FileStat:
        """Its owner and times, a link not followed; OSError when there is no such path."""
        ...


class HostFiles:
    """The machine's own files, under ``root`` (a fake tree in tests)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = os.fspath(root)

    def _at(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path: str, limit: int) -> bytes:
        # O_NONBLOCK and a regular file only: a runtime's directory is no place to hang on a FIFO;
        # O_NOFOLLOW: a link there is not the runtime's file.
        fd = os.open(self._at(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self._at(path))

    def lstat(self, path: str) -> FileStat:
        info = os.lstat(self._at(path))
        return FileStat(info.st_uid, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_size)


def _why(exc: OSError) -> str:
    return "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))


def user_name(uid: int) -> str:
    """A uid's user name as psutil gives a process's: the passwd entry's, else the number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


SCONTROL_SECONDS = 2.0  # a slurmctld that does not answer must not stall a sample for longer


@dataclass(frozen=True, eq=False, repr=False)
class SlurmJob(Record):
    """What scontrol says of a job: its user (name and uid) and name."""

    user: str | None = None
    uid: int | None = None
    name: str | None = None


class Scontrol:
    """A Slurm job's user and name from ``scontrol show job -o``, where scontrol is installed: asked
    once per job (cached, failures too), with a timeout."""

    def __init__(self, run: Callable[[str], str | None] | None) -> None:
        """``run(job)`` is scontrol's output for a job, None where it failed; ``run`` None: no scontrol."""
        self.run = run
        self._jobs: dict[str, SlurmJob] = {}

    @classmethod
    def installed(cls) -> Scontrol:
        """This machine's scontrol, where it has one."""
        return cls(_run_scontrol if shutil.which("scontrol") else None)

    def job(self, job: str) -> SlurmJob | None:
        """A job's user and name; None where there is no scontrol."""
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


def _job_fields(line: str) -> SlurmJob:
    """The job of "JobId=81234 JobName=pretrain UserId=bob(1000) ..."."""
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    user, _, uid = fields.get("UserId", "").partition("(")
    uid = uid.rstrip(")")
    return SlurmJob(user=bounded(user) or None, uid=int(uid) if uid.isdigit() and len(uid) < 12 else None,
                    name=bounded(fields.get("JobName", "")) or None)


Answer = TypeVar("Answer")


@dataclass
class _Answers(Generic[Answer]):
    """What one reading of a file or directory said about each key asked of it, and the file as it was."""

    stat: FileStat
    settled: bool  # read over a second after its last change: a later change moves its times
    sample: int
    said: dict[str, Answer]


# What the kubelet's checkpoint says of one pod: each container's GPU devices, or why it was not read.
PodDevices = tuple[tuple[tuple[str | None, tuple[str, ...]], ...], str | None]


class OwnerReader:
    """Each process's Owner, read once per process life and cached. A sample's new processes are read
    together: each runtime directory or state file is read once for all of them (a node's /var/log/pods
    may hold 100,000 entries, the kubelet's checkpoint megabytes), and only what it said of them is
    kept, until the file changes (its times, inode or size)."""

    def __init__(self, files: Files, environ: Callable[[int], Mapping[str, str] | None], proc: str = "/proc",
                 home: str | None = None, scontrol: Scontrol | None = None,
                 wallclock: Callable[[], float] = time.time) -> None:
        """``environ(pid)`` is a process's environment (None where unread: another user's), its values
        bounded where they were read; ``proc`` where the processes' /proc lives within ``files``; ``home``
        the home of gputui's user, where rootless podman keeps that user's containers."""
        self.files = files
        self.environ = environ
        self.scontrol = scontrol if scontrol is not None else Scontrol(None)
        self.proc = proc
        self.home = home if home is not None else os.path.expanduser("~")
        self.me = user_name(os.geteuid())
        self.wallclock = wallclock
        self._cache: dict[int, tuple[float | None, Owner]] = {}
        self._answers: dict[str, _Answers] = {}
        self._sample = 0

    def owners(self, processes: Mapping[int, tuple[float | None, str | None]]) -> dict[int, Owner]:
        """The owner of each ``pid: (start time, user)``; processes not asked for are forgotten."""
        self._sample += 1
        for pid in [p for p in self._cache if p not in processes]:
            del self._cache[pid]
        fresh = {pid: user for pid, (started, user) in processes.items()
                 if (cached := self._cache.get(pid)) is None or cached[0] != started}
        facts = {pid: self._guarded(self._facts, pid) for pid in fresh}
        self._read_ahead([f[0] for f in facts.values() if isinstance(f, tuple)])
        for pid, user in fresh.items():
            self._cache[pid] = (processes[pid][0], self._owner(pid, user, facts[pid]))
        return {pid: self._cache[pid][1] for pid in processes}

    def read(self, pid: int, user: str | None) -> Owner:
        """One process's owner, read now."""
        return self._owner(pid, user, self._guarded(self._facts, pid))

    @staticmethod
    def _guarded(read: Callable[..., Answer], *args: object) -> Answer | str:
        """``read(*args)``, or what went wrong in words: nothing in what the reader reads can take a sample
        down; input no reader expected costs that one owner (its user is kept), with a note."""
        try:
            return read(*args)
        except Exception as exc:  # noqa: BLE001 - one hostile entry costs one owner, never the sample
            return f"its owner could not be read ({type(exc).__name__}: {bounded(str(exc))})"

    def _owner(self, pid: int, user: str | None, facts: tuple[CgroupFacts, list[str]] | str) -> Owner:
        owner = self._guarded(self._named, pid, user, facts) if isinstance(facts, tuple) else facts
        return owner if isinstance(owner, Owner) else Owner(user=user, note=owner)

    def _facts(self, pid: int) -> tuple[CgroupFacts, list[str]]:
        """What its cgroup path says, and the notes that go with it."""
        notes: list[str] = []
        try:
            text = self.files.read(f"{self.proc}/{pid}/cgroup", 64 << 10).decode(errors="replace")
            facts = parse_cgroup(text, self._made_by)
        except OSError as exc:
            facts = CgroupFacts()
            notes.append(f"its cgroup could not be read ({_why(exc)})")
        if facts.refused is not None:
            agent = "the kubelet" if facts.refused == "pod" else "slurmd"
            notes.append(f"its cgroup is named like a {facts.refused}'s, but not one {agent} made (its user made it, "
                         "or it is out of place): not taken as one")
        return facts, notes

    def _read_ahead(self, facts: list[CgroupFacts]) -> None:
        """Read the kubelet's directories and checkpoint once for all of a sample's new pod processes; each
        process's own reading then finds its answer (or its error) kept."""
        pods = {f.pod_uid for f in facts if f.pod_uid is not None}
        containers = {f.container_id for f in facts if f.pod_uid is not None and f.container_id is not None}
        for path, keys, scan in ((POD_LOGS, pods, self._scan_pod_logs), (CHECKPOINT, pods, self._scan_checkpoint),
                                 (CONTAINER_LOGS, containers, self._scan_container_logs)):
            if keys:
                self._guarded(self._lookup, path, keys, scan)

    def _named(self, pid: int, user: str | None, found: tuple[CgroupFacts, list[str]]) -> Owner:
        facts, notes = found[0], list(found[1])
        pod = self._pod(facts, notes) if facts.pod_uid is not None else None
        container = None
        if facts.container_id is not None:
            container = ContainerOwner(runtime=facts.runtime, id=facts.container_id, rootless=bool(facts.rootless),
                                       name=None if pod is not None else self._container_name(facts, user, notes))
        return Owner(user=user, container=container, pod=pod, slurm=self._slurm(pid, user, facts, notes),
                     unit=facts.unit, note="; ".join(notes) or None)

    def _made_by(self, controllers: str, path: str) -> int | None:
        """The uid that owns a cgroup's directory (the kubelet's and slurmd's are root's; a user's own
        are that user's), None where no hierarchy mounted here holds it."""
        if controllers:  # v1: "memory", "cpu,cpuacct", "name=systemd"
            mounts = [f"{CGROUP_MOUNTS}/{controllers.removeprefix('name=')}"]
        else:  # v2: beside v1 ("hybrid") or alone
            mounts = [f"{CGROUP_MOUNTS}/unified", CGROUP_MOUNTS]
        for mount in mounts:
            if "/" in mount[len(CGROUP_MOUNTS) + 1:] or ".." in mount:
                continue
            try:
                return self.files.lstat(mount + path).uid
            except OSError:
                continue
        return None

    def _lookup(self, path: str, keys: Iterable[str],
                scan: Callable[[str, set[str]], Mapping[str, Answer]]) -> dict[str, Answer]:
        """What ``path`` says of each key: ``scan(path, keys)`` reads it once for all the keys not answered
        since it last changed, and what it said of them is kept (not the whole file: 100,000 entries)."""
        now = self.files.lstat(path)
        kept = self._answers.get(path)
        if kept is None or kept.stat != now or (not kept.settled and kept.sample != self._sample):
            # Two changes within one tick of the file system's clock leave the same times: what was read within
            # a second of a change is read again at the next sample (git's "racy" files).
            settled = self.wallclock() - now.mtime_ns / 1e9 > RACY_SECONDS
            kept = self._answers[path] = _Answers(now, settled, self._sample, {})
        wanted = set(keys) - kept.said.keys()
        if wanted:
            said = scan(path, wanted)
            kept.said.update({key: said[key] for key in wanted})
        return {key: kept.said[key] for key in keys}

    def _slurm(self, pid: int, user: str | None, facts: CgroupFacts, notes: list[str]) -> SlurmOwner | None:
        """The Slurm job from slurmd's cgroup, else from the environment (marked so); its user from
        slurmd's path or scontrol, which must be the process's own; its name from the job's environment,
        else scontrol."""
        environ = self.environ(pid)
        env = environ or {}
        claimed = env.get("SLURM_JOB_ID")
        if facts.slurm_job is not None:
            job, source = facts.slurm_job, FROM_CGROUP
        elif claimed:
            if not _JOB_ID.match(claimed):
                notes.append("its environment's SLURM_JOB_ID is no job id: not taken")
                return None
            job, source = claimed, FROM_ENVIRONMENT
        else:
            return None
        own = claimed == job  # its environment speaks of this very job
        step = facts.slurm_step
        if step is None and own and _STEP_ID.match(env.get("SLURM_STEP_ID", "")):
            step = env["SLURM_STEP_ID"]
        name = env.get("SLURM_JOB_NAME") if own else None
        uid = facts.slurm_uid
        job_user = user_name(uid) if uid is not None else None
        asked = None
        if job_user is None or name is None:
            asked = self.scontrol.job(job)
            if asked is not None:
                job_user, name, uid = job_user or asked.user, name or asked.name, uid if uid is not None else asked.uid
        whose = user_name(uid) if uid is not None else (asked.user if asked is not None else None)
        if whose is not None and user is not None and whose != user:
            notes.append(f"its {'environment' if source == FROM_ENVIRONMENT else 'cgroup'} names Slurm job {job}, "
                         "which is another user's: not taken")
            return None
        if job_user is None and own and env.get("SLURM_JOB_USER") == user:
            job_user = user
        if source == FROM_ENVIRONMENT:
            notes.append("its Slurm job is its environment's word only (SLURM_JOB_ID; no cgroup of slurmd's holds it)")
        if job_user is None and name is None:
            notes.append("the Slurm job's user and name: " + (
                "its environment is another user's" if environ is None else "its environment does not say")
                + (" and scontrol does not know the job" if asked is not None else " and scontrol is not here"))
        return SlurmOwner(job=job, step=step, user=job_user, name=name, source=source)

    def _container_name(self, facts: CgroupFacts, user: str | None, notes: list[str]) -> str | None:
        """The name its runtime gave it: root's runtimes' state for a container in a cgroup root made;
        for a rootless one (its user's own cgroup, its user's own id), that user's state alone."""
        cid = facts.container_id or ""
        if facts.rootless:
            if facts.runtime == "podman" and user == self.me:
                return self._podman_name(cid, (f"{self.home}/{PODMAN_STORE}",), notes)
            notes.append("a rootless container's name is in its user's own runtime state, which gputui reads for "
                         "its own user only")
            return None
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
            return bounded(name.lstrip("/")) if isinstance(name, str) and name else None
        if facts.runtime == "podman":
            return self._podman_name(cid, (f"/var/lib/containers/{PODMAN_STORE}", f"{self.home}/{PODMAN_STORE}"),
                                     notes)
        return None

    def _podman_name(self, cid: str, stores: tuple[str, ...], notes: list[str]) -> str | None:
        for path in stores:
            try:
                name = self._lookup(path, (cid,), self._scan_podman_store)[cid]
            except OSError:
                continue
            if name is not None:
                return name
        notes.append("the container's name: podman's containers.json (root's, or its user's) is not readable "
                     "here or does not list it")
        return None

    def _scan_podman_store(self, path: str, ids: set[str]) -> dict[str, str | None]:
        """Each container's first name in podman's containers.json (none where it is not JSON)."""
        try:
            listed = parse_json(self.files.read(path, NAMES_LIMIT))
        except ValueError:
            listed = []
        found: dict[str, str | None] = dict.fromkeys(ids)
        for entry in listed if isinstance(listed, list) else ():
            if isinstance(entry, dict) and entry.get("id") in found and found[entry["id"]] is None:
                names = entry.get("names")
                if isinstance(names, list) and names and isinstance(names[0], str):
                    found[entry["id"]] = bounded(names[0])
        return found

    def _pod(self, facts: CgroupFacts, notes: list[str]) -> PodOwner:
        """The pod named by the kubelet's log directories: /var/log/pods/NAMESPACE_POD_UID/CONTAINER/."""
        uid = facts.pod_uid or ""
        try:
            named = self._lookup(POD_LOGS, (uid,), self._scan_pod_logs)[uid]
        except OSError as exc:
            notes.append(f"the pod's name: {POD_LOGS} cannot be read ({_why(exc)})")
            return PodOwner(uid=uid)
        if named is None:
            notes.append(f"the pod's name: {POD_LOGS} has no NAMESPACE_POD_UID directory for its UID")
            return PodOwner(uid=uid)
        directory, namespace, name = named
        container = self._pod_container(f"{POD_LOGS}/{directory}", facts.container_id)
        return PodOwner(uid=uid, namespace=namespace, name=name, container=container,
                        gpus=self._assigned_gpus(uid, container, notes))

    def _scan_pod_logs(self, path: str, uids: set[str]) -> dict[str, tuple[str, str, str] | None]:
        """(directory, namespace, name) of each pod by its UID, from one listing of the log directories."""
        found: dict[str, tuple[str, str, str] | None] = dict.fromkeys(uids)
        for directory in self.files.listdir(path):
            uid = directory[-36:]
            if uid in found and found[uid] is None and directory[-37:-36] == "_":
                found[uid] = _pod_name(directory, uid)
        return found

    def _assigned_gpus(self, uid: str, container: str | None, notes: list[str]) -> tuple[str, ...]:
        """The devices the kubelet gave the container, from its device-plugin checkpoint (JSON the kubelet
        writes; the pod-resources socket says the same over gRPC, a dependency this avoids)."""
        try:
            devices, problem = self._lookup(CHECKPOINT, (uid,), self._scan_checkpoint)[uid]
        except OSError as exc:
            notes.append(f"the pod's assigned GPUs: {CHECKPOINT} cannot be read ({_why(exc)})")
            return ()
        if problem is not None:
            notes.append(f"the pod's assigned GPUs: {CHECKPOINT} {problem}")
            return ()
        return tuple(sorted({i for name, ids in devices if container is None or name == container for i in ids}))

    def _scan_checkpoint(self, path: str, uids: set[str]) -> dict[str, PodDevices]:
        """Each pod's GPU devices by container, from one parse of the checkpoint."""
        try:
            checkpoint = parse_json(self.files.read(path, NAMES_LIMIT))
        except ValueError:
            return dict.fromkeys(uids, ((), "is not JSON"))
        data = checkpoint.get("Data") if isinstance(checkpoint, dict) else None
        entries = data.get("PodDeviceEntries") if isinstance(data, dict) else None
        found: dict[str, list[tuple[str | None, tuple[str, ...]]]] = {uid: [] for uid in uids}
        for entry in entries if isinstance(entries, list) else ():
            if (isinstance(entry, dict) and entry.get("PodUID") in found
                    and str(entry.get("ResourceName")).startswith(GPU_RESOURCE)):
                ids = entry.get("DeviceIDs")
                # by NUMA node ({"0": [...]}) since Kubernetes 1.20, a plain list before
                lists = ids.values() if isinstance(ids, dict) else [ids]
                container = entry.get("ContainerName")
                found[entry["PodUID"]].append((
                    container if isinstance(container, str) else None,
                    tuple(bounded(str(i)) for ids_ in lists if isinstance(ids_, list) for i in ids_)))
        return {uid: (tuple(devices), None) for uid, devices in found.items()}

    def _pod_container(self, directory: str, cid: str | None) -> str | None:
        """The container's name: /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log names it by its id;
        without that link, a pod's only container is the one."""
        if cid is not None:
            try:
                named = self._lookup(CONTAINER_LOGS, (cid,), self._scan_container_logs)[cid]
            except OSError:
                named = None
            if named is not None:
                return named
        try:
            containers = self.files.listdir(directory)
        except OSError:
            return None
        return bounded(containers[0]) if len(containers) == 1 else None

    def _scan_container_logs(self, path: str, ids: set[str]) -> dict[str, str | None]:
        """Each container's name by its id, from the links' names POD_NAMESPACE_CONTAINER-ID.log."""
        found: dict[str, str | None] = dict.fromkeys(ids)
        for link in self.files.listdir(path):
            cid = link[-68:-4]
            if cid in found and link.endswith(".log") and link[-69:-68] == "-":
                found[cid] = bounded(link[:-69].rsplit("_", 1)[-1])
        return found


PODMAN_STORE = ".local/share/containers/storage/overlay-containers/containers.json"


def _pod_name(directory: str, uid: str) -> tuple[str, str, str] | None:
    """(directory, namespace, name) of a log directory NAMESPACE_POD_UID; None for any other shape
    (neither a namespace nor a pod's name has a "_")."""
    namespace, sep, name = directory[:-len(uid) - 1].partition("_")
    if not sep or not namespace or not name or "_" in name:
        return None
    return directory, bounded(namespace), bounded(name)
