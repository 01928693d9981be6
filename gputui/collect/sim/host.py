"""A psutil stand-in serving the simulated machine's processes and host figures.

It has the subset of psutil's API the collector uses and raises psutil's own exceptions where real
psutil would: NoSuchProcess for a process that is gone, AccessDenied for another user's process under
hidepid, ZombieProcess for a zombie's command line.
"""

from __future__ import annotations

import contextlib
import math
from collections import namedtuple
from typing import Literal, overload

import psutil as _psutil

from gputui.collect.sim.devices import GiB, MiB
from gputui.collect.sim.scenarios import DENIED, VANISHED, ZOMBIE, Program
from gputui.collect.sim.signals import noise, stream
from gputui.collect.sim.state import MachineView

# The Linux shapes of psutil's named tuples.
pcputimes = namedtuple("pcputimes", "user system children_user children_system iowait")
pmem = namedtuple("pmem", "rss vms shared text lib data dirty")
svmem = namedtuple("svmem", "total available percent used free active inactive buffers cached shared slab")
sswap = namedtuple("sswap", "total used free percent sin sout")


def cpu_seconds(program: Program, alive: float) -> tuple[float, float]:
    """(user, system) CPU seconds after ``alive`` seconds: always rising, a little uneven."""
    alive = max(0.0, alive)
    rate = program.cpu
    w = 2 * math.pi / 37.0
    user = rate * 0.9 * alive + 0.3 * rate * (1 - math.cos(w * alive)) / w
    system = rate * 0.1 * alive
    return math.floor(user * 100) / 100, math.floor(system * 100) / 100  # /proc counts 10 ms ticks


class SimProcess:
    """psutil.Process for a simulated pid."""

    def __init__(self, host: "SimPsutil", pid: int):
        self._host = host
        self.pid = int(pid)
        self._program = self._alive()

    def __repr__(self) -> str:
        return f"psutil.Process(pid={self.pid}, sim)"

    def _alive(self) -> Program:
        program = self._host.machine.program(self.pid)
        if program is None or program.access == VANISHED:
            raise _psutil.NoSuchProcess(self.pid)
        return program

    def _readable(self) -> Program:
        program = self._alive()
        if program.access == DENIED:
            raise _psutil.AccessDenied(self.pid)
        return program

    def oneshot(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_running(self) -> bool:
        return self._host.machine.program(self.pid) is self._program

    def name(self) -> str:
        return self._readable().name

    def cmdline(self) -> list[str]:
        program = self._readable()
        if program.access == ZOMBIE:
            raise _psutil.ZombieProcess(self.pid, program.name, program.ppid)
        return list(program.cmdline)

    def environ(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": f"/home/{self._readable().user}", **dict(self._program.environ)}

    def username(self) -> str:
        return self._readable().user

    def ppid(self) -> int:
        return self._readable().ppid

    def create_time(self) -> float:
        program = self._readable()
        return round(self._host.machine.wallclock() - self._host.machine.elapsed()
                     + self._host.machine.started(self.pid, program), 2)

    def status(self) -> str:
        program = self._readable()
        if program.access == ZOMBIE:
            return _psutil.STATUS_ZOMBIE
        return _psutil.STATUS_RUNNING if program.cpu >= 0.5 else _psutil.STATUS_SLEEPING

    def cpu_times(self) -> pcputimes:
        program = self._readable()
        machine = self._host.machine
        user, system = cpu_seconds(program, machine.elapsed() - machine.started(self.pid, program))
        return pcputimes(user, system, 0.0, 0.0, 0.0)

    def memory_info(self) -> pmem:
        program = self._readable()
        if program.access == ZOMBIE:
            return pmem(0, 0, 0, 0, 0, 0, 0)
        rss = program.rss
        vms = rss + (34 * GiB if program.on_gpu else 240 * MiB)  # CUDA maps a large virtual range
        return pmem(rss, vms, rss // 12, 2 * MiB, 0, rss * 9 // 10, 0)

    def parent(self) -> "SimProcess | None":
        ppid = self.ppid()
        try:
            return SimProcess(self._host, ppid) if ppid else None
        except _psutil.NoSuchProcess:
            return None


class SimPsutil:
    """The psutil module as seen on the simulated machine."""

    NoSuchProcess = _psutil.NoSuchProcess
    AccessDenied = _psutil.AccessDenied
    ZombieProcess = _psutil.ZombieProcess
    Error = _psutil.Error
    TimeoutExpired = _psutil.TimeoutExpired
    STATUS_ZOMBIE = _psutil.STATUS_ZOMBIE  # (the other STATUS_* too, set in __init__)

    def __init__(self, machine: MachineView) -> None:
        self.machine = machine
        for name in dir(_psutil):
            if name.startswith("STATUS_"):
                setattr(self, name, getattr(_psutil, name))

    def Process(self, pid: int) -> SimProcess:  # noqa: N802 - psutil's name
        return SimProcess(self, pid)

    def pid_exists(self, pid: int) -> bool:
        program = self.machine.program(int(pid))
        return program is not None and program.access != VANISHED

    def pids(self) -> list[int]:
        return self.machine.pids()

    def boot_time(self) -> float:
        return self.machine.wallclock() - self.machine.elapsed() - 864000.0

    def _busy_cores(self) -> float:
        m = self.machine
        t = m.now()
        total = 0.0
        for pid in m.pids():
            program = m.program(pid)
            if program is not None and program.access != ZOMBIE:
                total += program.cpu
        return total + 0.4 + 0.3 * noise(m.seed, stream("host-cpu"), t, 3.0)

    def cpu_count(self, logical: bool = True) -> int:
        count = self.machine.plan.cpu_count
        return count if logical else count // 2

    @overload
    def cpu_percent(self, interval: float | None = None, percpu: Literal[False] = False) -> float: ...

    @overload
    def cpu_percent(self, interval: float | None, percpu: Literal[True]) -> list[float]: ...

    def cpu_percent(self, interval: float | None = None, percpu: bool = False) -> float | list[float]:
        """Whole-machine CPU percent now (never sleeps, even if an interval is given)."""
        count = self.machine.plan.cpu_count
        value = round(min(100.0, max(0.0, self._busy_cores() / count * 100.0)), 1)
        return [value] * count if percpu else value

    def getloadavg(self) -> tuple[float, float, float]:
        m = self.machine
        busy = self._busy_cores()
        return (
            round(busy + 0.5 * noise(m.seed, stream("load1"), m.now(), 5.0), 2),
            round(busy + 0.2 * noise(m.seed, stream("load5"), m.now(), 30.0), 2),
            round(busy + 0.1 * noise(m.seed, stream("load15"), m.now(), 90.0), 2),
        )

    def virtual_memory(self) -> svmem:
        m = self.machine
        plan = m.plan
        used = plan.host_memory_base
        for pid in m.pids():
            program = m.program(pid)
            if program is not None and program.access != ZOMBIE:
                used += program.rss
        used = min(used, plan.memory_total)
        buffers = plan.memory_total // 100
        cached = (plan.memory_total - used - buffers) // 4
        free = plan.memory_total - used - buffers - cached
        available = free + cached + buffers
        percent = round((plan.memory_total - available) / plan.memory_total * 100, 1)
        return svmem(plan.memory_total, available, percent, used, free, used // 2, cached // 2, buffers,
                     cached, 512 * MiB, 2 * GiB)

    def swap_memory(self) -> sswap:
        total = self.machine.plan.swap_total
        used = total // 50
        percent = round(used / total * 100, 1) if total else 0.0
        return sswap(total, used, total - used, percent, 0, 0)
