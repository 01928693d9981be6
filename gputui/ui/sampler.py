"""What the monitor's worker thread runs: one collector sample, the probe reports, the CLI filters,
the probed processes' leak verdicts and the ones an OOM ended, as finished, immutable results for the app.

No Textual here: the first sample is taken while Textual is still being imported (ui/launch.py).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Callable, Protocol, TypedDict

from gputui.collect.host import HostReader
from gputui.collect.jobs import JobFinder
from gputui.collect.probed import ProbedProcesses
from gputui.link.endings import OomEndings
from gputui.model import Host, ProbeReport, Snapshot
from gputui.model.verdicts import LeakVerdict
from gputui.untrusted import visible_all

if TYPE_CHECKING:
    from gputui.analysis.leaks import LeakJudge


class Source(Protocol):
    """What the sampler samples: the collector, NoDriverSource, a test's fake. Where it also has
    ``probe_reports()`` (the simulator's probes), ``probed`` (a ProbedProcesses) and ``jobs`` (a
    JobFinder), they are used."""

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


class Watcher(Protocol):
    """What watches the real probes: the link client's ProbeWatcher, a test's fake. Where it also has
    ``unavailable`` ({pid: why}), ``error`` and ``close()``, they are used."""

    def poll(self) -> Mapping[int, ProbeReport]: ...


class HostSource(Protocol):
    def read(self) -> Host: ...


class _Filters(TypedDict):
    """The CLI filters, as gputui.collect.filters.select takes them."""

    only: tuple[str, ...]
    only_visible: bool
    users: tuple[str, ...]
    pids: tuple[int, ...]


class Sampler:
    """Turns a collector (anything with .sample() and .probe_reports()) into complete snapshots.

    Only the worker thread calls ``sample``; the collector, the probe watcher and the filters are
    touched nowhere else.
    """

    def __init__(self, collector: Source, *, only: Iterable[str] = (), only_visible: bool = False,
                 users: Iterable[str] = (), pids: Iterable[int] = (),
                 watch_probes: bool = True, watcher: Watcher | None = None) -> None:
        """``watcher`` (anything with ``poll() -> {pid: ProbeReport}``) replaces the link client's
        ProbeWatcher that ``watch_probes`` opens."""
        self.collector = collector
        self.filters = _Filters(only=tuple(only), only_visible=only_visible, users=tuple(users),
                            pids=tuple(pids))
        self._watcher = watcher if watcher is not None else (_open_probe_watcher() if watch_probes else None)
        self._judge: LeakJudge | None = None  # made at the first judge(): the first frame does without
        self._endings = OomEndings()

    def sample(self, outline: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """The next snapshot, its outside strings (command lines, names, everything a probe says)
        made visible: every screen shows it, and none of them may write a control character.

        ``outline`` (the early frame) is first shown the GPUs and NVML's processes before /proc is
        read for the processes' details, where the collector can (Collector.outline) and no filter
        needs those details; probes, jobs and OOM endings come with the finished snapshot only."""
        snapshot = self._collect(outline)
        reports = self._probe_reports()
        if reports:
            snapshot = dataclasses.replace(snapshot, probes=reports)
        probed = getattr(self.collector, "probed", None)
        if probed is not None:
            snapshot = probed.add_to(snapshot)
        trouble = self._probe_trouble()
        if trouble:
            snapshot = dataclasses.replace(snapshot, problems=snapshot.problems + trouble)
        if any(self.filters.values()):
            from gputui.collect.filters import select

            snapshot = select(snapshot, **self.filters)
        jobs = getattr(self.collector, "jobs", None)
        if jobs is not None:  # grouped again with the probes in (CPU ranks) and the filters applied
            snapshot = jobs.add_to(snapshot)
        return visible_all(self._endings.add_to(snapshot))

    def _collect(self, outline: Callable[[Snapshot], None] | None) -> Snapshot:
        first_step = getattr(self.collector, "outline", None)
        if outline is None or first_step is None or any(self.filters.values()):
            return self.collector.sample()
        drawn = first_step()
        outline(visible_all(drawn.picture()))
        return self.collector.complete(drawn)  # type: ignore[attr-defined]  # it has outline()

    def judge(self, snapshot: Snapshot) -> dict[int, LeakVerdict]:
        """The leak verdict of every probed process in ``snapshot``, by pid."""
        if self._judge is None:
            from gputui.analysis.leaks import LeakJudge

            self._judge = LeakJudge()
        return self._judge(snapshot)

    def _probe_reports(self) -> tuple[ProbeReport, ...]:
        found: dict[int, ProbeReport] = {}
        demo = getattr(self.collector, "probe_reports", None)
        if demo is not None:
            for report in demo():
                found[report.pid] = report
        if self._watcher is not None:
            for report in _watched_reports(self._watcher):
                found.setdefault(report.pid, report)
        return tuple(found[pid] for pid in sorted(found))

    def _probe_trouble(self) -> tuple[str, ...]:
        """Why probes could not be reached, in the words ``gputui --once`` uses (said once each)."""
        unavailable = dict(getattr(self._watcher, "unavailable", None) or {})
        found = tuple(f"probe of process {pid} did not answer: {reason}"
                      for pid, reason in sorted(unavailable.items()))
        error = getattr(self._watcher, "error", None)
        return found + ((error,) if error else ())

    def close(self) -> None:
        close = getattr(self._watcher, "close", None)
        if close is not None:
            close()
        self.collector.close()


def _open_probe_watcher() -> Watcher:
    """The link client's watcher of real probes."""
    from gputui.link.client import ProbeWatcher

    return ProbeWatcher()


def _watched_reports(watcher: Watcher) -> tuple[ProbeReport, ...]:
    try:
        return tuple(watcher.poll().values())
    except Exception:  # a misbehaving probe must never stop the monitor's sampling
        return ()


class NoDriverSource:
    """A collector stand-in for a machine without a working NVIDIA driver: no devices, no GPU
    processes, the reason as a standing problem; the host's figures still read through psutil (CPU
    jobs live on them), and probed processes come in through the probe watcher."""

    def __init__(self, reason: str, *, clock: Callable[[], float] = time.time, hostname: str | None = None,
                 host: HostSource | None = None) -> None:
        self.reason = reason
        self._clock = clock
        self.hostname = hostname or socket.gethostname()
        import psutil

        if host is None:
            host = HostReader(psutil, self.hostname)
        self._host: HostSource = host
        self.probed = ProbedProcesses(psutil)
        self.jobs = JobFinder(psutil)

    def sample(self) -> Snapshot:
        # The app says each problem once, so the full reason pops up once under the short banner.
        return Snapshot(taken_at=self._clock(), host=self._host.read(), source="none",
                        problems=(self.reason,))

    def probe_reports(self) -> tuple[ProbeReport, ...]:
        return ()

    def close(self) -> None:
        pass
