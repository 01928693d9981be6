"""Probed processes that NVML does not list (CPU-only jobs, a machine without a driver), as /proc
sees them: user, CPU %, resident memory and start time, beside what their probes report."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from gputui.collect.interfaces import Psutil
from gputui.collect.processes import ProcessInspector, ProcStat
from gputui.model import PROCESS_OK, HostProcess, Snapshot


class ProbedProcesses:
    """Keeps its own CPU % bookkeeping, apart from the GPU processes', between samples."""

    def __init__(self, psutil: Psutil, clock: Callable[[], float] = time.monotonic,
                 stat: Callable[[int], ProcStat] | None = None) -> None:
        """``stat``: each sample's figures read as the GPU processes' are (ProcessInspector)."""
        self._inspector = ProcessInspector(psutil, clock, stat=stat)

    def add_to(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with ``probed`` filled in for its probe reports that NVML does not list."""
        listed = {p.local_pid for p in snapshot.processes}
        unlisted = [r.pid for r in snapshot.probes if r.pid not in listed]
        details = self._inspector.inspect(unlisted)
        probed = tuple(
            HostProcess(pid=pid, ppid=d.ppid, name=d.name, command=d.command, user=d.user,
                        cpu_percent=d.cpu_percent, host_memory=d.host_memory, started_at=d.started_at)
            for pid, d in sorted(details.items()) if d.state == PROCESS_OK)
        if not probed and not snapshot.probed:
            return snapshot
        return dataclasses.replace(snapshot, probed=probed)
