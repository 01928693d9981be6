"""What the monitor's screens read of their app and its source, as typed read-only views: the app hands itself to
its main screen as one of these, so a screen reads the latest sample without knowing which source feeds the app
(this machine, the many-host view or a replay) and without importing the app; what a source keeps (whether it
stands still, every host the many-host view shows) the screens read of the source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gputui.analysis.history import History, ProcessKey
    from gputui.model import HostView, MonitorCost, Snapshot
    from gputui.model.judgement import Judgements
    from gputui.model.verdicts import LeakVerdict, ProcessTrend
    from gputui.sample.state import HostState
    from gputui.ui.startup.monitor_options import MonitorOptions


class SourceState(Protocol):
    """What the screens read of any source."""

    @property
    def paused(self) -> bool:
        """Whether the monitor stands still (p): sampling paused, a recording not playing."""
        ...


class MonitorState(Protocol):
    """The latest sample, its history and verdicts, and how sampling goes."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def history(self) -> History: ...

    @property
    def trends(self) -> Mapping[ProcessKey, ProcessTrend]: ...

    @property
    def leaks(self) -> Mapping[int, LeakVerdict]: ...

    @property
    def judgements(self) -> Judgements | None:
        """The sampling pipeline's, made with these trends and verdicts (None: none made, or not with them)."""
        ...

    @property
    def interval(self) -> float: ...

    @property
    def source(self) -> SourceState:
        """What feeds the monitor (ui/sources/__init__.py): it keeps whether the monitor stands still."""
        ...

    @property
    def problem(self) -> str | None: ...

    @property
    def options(self) -> MonitorOptions:
        """How the monitor was asked to look (as root: the header says so)."""
        ...

    @property
    def position(self) -> str | None:
        """Where a replay is in its recording (None: live)."""
        ...


class ManyHosts(SourceState, Protocol):
    """What the many-host view shows, as its screen reads it (ui/sources/hosts_sampler.py's HostsSampler keeps it)."""

    @property
    def hosts(self) -> tuple[HostView, ...]:
        """Every host's latest view, in order."""
        ...

    @property
    def states(self) -> Mapping[str, HostState]:
        """Each host's history and latest judged sample, by name: the hosts that sent a snapshot."""
        ...

    @property
    def sampled_at(self) -> float | None:
        """When the latest look was taken (seconds since the epoch; None: none yet)."""
        ...

    @property
    def cost(self) -> MonitorCost | None: ...
