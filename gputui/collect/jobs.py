"""Training jobs: the processes of one run grouped across their ranks and GPUs.

The evidence, strongest first: children of one launcher process (torchrun, deepspeed, accelerate,
mpirun: the kernel's parent links), then what the ranks' environments share (one Slurm step, one
TORCHELASTIC_RUN_ID, one MASTER_ADDR:MASTER_PORT: ``Placement.rendezvous``), which any process can set
itself, so it groups only processes of one user; a single process on several GPUs (DataParallel) is a
job of one process. ``find_jobs`` is pure; ``JobFinder`` reads what it needs from psutil, each
environment once per process life (its values bounded as they come in), since a /proc read per
process per sample would add up.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from gputui.collect.interfaces import Psutil
from gputui.model import (
    BY_DEVICES,
    BY_LAUNCHER,
    GROUPED_BY,
    PROCESS_DENIED,
    PROCESS_OK,
    GpuProcess,
    GroupedBy,
    HostProcess,
    Job,
    JobDevice,
    JobRank,
    Placement,
    ProbeReport,
    Snapshot,
)
from gputui.model.job import launcher_of
from gputui.model.record import Record
from gputui.untrusted import TEXT_LIMIT, bounded, bounded_command

DENIED: Final = "denied"  # the environment could not be read (another user's process)
LAUNCHER_DEPTH = 2  # a launcher may start its ranks through a shell or a wrapper script
# A rendezvous holds up to two environment values, each bounded as it was read (their cuts kept as
# marked); a probe's report is bounded here.
RENDEZVOUS_LIMIT = 3 * TEXT_LIMIT

Environment = Placement | None | str  # what a process's environment says: a placement, none, or DENIED
_BY_WORD: dict[str, GroupedBy] = {by: by for by in GROUPED_BY}  # a rendezvous starts with its evidence


@dataclass(frozen=True, eq=False, repr=False)
class _Member(Record):
    """One process of a job, as grouping found it."""

    pid: int
    command: tuple[str, ...]
    devices: list[JobDevice]
    environment: Environment
    probed: bool
    user: str | None


def find_jobs(processes: Sequence[GpuProcess], *, parents: Sequence[HostProcess] = (),
              probed: Sequence[HostProcess] = (), probes: Sequence[ProbeReport] = (),
              environments: Mapping[int, Environment] | None = None) -> tuple[Job, ...]:
    """The jobs among GPU processes and probed processes, ordered by their first PID.

    ``parents`` are the processes' ancestors (for their launchers); ``environments`` what each PID's
    environment says (missing: not read; a probe's report says it for its own process).
    """
    environments = environments or {}
    reports = {r.pid: r for r in probes}
    on_gpus: dict[int, list[GpuProcess]] = {}
    for p in processes:
        pid = p.own_pid
        if pid in on_gpus:
            on_gpus[pid].append(p)
        else:
            on_gpus[pid] = [p]
    seen = [(pid, ps[0].ppid, ps[0].command, ps[0].user, ps) for pid, ps in on_gpus.items()]
    seen += [(h.pid, h.ppid, h.command, h.user, []) for h in probed if h.pid not in on_gpus]

    hosts = {h.pid: h for h in parents} | {h.pid: h for h in probed}
    # the launchers among the ancestors, looked for once (there are few; processes may be thousands)
    launchers = {h.pid: kind for h in hosts.values() if (kind := launcher_of(h.command)) is not None}
    groups: dict[tuple[str, str | None], list[_Member]] = {}
    evidence: dict[tuple[str, str | None], GroupedBy] = {}
    started_by: dict[tuple[str, str | None], tuple[str, int]] = {}
    for pid, ppid, command, user, gpu_processes in seen:
        environment = environments.get(pid)
        report = reports.get(pid)
        if environment is None and report is not None:
            environment = report.placement  # the probe read its own environment
        found = _launcher_above(ppid, hosts, launchers, on_gpus) if launchers else None
        by: GroupedBy
        key: tuple[str, str | None]
        if found is not None:
            key, by = (f"{BY_LAUNCHER} {found[1]}", None), BY_LAUNCHER
            started_by[key] = found
        elif (told := _rendezvous(environment)) is not None:
            # an environment is its process's word: it joins only its own user's processes
            key, by = (told[0], user), told[1]
        elif len(gpu_processes) > 1:
            key, by = (f"{BY_DEVICES} {pid}", None), BY_DEVICES
        else:
            continue  # no evidence of a job: the process table's row is all there is
        devices = [JobDevice(index=p.device_index, gpu_memory=p.gpu_memory) for p in gpu_processes]
        groups.setdefault(key, []).append(_Member(pid, command, devices, environment, report is not None, user))
        evidence[key] = by
    # Users who share a rendezvous each have a job of their own, named apart by the user.
    shared = Counter(word for word, _ in groups)
    jobs = [_job(_key(word, user, shared[word] > 1), evidence[(word, user)], group, started_by.get((word, user)))
            for (word, user), group in groups.items()]
    return tuple(sorted(jobs, key=lambda j: min(r.pid for r in j.ranks)))


def _rendezvous(environment: Environment) -> tuple[str, GroupedBy] | None:
    """The rendezvous an environment (or a probe's report) names, bounded, and its evidence; None where it
    names none, or none gputui knows (a report says what its sender likes)."""
    if not isinstance(environment, Placement) or not environment.rendezvous:
        return None
    by = _BY_WORD.get(environment.rendezvous.split(" ", 1)[0])
    return None if by is None else (bounded(environment.rendezvous, RENDEZVOUS_LIMIT), by)


def _key(word: str, user: str | None, shared: bool) -> str:
    """A job's key: its evidence's word, with the user where users share it ("torchelastic 7f3c (alice)")."""
    return f"{word} ({user or '?'})" if shared else word


def _launcher_above(pid: int | None, hosts: Mapping[int, HostProcess], launchers: Mapping[int, str],
                    ranks: Container[int]) -> tuple[str, int] | None:
    """(launcher kind, pid) of the nearest launcher among the ancestors from ``pid`` up, or None.

    A process whose parent is itself on a GPU (a rank's own child) is not a rank of the launcher above.
    """
    for _ in range(LAUNCHER_DEPTH):
        if pid is None:
            return None
        kind = launchers.get(pid)
        if kind is not None:
            return kind, pid
        if pid in ranks:
            return None
        host = hosts.get(pid)
        pid = host.ppid if host is not None else None
    return None


def _job(key: str, grouped_by: GroupedBy, members: list[_Member], launcher: tuple[str, int] | None) -> Job:
    ranks = []
    notes = []
    for m in members:
        placement = m.environment if isinstance(m.environment, Placement) else Placement()
        if m.environment == DENIED:
            notes.append(f"process {m.pid}: its environment could not be read (another user's process), "
                         "so its rank is not known")
        devices = tuple(sorted(m.devices, key=lambda d: d.index))
        memory = [d.gpu_memory for d in devices if d.gpu_memory is not None]
        ranks.append(JobRank(pid=m.pid, rank=placement.rank, local_rank=placement.local_rank,
                             group_rank=placement.group_rank, devices=devices,
                             gpu_memory=sum(memory) if memory else None, probed=m.probed,
                             command=m.command))
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    placements = [m.environment for m in members if isinstance(m.environment, Placement)]
    sizes = [p.world_size for p in placements if p.world_size is not None]
    memory = [r.gpu_memory for r in ranks if r.gpu_memory is not None]
    return Job(
        key=key,
        name=_name(ranks, launcher[0] if launcher else None, grouped_by),
        grouped_by=grouped_by,
        launcher=launcher[0] if launcher else None,
        launcher_pid=launcher[1] if launcher else None,
        world_size=max(sizes) if sizes else None,
        ranks=tuple(ranks),
        devices=tuple(sorted({d.index for r in ranks for d in r.devices})),
        gpu_memory=sum(memory) if memory else None,
        notes=tuple(notes),
    )


def _name(ranks: Sequence[JobRank], launcher: str | None, grouped_by: str) -> str:
    """"train.py (torchrun)": the ranks' script, and what started or grouped them."""
    script = bounded(next((s for s in (script_of(r.command) for r in ranks) if s), None) or "a job")
    if launcher is not None:
        return f"{script} ({launcher})"
    if grouped_by == BY_DEVICES:
        return f"{script} (one process, {len(ranks[0].devices)} GPUs)"
    return f"{script} ({grouped_by})"


def script_of(command: Sequence[str]) -> str | None:
    """The script a Python command line runs (``train.py``), its module (``-m pkg``), or the program."""
    if not command:
        return None
    program = PurePosixPath(command[0]).name
    if not program.startswith("python"):
        return program or None
    args = iter(command[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg == "-c":
            return "python -c"
        if not arg.startswith("-"):
            return PurePosixPath(arg).name
    return program


class JobFinder:
    """Groups each snapshot's processes into jobs, reading environments and launchers from psutil."""

    def __init__(self, psutil: Psutil) -> None:
        self.psutil = psutil
        self._environments: dict[int, tuple[float | None, Environment]] = {}
        self._hosts: dict[int, HostProcess | None] = {}  # parents of probed processes, by pid

    def add_to(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with its ``jobs``, from its GPU processes, probed processes and probes."""
        started: dict[int, float | None] = {}
        denied = []  # psutil could not read these at all: their environments are no more readable
        for p in snapshot.processes:
            if p.state == PROCESS_OK:
                started[p.own_pid] = p.started_at
            elif p.state == PROCESS_DENIED:
                denied.append(p.own_pid)
        started.update({h.pid: h.started_at for h in snapshot.probed})
        environments = self._read_environments(started)
        environments.update(dict.fromkeys(denied, DENIED))
        parents = list(snapshot.parents) + self._parents_of(snapshot.probed, snapshot.parents)
        jobs = find_jobs(snapshot.processes, parents=parents, probed=snapshot.probed,
                         probes=snapshot.probes, environments=environments)
        if jobs == snapshot.jobs:
            return snapshot
        return dataclasses.replace(snapshot, jobs=jobs)

    def of_probes(self, reports: Sequence[ProbeReport]) -> tuple[Job, ...]:
        """The jobs of probed processes alone (``gputui probes``: no GPUs asked), by their reports'
        placements and their parents."""
        probed = [h for h in (self._host(r.pid) for r in reports) if h is not None]
        return find_jobs((), parents=self._parents_of(probed, ()), probed=probed, probes=reports)

    def _read_environments(self, started: Mapping[int, float | None]) -> dict[int, Environment]:
        """Each process's placement, read once per process life (pid and start time)."""
        cache = self._environments
        for pid in [p for p in cache if p not in started]:
            del cache[pid]
        found = {}
        for pid, at in started.items():
            cached = cache.get(pid)
            if cached is None or cached[0] != at:
                cached = cache[pid] = (at, self._environment(pid))
            found[pid] = cached[1]
        return found

    def _environment(self, pid: int) -> Environment:
        ps = self.psutil
        try:
            return Placement.from_environ(self._environ(pid))
        except ps.AccessDenied:
            return DENIED
        except ps.NoSuchProcess:  # gone since the sample (ZombieProcess is one too)
            return None

    def environ(self, pid: int) -> Mapping[str, str] | None:
        """A process's environment, its values bounded; None where it cannot be read (another user's, or gone)."""
        ps = self.psutil
        try:
            return self._environ(pid)
        except (ps.AccessDenied, ps.NoSuchProcess):
            return None

    def _environ(self, pid: int) -> dict[str, str]:
        """The environment as it comes in: every value bounded (a process may set 128 KiB in one), once,
        here, so that no output carries more of it."""
        return {bounded(name): bounded(value) for name, value in self.psutil.Process(pid).environ().items()}

    def _parents_of(self, probed: Iterable[HostProcess], known: Sequence[HostProcess]) -> list[HostProcess]:
        """The parents of probed CPU processes (the collector looks up GPU processes' only)."""
        have = {h.pid for h in known}
        wanted = {h.ppid for h in probed if h.ppid and h.ppid > 1 and h.ppid not in have}
        for pid in [p for p in self._hosts if p not in wanted]:
            del self._hosts[pid]  # a living child keeps its parent's pid: no recycling to fear here
        for pid in wanted - self._hosts.keys():
            self._hosts[pid] = self._host(pid)
        return [h for h in self._hosts.values() if h is not None]

    def _host(self, pid: int) -> HostProcess | None:
        ps = self.psutil
        try:
            process = ps.Process(pid)
            # its user too: its placement groups it only with its own user's processes
            return HostProcess(pid=pid, ppid=process.ppid(), command=bounded_command(process.cmdline()),
                               user=process.username())
        except (ps.NoSuchProcess, ps.AccessDenied):
            return None
