"""Probed processes that an out-of-memory error ended: noticed as their probes go away, so the live
monitor can keep them in view with the report they left instead of letting their rows vanish.

A probed process that goes away ended of an OOM when its probe wrote an OOM report since the monitor
first saw it (``link/oom_file.py``), or when its last report seen carried an OOM that came just before
it went (a probe that could write no file; the simulator's jobs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gputui.link import oom_file
from gputui.model import EndedProcess, ProbeReport, Snapshot, from_jsonable

KEEP = 5  # ended processes kept in view, the latest
LOOK_FOR = 10.0  # seconds a vanished probe's report is looked for (its process may still be exiting)
RECENT_OOM = 60.0  # an OOM at most this long before the probe went ended it; an older one was survived


@dataclass
class _Seen:
    """What the monitor knew of a probed process at its last sample."""

    first_seen: float
    report: ProbeReport
    user: str | None = None
    devices: tuple[int, ...] = ()
    gpu_memory: int | None = None


class OomEndings:
    """Kept by the sampler between samples; ``add_to`` puts the ended processes on each snapshot."""

    def __init__(self, directory: Callable[[], Path] | None = None) -> None:
        """``directory``: where OOM reports are (default: this user's, ``oom_file.oom_dir``)."""
        self._directory = directory or (lambda: oom_file.oom_dir(create=False))
        self._watched: dict[int, _Seen] = {}
        self._vanished: dict[int, tuple[_Seen, float]] = {}  # pid -> (last seen, when it went)
        self._ended: dict[int, EndedProcess] = {}

    def add_to(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with ``ended`` filled in; remembers its probed processes for the next one."""
        now = snapshot.taken_at
        live = {r.pid for r in snapshot.probes}
        for pid, seen in self._watched.items():
            if pid not in live:
                self._vanished[pid] = (seen, now)
        for pid in live:  # back (it only missed a sample), or a new process with a reused pid
            self._vanished.pop(pid, None)
            self._ended.pop(pid, None)
        for pid, (seen, went) in list(self._vanished.items()):
            ended = self._ending(pid, seen)
            if ended is not None or now - went > LOOK_FOR:
                del self._vanished[pid]
            if ended is not None:
                self._ended[pid] = ended
        if len(self._ended) > KEEP:
            for pid in sorted(self._ended, key=lambda p: self._ended[p].ended_at)[:-KEEP]:
                del self._ended[pid]
        self._watched = {r.pid: self._seen(r, snapshot, now) for r in snapshot.probes}
        if not self._ended:
            return snapshot
        shown = {e.pid: e for e in snapshot.ended} | self._ended  # a source's own (a replay's) kept
        return dataclasses.replace(snapshot, ended=tuple(sorted(shown.values(), key=lambda e: e.ended_at)))

    def _seen(self, report: ProbeReport, snapshot: Snapshot, now: float) -> _Seen:
        before = self._watched.get(report.pid)
        rows = [p for p in snapshot.processes if p.own_pid == report.pid]
        host = next((h for h in snapshot.probed if h.pid == report.pid), None)
        memory = [p.gpu_memory for p in rows if p.gpu_memory is not None]
        user = next((p.user for p in rows if p.user), None) or (host.user if host is not None else None)
        return _Seen(first_seen=before.first_seen if before is not None else now, report=report,
                     user=user or (before.user if before is not None else None),
                     devices=tuple(sorted({p.device_index for p in rows})) or (before.devices if before else ()),
                     gpu_memory=sum(memory) if memory else (before.gpu_memory if before else None))

    def _ending(self, pid: int, seen: _Seen) -> EndedProcess | None:
        """How ``pid`` ended, if an OOM ended it."""
        report, path = seen.report, None
        found = oom_file.of_process(self._directory(), pid, since=seen.first_seen - 1.0)
        if found is not None:
            try:
                report = from_jsonable(ProbeReport, oom_file.read(found))
                path = str(found)
            except Exception:  # a damaged or foreign file: the last report seen is what there is
                report = seen.report
        oom = report.last_oom
        if oom is None or report.pid != pid:
            return None
        if path is None and oom.at < report.taken_at - RECENT_OOM:
            return None  # an OOM the job caught and survived, long before it ended
        return EndedProcess(pid=pid, ended_at=oom.at, report=report, report_file=path, user=seen.user,
                            devices=seen.devices, gpu_memory=seen.gpu_memory)
