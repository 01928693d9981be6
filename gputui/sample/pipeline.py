"""The sampling pipeline under every output (``--once``, ``--json``, ``--watch``, the live monitor, the
exporter, recordings, a host of the many-host view): a gathered snapshot, judged once, as one Sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from gputui.collect import NvmlUnavailable
from gputui.model import Snapshot
from gputui.options import Options
from gputui.sample.gather import Filters, Gatherer, NoDriver
from gputui.sample.judge import Judge, Sample
from gputui.sample.probes import Fetched, FromSimulator, ReportSource, SimulatedProbes, Watched

# Process CPU % is measured between two samples; a one-shot print takes a first sample this long
# before the one it prints, so the figure covers a real interval instead of being n/a.
CPU_WINDOW = 0.3



class Source(Protocol):
    """What a pipeline samples: a Gatherer, or a test's stand-in that replays snapshots."""

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


class Pipeline:
    """Gathers and judges the samples of one machine, in order, on one thread."""

    def __init__(self, source: Source, judge: Judge | None = None, *,
                 unavailable: NvmlUnavailable | None = None) -> None:
        """``unavailable``: why there is no driver, where the pipeline goes on without one (probed CPU jobs)."""
        self.source = source
        self.judge = judge if judge is not None else Judge()
        self.unavailable = unavailable

    def sample(self) -> Sample:
        return self.judge(self.source.sample())

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_pipeline(options: Options, *, lasting: bool = False, clock: Callable[[], float] | None = None,
                  pause: Callable[[float], None] | None = None, environ: Mapping[str, str] | None = None,
                  watcher: Watched | None = None) -> Pipeline:
    """The pipeline the options ask for. ``lasting`` (``serve``, ``record``, ``--watch``): real probes are
    watched over connections kept open and asked for their steps since the last sample; otherwise each
    is asked once for its whole report. ``clock``, ``pause`` and ``environ`` replace the real ones (tests).

    Without a driver it goes on where probed processes (CPU jobs) can be reached; otherwise
    NvmlUnavailable is raised for the CLI to say.
    """
    from gputui.collect import open_collector

    unavailable = None
    try:
        machine = open_collector(options.demo, seed=options.seed, processes=options.demo_processes,
                                 clock=clock, environ=environ)
        probed, jobs = machine.probed, machine.jobs
    except NvmlUnavailable as exc:
        if options.demo is not None or not real_probes_exist():
            raise
        unavailable = exc
        no_driver = NoDriver(str(exc))
        machine, probed, jobs = no_driver, no_driver.probed, no_driver.jobs  # type: ignore[assignment]
    reports = report_sources(machine, simulated=options.demo is not None, lasting=lasting, watcher=watcher)
    gatherer = Gatherer(machine, reports=reports, filters=Filters.of(options), probed=probed, jobs=jobs,
                        cpu_window=CPU_WINDOW, pause=pause or time.sleep)
    return Pipeline(gatherer, Judge(waste=options.waste), unavailable=unavailable)


def report_sources(machine: object, *, simulated: bool, lasting: bool,
                   watcher: Watched | None = None) -> tuple[ReportSource, ...]:
    """Where probe reports come from: the simulator's probes in a demo, the real ones otherwise."""
    if simulated:
        assert isinstance(machine, SimulatedProbes)  # open_collector's simulated collector offers them
        return (FromSimulator(machine),)
    if watcher is not None:
        return (watcher,)
    if lasting:
        from gputui.link.client import ProbeWatcher

        return (Watched(ProbeWatcher()),)
    return (Fetched(),)


def real_probes_exist() -> bool:
    from gputui.link.client import discover

    return bool(discover())
