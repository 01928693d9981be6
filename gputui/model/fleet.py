"""The many-host view's vocabulary: one host as the monitor last heard from it.

A host's own Snapshot is kept whole (its PIDs and GPU indices are that host's), so nothing of one
host is mixed with another's: the host's name is its identity wherever hosts meet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.gpu import Snapshot
from gputui.model.judgement import Judgements
from gputui.model.record import Record

# HostView.state values
HostState = Literal["connecting", "live", "stale", "unreachable"]
HOST_CONNECTING: Final = "connecting"  # asked, no answer yet
HOST_LIVE: Final = "live"  # snapshots arrive
HOST_STALE: Final = "stale"  # connected, but no snapshot for more than three intervals
HOST_UNREACHABLE: Final = "unreachable"  # the connection failed or ended; retried with backoff
HOST_STATES: tuple[HostState, ...] = (HOST_CONNECTING, HOST_LIVE, HOST_STALE, HOST_UNREACHABLE)


@dataclass(frozen=True, eq=False, repr=False)
class HostView(Record):
    """One host of the many-host view: how its connection stands and its latest snapshot."""

    name: str  # as the user wrote it: an ssh destination (alias, user@host) or a URL
    state: HostState = HOST_CONNECTING
    reason: str | None = None  # why it is unreachable, stale or refused, in words for people
    age: float | None = None  # seconds since its latest snapshot arrived; None before the first
    snapshot: Snapshot | None = field(default=None)  # the latest one, kept while the host is down
    judgements: Judgements | None = None  # what was judged of that snapshot (the host's own pipeline's)
