"""The many-host view's app (``gputui --hosts``): the live monitor's keys and screens over several
machines' snapshots. Each host has a HostState of its own (its history and latest judged sample), so PIDs
and GPU indices that repeat across hosts never meet; a process's detail screen reads its host's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message

from gputui.model import HostView, MonitorCost
from gputui.model.waste import Waste
from gputui.sample.state import HostState
from gputui.ui.app import GpuTuiApp, SampleFailed
from gputui.ui.hosts_sampler import HostsSample, HostsSampler
from gputui.ui.hosts_screen import HostsScreen
from gputui.ui.main_screen import MainScreen
from gputui.untrusted import visible

if TYPE_CHECKING:
    from gputui.ui.screens.detail import ProcessDetail
    from gputui.ui.screens.job_detail import JobDetail


class HostsReady(Message):
    """A new look at every host, and how long it took (seconds)."""

    def __init__(self, sample: HostsSample, took: float) -> None:
        super().__init__()
        self.sample, self.took = sample, took


class HostsApp(GpuTuiApp):
    """gputui's live monitor over several hosts."""

    def __init__(self, sampler: HostsSampler, **kwargs: Any) -> None:
        super().__init__(None, source=sampler, **kwargs)
        self.hosts_sampler = sampler
        self.hosts: tuple[HostView, ...] = ()
        self.sampled_at: float | None = None
        self.cost: MonitorCost | None = None
        self.states: dict[str, HostState] = {}  # by host name

    def make_main_screen(self) -> MainScreen:
        return HostsScreen(self, ascii=self.ascii, columns=self.columns, me=self.me)

    @work(thread=True, exclusive=True, group="sampler", exit_on_error=False)
    def _sample(self) -> None:
        started = time.monotonic()
        try:
            sample = self.hosts_sampler.sample()
        except Exception as exc:  # noqa: BLE001 - the monitor keeps its last picture and says why
            self.post_message(SampleFailed(visible(f"sampling failed: {type(exc).__name__}: {exc}")))
            return
        self.post_message(HostsReady(sample, time.monotonic() - started))

    def on_hosts_ready(self, message: HostsReady) -> None:
        self.accept_hosts(message.sample)
        self._schedule(message.took)

    def accept_hosts(self, sample: HostsSample) -> None:
        """Take every host's latest judged sample into its HostState, then draw the screen showing."""
        self.hosts, self.cost = sample.hosts, sample.monitor
        self.sampled_at = sample.taken_at
        self.samples += 1
        for name, judged in sample.samples.items():
            self.states.setdefault(name, HostState()).take(judged)
        self.show_latest()

    def show_detail(self, screen: ProcessDetail | JobDetail) -> None:
        state = self.states.get(screen.host or "")
        if state is not None and state.snapshot is not None:
            screen.show(state.snapshot, state.history, state.trends, state.leaks, state.judgements)

    def waste_views(self) -> list[tuple[str | None, Waste | None]]:
        """Each host's judgement of who holds its GPUs idle, as its own gputui made it."""
        return [(view.name, view.judgements.waste if view.judgements is not None else None) for view in self.hosts]

    def _cost_words(self) -> str:
        if self.cost is None or self.cost.cpu_percent is None:
            return ""
        return (f"gputui itself uses {self.cost.cpu_percent:.1f}% of one CPU core (all its threads, "
                f"the hosts' readers too), every {self.interval:g} s.")
