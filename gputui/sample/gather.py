"""The one way a sample is assembled, in every mode: the machine's snapshot (a collector, or the host
alone without a driver), the probe reports, the probed processes /proc shows, the CLI filters, the
jobs, and the probed processes an OOM ended.

No Textual here: the live monitor takes its first sample while Textual is still being imported.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gputui.collect.filters import select
from gputui.collect.host import host_name
from gputui.collect.users import current_user
from gputui.link.endings import OomEndings
from gputui.model import Host, ProbeReport, Snapshot
from gputui.model.record import Record
from gputui.options import Options
from gputui.sample.probes import ReportSource, gathered

if TYPE_CHECKING:
    from gputui.collect.collector import Outline
    from gputui.collect.jobs import JobFinder
    from gputui.collect.probed import ProbedProcesses


class Machine(Protocol):
    """What is sampled: the collector, NoDriver, a test's fake."""

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


@runtime_checkable
class Outlined(Protocol):
    """A machine that can show NVML's picture before /proc is read (the collector): the early frame."""

    def outline(self) -> Outline: ...

    def complete(self, outline: Outline) -> Snapshot: ...


@runtime_checkable
class FindsProcesses(Protocol):
    """A machine that also reads the probed processes /proc shows and groups jobs (the collector,
    NoDriver): the pipeline adds both once the probes are in."""

    probed: ProbedProcesses
    jobs: JobFinder


class HostSource(Protocol):
    def read(self) -> Host: ...


@dataclass(frozen=True, eq=False, repr=False)
class Filters(Record):
    """The CLI's choice of devices and processes (``--only``, ``--only-visible``, ``--user``, ``--pid``)."""

    only: tuple[str, ...] = ()
    only_visible: bool = False
    users: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()

    @classmethod
    def of(cls, options: Options) -> Filters:
        return cls(tuple(options.only), options.only_visible, tuple(options.users), tuple(options.pids))

    def __bool__(self) -> bool:
        return bool(self.only or self.only_visible or self.users or self.pids)


def apply_filters(snapshot: Snapshot, filters: Filters) -> Snapshot:
    """The filters on devices and processes, and the same choice for probe reports."""
    chosen = select(snapshot, only=filters.only, only_visible=filters.only_visible, users=filters.users,
                    pids=filters.pids)
    listed_before = {p.own_pid for p in snapshot.processes}
    listed_after = {p.own_pid for p in chosen.processes}
    probes = tuple(r for r in snapshot.probes if _keep_probe(r, filters, listed_before, listed_after))
    return dataclasses.replace(chosen, probes=probes)


def _keep_probe(report: ProbeReport, filters: Filters, listed_before: set[int], listed_after: set[int]) -> bool:
    if filters.pids and report.pid not in filters.pids:
        return False
    if report.pid in listed_before:  # on a GPU: follows its process
        return report.pid in listed_after
    # NVML does not list it (CPU-only job, no driver): no GPU, so GPU filters drop it; our probes
    # all belong to the current user (the socket directory is per user).
    if filters.only or filters.only_visible:
        return False
    return not filters.users or current_user() in filters.users


class Gatherer:
    """Complete snapshots of one machine, the same way for every mode. Only one thread samples."""

    def __init__(self, machine: Machine, *, reports: tuple[ReportSource, ...] = (), filters: Filters = Filters(),
                 probed: ProbedProcesses | None = None, jobs: JobFinder | None = None,
                 cpu_window: float = 0.0, pause: Callable[[float], None] = time.sleep) -> None:
        """``probed`` and ``jobs`` add the probed processes /proc shows and group the jobs again once the
        probes are in (a collector's own, or NoDriver's); ``cpu_window`` (a one-shot print): the first
        sample is taken twice this far apart, so process CPU % covers a real interval."""
        self.machine = machine
        self.reports = reports
        self.filters = filters
        self._probed = probed
        self._jobs = jobs
        self._cpu_window = cpu_window
        self._pause = pause
        self._endings = OomEndings()
        self._sampled = False

    def sample(self, outline: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """The next snapshot. ``outline`` (the live monitor's early frame) is first shown the GPUs and
        NVML's processes, where the machine can and no filter needs the processes' details."""
        if not self._sampled and self._cpu_window:
            self._warm_up()
        self._sampled = True
        raw = self._collect(outline)
        reports, problems = gathered(self.reports)
        snapshot = raw
        if reports or problems:  # (a snapshot with nothing to add stays the same object)
            snapshot = dataclasses.replace(raw, probes=_joined(raw.probes, reports), problems=raw.problems + problems)
        if self._probed is not None:
            snapshot = self._probed.add_to(snapshot)
        if self.filters:
            snapshot = apply_filters(snapshot, self.filters)
        # Grouped again with the probes in (CPU ranks) and the filters applied; a machine's own snapshot with
        # nothing added is grouped already (the collector groups its processes; NoDriver has none to group).
        if self._jobs is not None and snapshot is not raw:
            snapshot = self._jobs.add_to(snapshot)
        return self._endings.add_to(snapshot)

    def _warm_up(self) -> None:
        """A first reading for CPU % to be measured from (of the probed processes too)."""
        first = self.machine.sample()
        if self._probed is not None:
            self._probed.add_to(dataclasses.replace(first, probes=gathered(self.reports)[0]))
        self._pause(self._cpu_window)

    def _collect(self, outline: Callable[[Snapshot], None] | None) -> Snapshot:
        if outline is None or self.filters or not isinstance(self.machine, Outlined):
            return self.machine.sample()
        drawn = self.machine.outline()
        from gputui.untrusted import visible_all

        outline(visible_all(drawn.picture()))
        return self.machine.complete(drawn)

    def close(self) -> None:
        for source in self.reports:
            source.close()
        self.machine.close()


def _joined(carried: tuple[ProbeReport, ...], asked: tuple[ProbeReport, ...]) -> tuple[ProbeReport, ...]:
    """The reports a machine's snapshot carries (a still picture, a replay), the ones just asked for
    replacing them, by pid."""
    if not carried:
        return asked
    found = {r.pid: r for r in carried}
    found.update((r.pid, r) for r in asked)
    return tuple(found[pid] for pid in sorted(found))


class NoDriver:
    """The machine without a working NVIDIA driver: no devices, no GPU processes, the reason as a
    standing problem; the host's figures still read through psutil (CPU jobs live on them), and
    probed processes come in through their probes."""

    def __init__(self, reason: str, *, clock: Callable[[], float] = time.time, hostname: str | None = None,
                 host: HostSource | None = None) -> None:
        import psutil

        from gputui.collect.host import HostReader
        from gputui.collect.jobs import JobFinder
        from gputui.collect.probed import ProbedProcesses

        self.reason = reason
        self._clock = clock
        self.hostname = hostname or host_name()
        self._host: HostSource = host if host is not None else HostReader(psutil, self.hostname)
        self.probed = ProbedProcesses(psutil)
        self.jobs = JobFinder(psutil)

    def sample(self) -> Snapshot:
        # Each view says each problem once, so the full reason is said once under the short banner.
        return Snapshot(taken_at=self._clock(), host=self._host.read(), source="none", problems=(self.reason,))

    def close(self) -> None:
        pass
