"""The many-host monitor's source (``gputui --hosts``): what its worker thread runs, the Fleet's latest view of
every host, its outside strings made visible, each host's snapshot with the judgements its own sampling
pipeline made of it (as ``--hosts --once`` prints them), and what the monitor itself costs; each host's judged
sample is taken into a HostState of the host's own (so PIDs and GPU indices that repeat across hosts never meet),
kept here with every host's latest view and shown on the HostsScreen (which reads them as ui/state.py's ManyHosts).

No Textual here (the HostsScreen is imported when the app asks for it). Each host's snapshot is made visible
once, when it is new: with 64 hosts, doing it again at every refresh would be most of the monitor's work.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from gputui.collect.own_cpu import OwnCpu
from gputui.model import HostView, MonitorCost, Snapshot
from gputui.model.judgement import Judgements
from gputui.model.record import Record
from gputui.model.verdicts import LeakVerdict
from gputui.sample.judge import Judge, Sample, sample_of
from gputui.sample.state import HostState
from gputui.ui.sources import PROBE, RECORD_SITES, Declared
from gputui.untrusted import visible, visible_all

if TYPE_CHECKING:
    from gputui.model.waste import Waste
    from gputui.ui.main_screen import MainScreen
    from gputui.ui.table.rows import Row


class Hosts(Protocol):
    """What the sampler reads: the Fleet, a test's fake."""

    def view(self) -> tuple[HostView, ...]: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class HostsSample(Record):
    """Every host as the monitor shows it, each host's latest sample judged, and the monitor's cost."""

    hosts: tuple[HostView, ...]
    samples: dict[str, Sample]  # by host name: the hosts with a snapshot
    taken_at: float  # when (seconds since the epoch)
    monitor: MonitorCost | None = None

    @property
    def leaks(self) -> dict[str, dict[int, LeakVerdict]]:
        """Each host's leak verdicts by pid."""
        return {name: dict(sample.leaks) for name, sample in self.samples.items()}


class HostsSampler(Declared):
    """Turns the Fleet's views into what the app shows, and keeps what it shows (``ManyHosts``). Only the worker
    thread calls ``sample``; ``accept`` and the screens, on the UI thread, are the only ones to touch the rest.
    The processes are on other machines: no probe is attached there, nor asked anything. (Signals are
    refused by the screen, which names the selected process's host: HostsScreen.why_no_signal_target.)"""

    CANNOT = {RECORD_SITES: "The many-host view is read-only: no request is sent to a probe on another machine. "
                            "Run gputui on that host to record its allocation sites.",
              PROBE: "The many-host view is read-only: it attaches no probe on another machine. Run "
                     "gputui attach PID on that host."}

    def __init__(self, hosts: Hosts, *, cpu_clock: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        """``hosts``: the Fleet; the clocks are replaced in still pictures and tests."""
        self.fleet = hosts
        self._clock, self._wall = clock, wall
        self._own_cpu = OwnCpu(cpu_clock, clock)
        self._judges: dict[str, Judge] = {}  # host -> a Judge for a view that carries no judgements
        self._judged: dict[str, tuple[Snapshot, Sample]] = {}  # host -> (as received, made visible and judged)
        # What the screens show (ManyHosts): every host's latest view, each host's HostState by name, when the
        # latest look was taken and what it cost.
        self.hosts: tuple[HostView, ...] = ()
        self.states: dict[str, HostState] = {}
        self.sampled_at: float | None = None
        self.cost: MonitorCost | None = None

    def sample(self) -> HostsSample:
        started = self._clock()
        views, samples = [], {}
        for view in self.fleet.view():
            name = visible(view.name)
            judged = self._judged_view(name, view.snapshot, view.judgements)
            reason = None if view.reason is None else visible(view.reason)
            views.append(dataclasses.replace(view, name=name, reason=reason,
                                             snapshot=judged.snapshot if judged is not None else None))
            if judged is not None:
                samples[name] = judged
        return HostsSample(tuple(views), samples, self._wall(), self._cost(started))

    def _judged_view(self, name: str, snapshot: Snapshot | None, judgements: Judgements | None) -> Sample | None:
        """Host ``name``'s snapshot and its own judgements of it, made visible, once for each snapshot the
        host sends. (The Fleet judges an older gputui's snapshots; a view without judgements all the same,
        a test's, is judged here by a Judge of the host's own, as the Fleet would.)"""
        if snapshot is None:
            return None
        known = self._judged.get(name)
        if known is None or known[0] is not snapshot:
            if judgements is None:
                judged = self._judges.setdefault(name, Judge())(visible_all(snapshot))
            else:
                judged = sample_of(visible_all(snapshot), visible_all(judgements))
            known = self._judged[name] = (snapshot, judged)
        return known[1]

    def judge(self, taken: HostsSample) -> HostsSample:
        """Each host's sample is judged already (by its own gputui, or ``_judged_view``)."""
        return taken

    def accept(self, app: Any, judged: HostsSample) -> None:
        """Take every host's latest judged sample into its HostState, then have ``app`` draw the screen showing."""
        self.hosts, self.cost, self.sampled_at = judged.hosts, judged.monitor, judged.taken_at
        for name, sample in judged.samples.items():
            self.states.setdefault(name, HostState()).take(sample)
        app.show_latest()

    def main_screen(self, app: Any) -> MainScreen:
        from gputui.ui.hosts_screen import HostsScreen

        return HostsScreen(app, self, ascii=app.options.ascii, columns=app.options.columns, me=app.me)

    def waste_views(self, app: Any) -> list[tuple[str | None, Waste | None]]:
        """Each host's judgement of who holds its GPUs idle, as its own gputui made it."""
        return [(view.name, view.judgements.waste if view.judgements is not None else None) for view in self.hosts]

    def cost_words(self, app: Any) -> str:
        if self.cost is None or self.cost.cpu_percent is None:
            return ""
        return (f"gputui itself uses {self.cost.cpu_percent:.1f}% of one CPU core (all its threads, "
                f"the hosts' readers too), every {app.interval:g} s.")

    def host_state(self, host: str) -> HostState | None:
        return self.states.get(host)

    def cannot(self, what: str, selected: Row | None) -> str | None:
        """The probe's refusal names the selected process's host, and how to attach one there."""
        if what != PROBE or selected is None or selected.host is None:
            return super().cannot(what, selected)
        return (f"Process {selected.pid} runs on {selected.host}: the many-host view is read-only and attaches no "
                f"probe on another machine. To attach one there: ssh {selected.host} gputui attach {selected.pid}")

    def _cost(self, started: float) -> MonitorCost:
        """The monitor's own CPU since the previous sample (all its threads: the hosts' readers too)."""
        ended, percent = self._own_cpu.read()
        return MonitorCost(cpu_percent=percent, sample_ms=round(1000 * (ended - started), 3))

    def close(self) -> None:
        self.fleet.close()
