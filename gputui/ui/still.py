"""A still picture of the monitor: a simulated scenario played for a while on a fixed clock, frozen.

Screenshots, snapshot tests and the README pictures come from here, so they are the same on every run:
the history is recorded from the simulator at exact times and the app keeps seeing the last instant.
"""

from __future__ import annotations

from typing import Any

from gputui.analysis.history import History
from gputui.model import ProbeReport, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.sampler import Sampler


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
           processes: int | None = None) -> tuple[History, Snapshot]:
    """Play a scenario from 0 to ``seconds`` on a fake clock; the history before the last instant,
    and the last snapshot."""
    from gputui.collect import open_collector

    now = [0.0]
    sampler = Sampler(open_collector(scenario, seed=seed, clock=lambda: now[0], processes=processes),
                      watch_probes=False)
    history = History()
    try:
        steps = int(seconds / step)
        for i in range(steps):
            now[0] = i * step
            history.add(sampler.sample())
        now[0] = steps * step
        last = sampler.sample()
    finally:
        sampler.close()
    return history, last


def still_app(scenario: str, *, seconds: float = 120.0, seed: int = 0, **options: Any) -> GpuTuiApp:
    """The monitor showing ``scenario`` as it is ``seconds`` in, with that much history behind it."""
    history, last = record(scenario, seconds=seconds, seed=seed)
    options.setdefault("me", "lena")
    return GpuTuiApp(Sampler(FrozenSource(last), watch_probes=False), history=history,
                     simulated=True, **options)
