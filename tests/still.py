"""A still picture of the monitor: a simulated scenario played for a while on a fixed clock, frozen.

Screenshots, snapshot tests and the README pictures come from here, so they are the same on every run:
the history is recorded from the simulator at exact times and the app keeps seeing the last instant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import count
from pathlib import Path
from typing import Any

from gputui.analysis.history import History
from gputui.analysis.waste import WasteJudge
from gputui.model import HOST_LIVE, HOST_UNREACHABLE, HostView, ProbeReport, Snapshot
from gputui.sample.judge import Judge
from gputui.sample.state import HostState
from gputui.ui.app import GpuTuiApp, Requester
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions


class FrozenSource:
    """A collector that keeps answering with one snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def sample(self) -> Snapshot:
        return self.snapshot

    def probe_reports(self) -> tuple[ProbeReport, ...]:
        return ()

    def close(self) -> None:
        pass


def record(scenario: str, *, seconds: float = 120.0, step: float = 2.0, seed: int = 0,
           processes: int | None = None, watch: Callable[[Snapshot], object] | None = None) -> tuple[History, Snapshot]:
    """Play a scenario from 0 to ``seconds`` on a fake clock; the history before the last instant,
    and the last snapshot. ``watch`` is handed each snapshot before the last, too (the idle judge)."""
    from gputui.collect import open_collector

    now = [0.0]
    sampler = Sampler(open_collector(scenario, seed=seed, clock=lambda: now[0], processes=processes),
                      watch_probes=False)
    history = History()
    try:
        steps = int(seconds / step)
        for i in range(steps):
            now[0] = i * step
            snapshot = sampler.sample()
            history.add(snapshot)
            if watch is not None:
                watch(snapshot)
        now[0] = steps * step
        last = sampler.sample()
    finally:
        sampler.close()
    return history, last


def monitor_options(options: dict[str, Any]) -> MonitorOptions:
    """A still picture's MonitorOptions: simulated, "lena"'s, and ``options`` (MonitorOptions' fields)."""
    return MonitorOptions(**{"me": "lena", "simulated": True, **options})


def still_app(scenario: str, *, seconds: float = 120.0, seed: int = 0, requester: Requester | None = None,
              **options: Any) -> GpuTuiApp:
    """The monitor showing ``scenario`` as it is ``seconds`` in, with that much history behind it; ``options``:
    MonitorOptions' fields."""
    waste = WasteJudge()  # who holds GPUs idle, judged over the same seconds
    history, last = record(scenario, seconds=seconds, seed=seed, watch=waste)
    app = GpuTuiApp(Sampler(FrozenSource(last), watch_probes=False, history=history, waste=waste),
                    monitor_options(options), requester=requester)
    app.state = HostState(history)  # the charts' history: the recorded seconds
    return app


class FrozenHosts:
    """A Fleet that keeps answering with the same views."""

    def __init__(self, views: tuple[HostView, ...]) -> None:
        self.views = views

    def view(self) -> tuple[HostView, ...]:
        return self.views

    def close(self) -> None:
        pass


DOWN = "connect to host {} port 22: Connection refused"


def still_hosts_app(hosts: Mapping[str, str | None], *, seconds: float = 120.0, **options: Any) -> GpuTuiApp:
    """The many-host monitor over ``hosts`` (name -> demo scenario, None: unreachable), each
    ``seconds`` into its scenario with that much history, the monitor's own cost shown as 1%."""
    from gputui.ui.sources.hosts_sampler import HostsSampler

    idle = {name: WasteJudge() for name, scenario in hosts.items() if scenario is not None}  # each host's own
    recorded = {name: record(scenario, seconds=seconds, seed=i, watch=idle[name])
                for i, (name, scenario) in enumerate(hosts.items()) if scenario is not None}
    # Each host's judgements, as its own gputui's pipeline made them over what it recorded.
    views = tuple(HostView(name, HOST_LIVE, None, 0.4, recorded[name][1],
                           Judge(recorded[name][0], idle[name])(recorded[name][1]).judgements) if name in recorded
                  else HostView(name, HOST_UNREACHABLE, DOWN.format(name)) for name in hosts)
    halves, cpu = count(), count()
    # A sample reads the clock twice and the CPU clock once: one second and 10 ms each, "self 1.0% CPU".
    sampler = HostsSampler(FrozenHosts(views), clock=lambda: 0.5 * next(halves),
                           cpu_clock=lambda: 0.01 * next(cpu),
                           wall=lambda: max(s.taken_at for _, s in recorded.values()))
    sampler.sample()  # the monitor's cost is measured between two samples
    sampler.states.update((name, HostState(history)) for name, (history, _) in recorded.items())
    return GpuTuiApp(sampler, monitor_options(options))


def still_replay_app(scenario: str, path: str | Path, *, seconds: float = 180.0, at: float = 120.0,
                     **options: Any) -> GpuTuiApp:
    """``gputui replay`` of ``scenario`` recorded for ``seconds`` (every 2 s, on a fake clock, into
    ``path``), paused ``at`` seconds in."""
    from gputui.options import Options, RecordOptions
    from gputui.record.reader import Recording
    from gputui.record.run import record
    from gputui.ui.sources.replay import Replay

    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds

    recorded = Options(mode="record", demo=scenario, interval=2.0,
                       record=RecordOptions(file=str(path), duration=float(seconds)))
    record(recorded, clock=lambda: now[0], pause=pause, quiet=True)
    recording = Recording(path)
    return GpuTuiApp(Replay(recording, start=recording.index_at(recording.times[0] + at), paused=True),
                     monitor_options(options))
