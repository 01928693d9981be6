"""What the many-host monitor's worker thread runs: the Fleet's latest view of every host, its
outside strings made visible, each host's leak verdicts, and what the monitor itself costs.

No Textual here. Each host's snapshot is made visible and judged once, when it is new: with 64
hosts, doing it again at every refresh would be most of the monitor's work.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Protocol

from gputui.analysis.leaks import JudgedLeaks, judge_leaks
from gputui.collect.own_cpu import OwnCpu
from gputui.model import HostView, MonitorCost, Snapshot
from gputui.model.record import Record
from gputui.model.verdicts import LeakVerdict
from gputui.untrusted import visible, visible_all


class Hosts(Protocol):
    """What the sampler reads: the Fleet, a test's fake."""

    def view(self) -> tuple[HostView, ...]: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class HostsSample(Record):
    """Every host as the monitor shows it, each host's leak verdicts by pid, and the monitor's cost."""

    hosts: tuple[HostView, ...]
    leaks: dict[str, dict[int, LeakVerdict]]
    taken_at: float  # when (seconds since the epoch)
    monitor: MonitorCost | None = None


class HostsSampler:
    """Turns the Fleet's views into what the app shows. Only the worker thread calls ``sample``."""

    def __init__(self, hosts: Hosts, *, cpu_clock: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        """The clocks are replaced in still pictures and tests."""
        self.hosts = hosts
        self._clock, self._wall = clock, wall
        self._own_cpu = OwnCpu(cpu_clock, clock)
        self._shown: dict[str, tuple[Snapshot, Snapshot]] = {}  # host -> (as received, made visible)
        self._leaks: dict[str, JudgedLeaks] = {}  # host -> its latest verdicts, with the reports they judged

    def sample(self) -> HostsSample:
        started = self._clock()
        views, leaks = [], {}
        for view in self.hosts.view():
            view = dataclasses.replace(view, name=visible(view.name),
                                       reason=None if view.reason is None else visible(view.reason),
                                       snapshot=self._visible(view.name, view.snapshot))
            if view.snapshot is not None:
                judged = self._leaks[view.name] = judge_leaks(view.snapshot, self._leaks.get(view.name))
                leaks[view.name] = dict(judged.verdicts)
            views.append(view)
        return HostsSample(tuple(views), leaks, self._wall(), self._cost(started))

    def _visible(self, name: str, snapshot: Snapshot | None) -> Snapshot | None:
        if snapshot is None:
            return None
        known = self._shown.get(name)
        if known is None or known[0] is not snapshot:
            known = self._shown[name] = (snapshot, visible_all(snapshot))
        return known[1]

    def _cost(self, started: float) -> MonitorCost:
        """The monitor's own CPU since the previous sample (all its threads: the hosts' readers too)."""
        ended, percent = self._own_cpu.read()
        return MonitorCost(cpu_percent=percent, sample_ms=round(1000 * (ended - started), 3))

    def close(self) -> None:
        self.hosts.close()
