"""The many-host view's vocabulary: one host as the monitor last heard from it.

A host's own Snapshot is kept whole (its PIDs and GPU indices are that host's), so nothing of one
host is mixed with another's: the host's name is its identity wherever hosts meet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.fielddoc import doc
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

    # name, state, reason and age are the `gputui.hosts` document's fields (plain/document.py HOST_FIELDS);
    # the snapshot and its judgements are written there as the host's own snapshot document.
    name: str = field(metadata=doc(
        "the host as named: an ssh destination (alias, user@host) or a URL (no password)"))
    state: HostState = field(default=HOST_CONNECTING, metadata=doc(
        "connecting (no answer yet), live, stale (no snapshot for more than three intervals) or unreachable "
        "(retried with backoff)", enum=HOST_STATES))
    reason: str | None = field(default=None, metadata=doc(
        "why it is not live (unreachable, stale or refused), in words for people"))
    age: float | None = field(default=None, metadata=doc(
        "seconds since its latest snapshot arrived; null before the first", minimum=0))
    snapshot: Snapshot | None = field(default=None, metadata=doc(
        "its latest snapshot, kept while the host is down"))
    judgements: Judgements | None = field(default=None, metadata=doc(
        "what was judged of that snapshot (the host's own sampling pipeline's)"))
