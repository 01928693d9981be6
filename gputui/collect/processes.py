"""What psutil knows about GPU processes: user, command line, CPU %, RSS, start time, parents.

CPU % is measured between samples from cpu_times deltas and the injected clock, so sampling never
sleeps. A process that vanished, belongs to another user (access denied) or is a zombie still gets
an answer with whatever could be read and a note saying why the rest is missing.

On the machine's own /proc, what changes every sample (CPU times, RSS, state) is read straight from
/proc/PID/stat and statm (``read_stat``): the figures psutil gives from the same two files, without
its layers (64 processes: 1.2 ms a sample, not 3.8 ms).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

from gputui.collect.interfaces import PsProcess, Psutil
from gputui.model import (
    PROCESS_DENIED,
    PROCESS_GONE,
    PROCESS_OK,
    PROCESS_ZOMBIE,
    HostProcess,
    ProcessState,
)
from gputui.model.record import Record
from gputui.untrusted import bounded_command

NOTE_GONE = "exited before its details could be read"
NOTE_DENIED = "details hidden: access denied (another user's process)"
NOTE_ZOMBIE = "zombie: exited, but its parent has not reaped it yet"
NOTE_HIDDEN = "details hidden: /proc hides other users' processes here (hidepid)"

# How far up the tree to look for the launchers of GPU processes (shell, torchrun, slurm step ...).
MAX_PARENT_DEPTH = 8

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time, as psutil divides it
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # /proc's unit of memory
STAT_LIMIT = 4096  # a stat line is under 400 bytes: 52 numbers and a name of at most 64


class ProcStat(NamedTuple):
    """What /proc says of a process now: what the inspector reads every sample."""

    state: str  # one letter: R running, S sleeping, Z zombie ...
    cpu_seconds: float  # user + system, as psutil's cpu_times() adds them
    rss: int  # bytes, from statm as psutil's memory_info() (stat's own figure is the kernel's estimate)
    started: int  # clock ticks from boot to its start: tells a recycled pid


def read_stat(pid: int, proc_root: str = "/proc") -> ProcStat:
    """/proc/PID/stat and statm, one read each. Raises OSError as reading does: FileNotFoundError or
    ProcessLookupError for a process gone, PermissionError for one /proc hides (hidepid=1)."""
    stat = _read_proc(f"{proc_root}/{pid}/stat")
    # The name (field 2) is the process's own and may hold spaces and parentheses: the fields after it
    # begin after the last ")".
    fields = stat[stat.rindex(b")") + 2:].split()
    pages = int(_read_proc(f"{proc_root}/{pid}/statm").split()[1])
    return ProcStat(fields[0].decode("ascii"), int(fields[11]) / CLOCK_TICKS + int(fields[12]) / CLOCK_TICKS,
                    pages * PAGE_SIZE, int(fields[19]))


def _read_proc(path: str) -> bytes:
    """A /proc file the kernel writes (a line, never a link or a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, STAT_LIMIT)
    finally:
        os.close(fd)


@dataclass(frozen=True, eq=False, repr=False)
class ProcessDetails(Record):
    """psutil's view of one process at one sample."""

    state: ProcessState = PROCESS_OK
    name: str | None = None
    command: tuple[str, ...] = ()
    user: str | None = None
    ppid: int | None = None
    cpu_percent: float | None = None
    host_memory: int | None = None
    started_at: float | None = None
    note: str | None = None
    uses_torch: bool | None = None


@dataclass
class _Static:
    """Facts that do not change during a process's life, read once per (pid, create_time)."""

    create_time: float | None
    name: str | None = None
    command: tuple[str, ...] = ()
    user: str | None = None
    ppid: int | None = None
    denied: bool = False
    uses_torch: bool | None = None


class _Tracked:
    """A process followed across samples: its psutil object and last CPU reading."""

    __slots__ = ("process", "static", "cpu_total", "cpu_at")

    def __init__(self, process: PsProcess, static: _Static) -> None:
        self.process = process
        self.static = static
        self.cpu_total: float | None = None
        self.cpu_at: float | None = None


