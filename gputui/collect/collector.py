"""The collector: one call to ``sample()`` returns an immutable Snapshot of driver, GPUs, processes, host.

A sample is taken in two steps, ``outline()`` (NVML: the GPUs and their process lists) and
``complete()`` (/proc: each process's user, command and host figures, its launchers, its job), so that
the live monitor's first frame can show the GPUs before the slower second step (ui/startup/early_frame.py).

Everything it touches is injected (the pynvml module, a psutil-like object, clocks, hostname,
environment, procfs root), so the same code reads a real H100 and the simulated GPUs of ``--demo``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Mapping

from gputui.collect import nvml as nvml_reading
from gputui.collect.host import HostReader, host_name
from gputui.collect.interfaces import Psutil
from gputui.collect.jobs import JobFinder
from gputui.collect.nvml import DeviceReader, NvmlUnavailable, RawProcess
from gputui.collect.own_cpu import OwnCpu
from gputui.collect.owners import Files, HostFiles, OwnerReader, Scontrol
from gputui.collect.pidns import HOST_PROCESSES, Located, PidNamespace
from gputui.collect.probed import ProbedProcesses
from gputui.collect.processes import ProcessDetails, ProcessInspector, ProcStat, read_stat
from gputui.collect.torch_use import torch_mapped
from gputui.collect.visible import with_cuda_indices
from gputui.errors import UserError
from gputui.model import PROCESS_GONE, PROCESS_UNMAPPED, GpuProcess, MonitorCost, Owner, ProbeReport, Snapshot
from gputui.model.record import Record
from gputui.pids import pid_exists

if TYPE_CHECKING:  # only --demo and the tests bring the simulated machine
    from gputui.collect.sim.machine import SimulatedMachine


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Outline(Record):
    """The first step of a sample: ``snapshot`` holds the driver, GPUs and host (no processes), ``raw``
    NVML's process lists."""

    snapshot: Snapshot
    raw: tuple[RawProcess, ...]
    started: float  # the sample's cost is measured over both steps
    nvml_before: float

    def picture(self) -> Snapshot:
        """The snapshot with NVML's processes as they are, before /proc is read: no user, command,
        CPU or host memory yet (made only where it is shown, so later samples do not pay for it)."""
        return dataclasses.replace(self.snapshot, processes=tuple(
            _gpu_process(raw, None, ProcessDetails()) for raw in self.raw))


