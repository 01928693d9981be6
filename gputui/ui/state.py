"""What the monitor's screens read of their app, as typed views: the app hands itself to its main
screen as one of these, so a screen reads the latest sample without knowing which source feeds the app (this
machine, the many-host view or a replay) and without importing the app.
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
    def paused(self) -> bool: ...

    @property
    def problem(self) -> str | None: ...

    @property
    def as_root(self) -> bool: ...

    @property
    def position(self) -> str | None:
        """Where a replay is in its recording (None: live)."""
        ...


class HostsState(MonitorState, Protocol):
    """The many-host view's: every host's latest, and each host's HostState (history, judged sample)."""

    @property
    def hosts(self) -> tuple[HostView, ...]: ...

    @property
    def sampled_at(self) -> float | None: ...

    @property
    def cost(self) -> MonitorCost | None: ...

    @property
    def states(self) -> Mapping[str, HostState]:
        """Each host's, by name: the hosts that sent a snapshot."""
        ...
