"""What the monitor's worker thread runs: the sampling pipeline (gputui/sample/), its results made
visible for the screens.

No Textual here: the first sample is taken while Textual is still being imported (ui/startup/launch.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gputui.analysis.history import History
from gputui.analysis.waste import WasteJudge
from gputui.model import Snapshot
from gputui.model.waste import WasteRules
from gputui.sample.gather import Filters, FindsProcesses, Gatherer, Machine, NoDriver
from gputui.sample.judge import Judge, Sample
from gputui.sample.probes import FromSimulator, ReportSource, SimulatedProbes, Watched, Watcher
from gputui.ui.sources import Declared
from gputui.untrusted import visible_all

Source = Machine  # what the sampler samples: the collector, NoDriverSource, a test's fake
NoDriverSource = NoDriver


class Sampler(Declared):
    """The live monitor's pipeline: ``sample`` gathers a snapshot, ``judge`` judges it. Only the worker
    thread calls them; the collector, the probe watcher and the judge are touched nowhere else. It can
    do everything a monitor is asked (Declared.CANNOT is empty)."""

    def __init__(self, collector: Source, *, only: Iterable[str] = (), only_visible: bool = False,
                 users: Iterable[str] = (), pids: Iterable[int] = (), watch_probes: bool = True,
                 watcher: Watcher | None = None, history: History | None = None,
                 waste: WasteRules | WasteJudge | None = None) -> None:
        """``watcher`` replaces the link client's ProbeWatcher that ``watch_probes`` opens; ``history``
        (a still picture's, recorded before) is the one the memory trends are judged from; ``waste``: when a
        held GPU counts as idle, or the idle judge (a still picture's, that watched the recorded seconds)."""
        self.collector = collector
        reports: list[ReportSource] = []
        if isinstance(collector, SimulatedProbes):  # the simulator's probed jobs (the real collector has none)
            reports.append(FromSimulator(collector))
        if watcher is not None:
            reports.append(Watched(watcher))
        elif watch_probes:
            from gputui.link.client import ProbeWatcher

            reports.append(Watched(ProbeWatcher()))
        probed = jobs = None
        if isinstance(collector, FindsProcesses):  # a collector, NoDriver; a test's fake may not
            probed, jobs = collector.probed, collector.jobs
        self.gatherer = Gatherer(collector, reports=tuple(reports), probed=probed, jobs=jobs,
                                 filters=Filters(tuple(only), only_visible, tuple(users), tuple(pids)))
        self._judge = Judge(history, waste)

    def sample(self, outline: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """The next snapshot, its outside strings (command lines, names, everything a probe says)
        made visible: every screen shows it, and none of them may write a control character.

        ``outline`` (the early frame) is first shown the GPUs and NVML's processes before /proc is
        read; probes, jobs and OOM endings come with the finished snapshot only."""
        return visible_all(self.gatherer.sample(outline))

    def judge(self, snapshot: Snapshot) -> Sample:
        """Every judgement of ``snapshot`` (taken by ``sample``: visible already, so the outside words
        the judgements quote are too, and their own line breaks stay)."""
        return self._judge(snapshot)

    def accept(self, app: Any, judged: Sample) -> None:
        app.accept(judged)

    def close(self) -> None:
        self.gatherer.close()