class Collector:
    """Samples the machine. Never raises for device or process trouble: see Snapshot.problems."""

    def __init__(
        self,
        nvml: ModuleType,
        psutil: Psutil,
        *,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
        hostname: str = "",
        environ: Mapping[str, str] | None = None,
        proc_root: str | os.PathLike[str] | None = "/proc",
        source: str = "nvml",
        machine: SimulatedMachine | None = None,
        cpu_clock: Callable[[], float] | None = time.process_time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``cpu_clock`` (this process's CPU seconds) and ``timer`` measure what each sample costs
        the monitor (Snapshot.monitor); a None ``cpu_clock`` leaves it unmeasured, as a still
        picture on a fake clock must be."""
        nvml_reading.start(nvml)
        self.nvml = nvml
        self.machine = machine
        self.source = source
        self.wallclock = wallclock
        self.environ = os.environ if environ is None else environ
        self.driver = nvml_reading.read_driver(nvml)
        try:
            count = nvml_reading.device_count(nvml)
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise NvmlUnavailable(str(exc)) from None
        self.clock = clock
        self.timer = timer
        self._own_cpu = OwnCpu(cpu_clock, timer) if cpu_clock is not None else None
        self.readers = [DeviceReader(nvml, i, timer=timer) for i in range(count)]
        # No procfs to consult (the simulator): NVML's PIDs are taken as they are.
        self.namespace = PidNamespace(proc_root) if proc_root is not None else None
        # Signal 0 reaches the real machine's processes, and only by /proc's PIDs when /proc is ours.
        signals_work = self.namespace is not None and not self.namespace.procfs_is_outer
        stat = _stat_reader(psutil)
        self.processes = ProcessInspector(
            psutil, clock, exists=pid_exists if signals_work else None,
            uses_torch=functools.partial(torch_mapped, proc_root=str(proc_root)) if proc_root is not None else None,
            stat=stat)
        self.host = HostReader(psutil, hostname)
        self.probed = ProbedProcesses(psutil, clock, stat=stat)
        self.jobs = JobFinder(psutil)  # again after the probes are added: see plain's Source
        # The owners are read through the simulated machine's files in --demo: one reading for both.
        files: Files | None = machine.files if machine is not None else (
            HostFiles("/") if proc_root is not None else None)
        self.owners = None if files is None else OwnerReader(
            files, self.jobs.environ, proc=os.fspath(proc_root) if proc_root is not None else "/proc",
            scontrol=Scontrol.installed() if machine is None else None)
        self._closed = False

    def sample(self) -> Snapshot:
        return self.complete(self.outline())

    def outline(self) -> Outline:
        """What NVML says now (and the host's figures), before any process is looked up in /proc."""
        started = self.timer()
        nvml_before = sum(r.nvml_seconds for r in self.readers)
        taken_at = self.wallclock()
        now = self.clock()
        devices = []
        raw_processes: list[RawProcess] = []
        problems: list[str] = []
        for reader in self.readers:
            reading = reader.read(now, taken_at)
            devices.append(reading.device)
            raw_processes.extend(reading.processes)
            problems.extend(reading.problems)
        snapshot = Snapshot(
            taken_at=taken_at,
            driver=self.driver,
            devices=with_cuda_indices(devices, self.environ),
            host=self.host.read(),
            source=self.source,
            problems=tuple(problems),
        )
        return Outline(snapshot, tuple(raw_processes), started, nvml_before)

    def complete(self, outline: Outline) -> Snapshot:
        """The outline's processes as /proc shows them (user, command, CPU, memory, start, launchers),
        grouped into jobs, with what the whole sample cost."""
        raw_processes = outline.raw
        where: dict[int, Located] = {}
        for raw in raw_processes:
            if raw.pid not in where:
                where[raw.pid] = (self.namespace.locate(raw.pid) if self.namespace is not None
                                  else Located(raw.pid, raw.pid))
        details = self.processes.inspect(
            loc.procfs_pid for loc in where.values() if loc.procfs_pid is not None)

        owners = {} if self.owners is None else self.owners.owners(
            {pid: (d.started_at, d.user) for pid, d in details.items() if d.state != PROCESS_GONE})
        processes = []
        for raw in raw_processes:
            loc = where[raw.pid]
            if loc.procfs_pid is None:
                info = ProcessDetails(state=PROCESS_UNMAPPED, name=self._driver_name(raw.pid),
                                      note=loc.note)
            else:
                info = details[loc.procfs_pid]
                if loc.note and not info.note:
                    info = _with_note(info, loc.note)
            owner = owners.get(loc.procfs_pid) if loc.procfs_pid is not None else None
            processes.append(_gpu_process(raw, loc.local_pid, info, owner))
        gpu_pids = {loc.procfs_pid for loc in where.values() if loc.procfs_pid is not None}
        parents = self.processes.parents({p.ppid for p in processes}, exclude=gpu_pids)
        problems = outline.snapshot.problems
        if any(loc.procfs_pid is None for loc in where.values()) and not self._sees_host_pids():
            problems += (HOST_PROCESSES,)
        snapshot = dataclasses.replace(outline.snapshot, processes=tuple(processes), parents=parents,
                                       problems=problems)
        snapshot = self.jobs.add_to(snapshot)
        return dataclasses.replace(snapshot, monitor=self._cost(
            outline.started, sum(r.nvml_seconds for r in self.readers) - outline.nvml_before))

    def _sees_host_pids(self) -> bool:
        """Whether this monitor can see the host's processes: no PID namespace of its own, or the host's
        /proc mounted in it."""
        return self.namespace is None or not self.namespace.in_namespace or self.namespace.procfs_is_outer

    def _cost(self, started: float, nvml_seconds: float) -> MonitorCost | None:
        """What this sample cost, and the monitor's CPU since the previous one."""
        if self._own_cpu is None:
            return None
        ended, percent = self._own_cpu.read()
        return MonitorCost(cpu_percent=percent, nvml_ms=round(1000 * nvml_seconds, 3),
                           sample_ms=round(1000 * (ended - started), 3))

    def _driver_name(self, pid: int) -> str | None:
        """The process name the driver knows for a host PID we cannot see (containers)."""
        try:
            path = self.nvml.nvmlSystemGetProcessName(pid)
        except self.nvml.NVMLError:
            return None
        return os.path.basename(path) or None

    def probe_reports(self) -> tuple[ProbeReport, ...]:
        """Simulated probe reports in demo mode; real probes come through gputui.link."""
        return tuple(self.machine.probe_reports()) if self.machine is not None else ()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
        if self.machine is not None:
            from gputui.collect import sim

            sim.uninstall()

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stat_reader(psutil: Psutil) -> Callable[[int], ProcStat] | None:
    """Each sample's process figures read from the /proc the real psutil reads (its PROCFS_PATH), in
    one step of our own; None for a psutil without one (the simulated machine's): psutil is asked."""
    procfs = getattr(psutil, "PROCFS_PATH", None)
    return functools.partial(read_stat, proc_root=procfs) if isinstance(procfs, str) else None


def _gpu_process(raw: RawProcess, local_pid: int | None, info: ProcessDetails,
                 owner: Owner | None = None) -> GpuProcess:
    """NVML's entry with what /proc says of its process."""
    return GpuProcess(
        pid=raw.pid,
        device_index=raw.device_index,
        local_pid=local_pid,
        kind=raw.kind,
        gpu_instance_id=raw.gpu_instance_id,
        compute_instance_id=raw.compute_instance_id,
        gpu_memory=raw.gpu_memory,
        sm_util=raw.sm_util,
        memory_util=raw.memory_util,
        state=info.state,
        name=info.name,
        command=info.command,
        user=info.user,
        ppid=info.ppid,
        cpu_percent=info.cpu_percent,
        host_memory=info.host_memory,
        started_at=info.started_at,
        note=info.note,
        uses_torch=info.uses_torch,
        owner=owner,
    )


def _with_note(info: ProcessDetails, note: str) -> ProcessDetails:
    return dataclasses.replace(info, note=note)


def open_collector(
    demo: str | None = None,
    *,
    seed: int = 0,
    processes: int | None = None,
    clock: Callable[[], float] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Collector:
    """A collector on the real driver (demo=None) or on a simulated scenario.

    Raises NvmlUnavailable when the driver's library is missing or will not initialise.
    """
    import psutil
    import pynvml

    if demo is None:
        return Collector(
            pynvml, psutil,
            clock=clock or time.monotonic,
            wallclock=time.time,
            hostname=host_name(environ),
            environ=environ,
            proc_root="/proc",
        )
    from gputui.collect import sim

    if demo not in sim.SCENARIOS:
        raise UserError(f"unknown demo scenario {demo!r}; choose one of {', '.join(sim.SCENARIOS)}")
    # On the real clock (gputui --demo) a scenario starts where it is interesting: the training job
    # ramped up, the leak well under way. An injected clock (tests) starts at second 0.
    start = sim.DEMO_START.get(demo, 0.0) if clock is None else 0.0
    machine = sim.install(demo, seed=seed, clock=clock, processes=processes, start=start)
    try:
        return Collector(
            pynvml, machine.psutil,
            clock=machine.clock,
            wallclock=machine.wallclock,
            hostname=machine.hostname,
            environ=environ,
            proc_root=None,
            source=f"sim:{demo}",
            machine=machine,
            # On an injected clock (tests, still pictures) the cost is not measured: it would differ
            # from run to run.
            cpu_clock=time.process_time if clock is None else None,
        )
    except BaseException:
        sim.uninstall()
        raise
