"""Where the plain modes and the exporter get their data: a collector (real or simulated), the
filters, probe reports.

Probe trouble never stops a print: a probe that does not answer becomes a line in
``Snapshot.problems``. Without a driver, reachable probes are still shown rather than refused.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gputui.collect import NvmlUnavailable, open_collector
from gputui.collect.filters import select
from gputui.collect.host import HostReader
from gputui.collect.jobs import JobFinder
from gputui.collect.probed import ProbedProcesses
from gputui.collect.users import current_user
from gputui.model import ProbeReport, Snapshot
from gputui.options import Options

if TYPE_CHECKING:
    from gputui.link.client import ProbeWatcher

# Process CPU % is measured between two samples; --once takes a first sample this long before the
# one it prints, so the figure covers a real interval instead of being n/a.
CPU_WINDOW = 0.3
PROBE_TIMEOUT = 1.0


class Source:
    """Samples for one run of a plain mode: filtered snapshots with probe reports attached."""

    def __init__(self, options: Options, *, clock: Callable[[], float] | None = None,
                 pause: Callable[[float], None] | None = None,
                 environ: Mapping[str, str] | None = None, watcher: ProbeWatcher | None = None) -> None:
        """``clock``, ``pause`` and ``environ`` replace the real ones (tests: a fake clock).

        ``watcher`` asks the real probes over connections kept open, for the steps since the last
        sample (``gputui serve`` samples for hours); without it, each sample asks each probe for its
        whole report. The Source closes it.
        """
        self.options = options
        self.watcher = watcher
        self.collector = None
        self.unavailable: NvmlUnavailable | None = None
        self._pause = pause or time.sleep
        try:
            self.collector = open_collector(options.demo, seed=options.seed,
                                            processes=options.demo_processes, clock=clock,
                                            environ=environ)
        except NvmlUnavailable as exc:
            # No driver: still worth printing if probed processes (CPU-only jobs) can be reached.
            if options.demo is not None or not _real_probes_exist():
                raise
            self.unavailable = exc
            import psutil

            # No GPUs, but the host figures are still psutil's to read (CPU jobs live on them).
            self._host = HostReader(psutil, socket.gethostname())
            self._probed = ProbedProcesses(psutil)
            self._jobs = JobFinder(psutil)
        self._sampled = False

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        if self.collector is not None:
            self.collector.close()
            self.collector = None

    def sample(self) -> Snapshot:
        """The next snapshot; the first call samples twice, CPU_WINDOW apart, for CPU %."""
        probed = self.collector.probed if self.collector is not None else self._probed
        if not self._sampled:  # CPU % is measured between two readings
            first = self.collector.sample() if self.collector is not None else Snapshot(
                taken_at=time.time(), host=self._host.read())
            probed.add_to(dataclasses.replace(first, probes=tuple(self._probe_reports()[0])))
            self._pause(CPU_WINDOW)
        if self.collector is None:
            raw = Snapshot(taken_at=time.time(), host=self._host.read(),
                           problems=(str(self.unavailable),))
        else:
            raw = self.collector.sample()
        self._sampled = True
        reports, problems = self._probe_reports()
        raw = dataclasses.replace(raw, probes=tuple(reports), problems=raw.problems + problems)
        # grouped again once the probes are in (CPU jobs, ranks' own placements) and filters applied
        jobs = self.collector.jobs if self.collector is not None else self._jobs
        return jobs.add_to(apply_filters(probed.add_to(raw), self.options))

    def _probe_reports(self) -> tuple[list[ProbeReport], tuple[str, ...]]:
        if self.options.demo is not None:
            assert self.collector is not None  # a demo always has one: open_collector raised otherwise
            return list(self.collector.probe_reports()), ()
        if self.watcher is not None:
            return watched_reports(self.watcher)
        return fetch_real_reports()


def lasting_source(options: Options, **kwargs: Any) -> Source:
    """A Source for sampling for hours (``gputui serve``, ``gputui record``): the real probes asked
    over connections kept open, for their steps since the last sample; the simulator's probes come
    with its collector."""
    if options.demo is not None:
        return Source(options, **kwargs)
    from gputui.link.client import ProbeWatcher

    return Source(options, watcher=ProbeWatcher(), **kwargs)


def _real_probes_exist() -> bool:
    from gputui.link.client import discover

    return bool(discover())


def fetch_real_reports() -> tuple[list[ProbeReport], tuple[str, ...]]:
    """Reports of this user's live probes, and a line for each probe that did not answer."""
    from gputui.link.client import ProbeUnavailable, discover, fetch_report

    reports, problems = [], []
    for pid in discover():
        try:
            reports.append(fetch_report(pid, timeout=PROBE_TIMEOUT))
        except ProbeUnavailable as exc:
            problems.append(did_not_answer(pid, exc.detail))
    return reports, tuple(problems)


def watched_reports(watcher: ProbeWatcher) -> tuple[list[ProbeReport], tuple[str, ...]]:
    """The watcher's newest reports, and a line for each probe that did not answer (poll never raises)."""
    reports = [report for _, report in sorted(watcher.poll().items())]
    problems = [did_not_answer(pid, reason) for pid, reason in sorted(watcher.unavailable.items())]
    if watcher.error:
        problems.append(watcher.error)
    return reports, tuple(problems)


def did_not_answer(pid: int, reason: str) -> str:
    return f"probe of process {pid} did not answer: {reason}"


def apply_filters(snapshot: Snapshot, options: Options) -> Snapshot:
    """The CLI filters on devices and processes, and the same choice for probe reports."""
    chosen = select(snapshot, only=options.only, only_visible=options.only_visible,
                    users=options.users, pids=options.pids)
    listed_before = {p.own_pid for p in snapshot.processes}
    listed_after = {p.own_pid for p in chosen.processes}
    probes = tuple(r for r in snapshot.probes
                   if _keep_probe(r, options, listed_before, listed_after))
    return dataclasses.replace(chosen, probes=probes)


def _keep_probe(report: ProbeReport, options: Options, listed_before: set[int],
                listed_after: set[int]) -> bool:
    if options.pids and report.pid not in options.pids:
        return False
    if report.pid in listed_before:  # on a GPU: follows its process
        return report.pid in listed_after
    # NVML does not list it (CPU-only job, no driver): no GPU, so GPU filters drop it; our probes
    # all belong to the current user (the socket directory is per user).
    if options.only or options.only_visible:
        return False
    return not options.users or _current_user() in options.users


def _current_user() -> str:
    return current_user()