class ProcessInspector:
    """Looks GPU processes up in psutil, keeping per-process state between samples."""

    def __init__(self, psutil: Psutil, clock: Callable[[], float],
                 exists: Callable[[int], bool] | None = None,
                 uses_torch: Callable[[int], bool | None] | None = None,
                 stat: Callable[[int], ProcStat] | None = None) -> None:
        """``exists(pid)`` tells a hidden process (hidepid=2) from an exited one, where /proc cannot;
        ``uses_torch(pid)`` whether a process has loaded PyTorch (None: cannot tell), asked once per process;
        ``stat(pid)`` (``read_stat`` on the machine's own /proc) reads each sample's figures in place of
        psutil's cpu_times, memory_info and status."""
        self.psutil = psutil
        self.clock = clock
        self.exists = exists
        self.uses_torch = uses_torch
        self.stat = stat
        self._tracked: dict[int, _Tracked] = {}
        self._parents: dict[int, tuple[float, HostProcess]] = {}

    def inspect(self, pids: Iterable[int]) -> dict[int, ProcessDetails]:
        """Details for each local PID. PIDs not asked for are forgotten, so their CPU % restarts."""
        now = self.clock()
        wanted = set(pids)
        for pid in [p for p in self._tracked if p not in wanted]:
            del self._tracked[pid]
        return {pid: self._inspect_one(pid, now) for pid in wanted}

    def _inspect_one(self, pid: int, now: float) -> ProcessDetails:
        ps = self.psutil
        tracked = self._tracked.get(pid)
        if tracked is None:
            # Reusing the Process object across samples saves a /proc read per sample; a PID can only
            # be recycled after its GPU process exits, and then it leaves NVML's list and our cache.
            try:
                process = ps.Process(pid)
            except ps.ZombieProcess:
                return ProcessDetails(state=PROCESS_ZOMBIE, note=NOTE_ZOMBIE)
            except ps.NoSuchProcess:
                if self.exists is not None and self.exists(pid):
                    return ProcessDetails(state=PROCESS_DENIED, note=NOTE_HIDDEN)
                return ProcessDetails(state=PROCESS_GONE, note=NOTE_GONE)
            except ps.AccessDenied:
                return ProcessDetails(state=PROCESS_DENIED, note=NOTE_DENIED)
            tracked = self._tracked[pid] = _Tracked(process, self._first_look(process, pid))
        static = tracked.static
        if self.stat is not None:
            state, cpu_total, host_memory = self._stat_figures(pid)
        else:
            state, cpu_total, host_memory = self._psutil_figures(tracked.process)
        cpu_percent = None
        if cpu_total is not None:
            if tracked.cpu_total is not None and tracked.cpu_at is not None and now > tracked.cpu_at:
                cpu_percent = max(0.0, 100.0 * (cpu_total - tracked.cpu_total) / (now - tracked.cpu_at))
            tracked.cpu_total, tracked.cpu_at = cpu_total, now
        if state == PROCESS_GONE:
            del self._tracked[pid]
        if static.denied and state == PROCESS_OK:
            state = PROCESS_DENIED
        return ProcessDetails(
            state=state,
            name=static.name,
            command=static.command,
            user=static.user,
            ppid=static.ppid,
            cpu_percent=cpu_percent if state != PROCESS_GONE else None,
            host_memory=host_memory,
            started_at=static.create_time,
            uses_torch=static.uses_torch,
            note={PROCESS_GONE: NOTE_GONE, PROCESS_DENIED: NOTE_DENIED,
                  PROCESS_ZOMBIE: NOTE_ZOMBIE}.get(state),
        )

    def _first_look(self, process: PsProcess, pid: int) -> _Static:
        """The facts read once per process life; a process gone meanwhile is said by the figures after."""
        ps = self.psutil
        try:
            with process.oneshot():
                static = self._read_static(process)
        except (ps.NoSuchProcess, ps.AccessDenied):  # (_read_static guards each field: not expected)
            static = _Static(create_time=None)
        if self.uses_torch is not None:
            static.uses_torch = self.uses_torch(pid)
        return static

    def _psutil_figures(self, process: PsProcess) -> tuple[ProcessState, float | None, int | None]:
        """This sample's state, CPU seconds and RSS through psutil (the simulated machine's, in --demo)."""
        ps = self.psutil
        state: ProcessState = PROCESS_OK
        cpu_total = host_memory = None
        try:
            with process.oneshot():
                try:
                    times = process.cpu_times()
                    cpu_total = times.user + times.system
                except ps.AccessDenied:
                    state = PROCESS_DENIED
                try:
                    host_memory = process.memory_info().rss
                except ps.AccessDenied:
                    state = PROCESS_DENIED
                if process.status() == ps.STATUS_ZOMBIE:
                    state = PROCESS_ZOMBIE
        except ps.ZombieProcess:
            state = PROCESS_ZOMBIE
        except ps.NoSuchProcess:
            return PROCESS_GONE, None, None
        except ps.AccessDenied:
            state = PROCESS_DENIED
        return state, cpu_total, host_memory

    def _stat_figures(self, pid: int) -> tuple[ProcessState, float | None, int | None]:
        """This sample's state, CPU seconds and RSS from /proc/PID/stat (``read_stat``), in psutil's terms."""
        assert self.stat is not None
        try:
            found = self.stat(pid)
        except PermissionError:  # hidepid=1: the entry is there, its files are not ours to read
            return PROCESS_DENIED, None, None
        except (OSError, ValueError, IndexError, UnicodeDecodeError):  # gone (or a line no kernel writes)
            return PROCESS_GONE, None, None
        return (PROCESS_ZOMBIE if found.state == "Z" else PROCESS_OK), found.cpu_seconds, found.rss

    def _read_static(self, process: PsProcess) -> _Static:
        """Each field in its own guard: hidepid or another user denies some but not others."""
        ps = self.psutil
        static = _Static(create_time=None)
        for attr, method in (("create_time", "create_time"), ("name", "name"),
                             ("user", "username"), ("ppid", "ppid"), ("command", "cmdline")):
            try:
                value = getattr(process, method)()
            except ps.ZombieProcess:
                continue  # the caller sees the zombie state from status()
            except ps.AccessDenied:
                static.denied = True
                continue
            # (A process sets its own command line: bounded, as every string taken from one.)
            setattr(static, attr, bounded_command(value) if attr == "command" else value)
        return static

    def parents(self, ppids: Iterable[int | None], exclude: set[int]) -> tuple[HostProcess, ...]:
        """Ancestors of GPU processes that hold no GPU themselves, up to (not including) PID 1."""
        found: dict[int, HostProcess] = {}
        queue = [(p, 1) for p in ppids if p]
        while queue:
            pid, depth = queue.pop()
            if pid <= 1 or pid in found or pid in exclude or depth > MAX_PARENT_DEPTH:
                continue
            parent = self._parent(pid)
            if parent is None:
                continue
            found[pid] = parent
            if parent.ppid:
                queue.append((parent.ppid, depth + 1))
        # Forget parents that no longer lead to a GPU process.
        for pid in [p for p in self._parents if p not in found]:
            del self._parents[pid]
        return tuple(found[p] for p in sorted(found))

    def _parent(self, pid: int) -> HostProcess | None:
        ps = self.psutil
        process = None
        try:
            if self.stat is not None:
                started: float = self.stat(pid).started
            else:
                process = ps.Process(pid)
                started = process.create_time()
        except (ps.NoSuchProcess, ps.AccessDenied, OSError, ValueError, IndexError, UnicodeDecodeError):
            return None
        cached = self._parents.get(pid)
        if cached is not None and cached[0] == started:  # same process, not a recycled PID
            return cached[1]
        try:
            process = process or ps.Process(pid)
        except (ps.NoSuchProcess, ps.AccessDenied):
            return None
        static = self._read_static(process)
        known = HostProcess(pid=pid, ppid=static.ppid, name=static.name, command=static.command,
                            user=static.user)
        self._parents[pid] = (started, known)
        return known
