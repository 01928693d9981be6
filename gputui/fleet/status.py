"""One host's connection state, as a value that only changes when told: connecting, live, stale,
unreachable (with the reason), and how long to wait before the next try.

Pure (the clock is passed in), so the transport's threads and the tests drive it alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputui.model import HOST_CONNECTING, HOST_LIVE, HOST_STALE, HOST_UNREACHABLE, HostState, HostView, Snapshot
from gputui.model.judgement import Judgements

FIRST_RETRY = 2.0  # seconds before the first retry; each failure in a row doubles it
LAST_RETRY = 60.0  # ... up to this
STALE_AFTER = 3  # intervals without a snapshot before a live host is called stale


@dataclass
class HostStatus:
    """What is known of one host's connection. Not thread-safe: its Link guards it."""

    name: str
    interval: float
    state: HostState = HOST_CONNECTING
    reason: str | None = None
    snapshot: Snapshot | None = None
    judgements: Judgements | None = None  # the latest snapshot's
    received_at: float | None = None  # monotonic time of the latest snapshot
    failures: int = 0  # failures since the last snapshot

    def connecting(self) -> None:
        # A host that failed keeps showing why while it is tried again (up before or never), until it
        # answers: a retry is no news, and a view read during one must not unsay the failure.
        if self.state != HOST_UNREACHABLE:
            self.state = HOST_CONNECTING

    def received(self, snapshot: Snapshot, at: float, judgements: Judgements | None = None) -> None:
        self.state, self.reason = HOST_LIVE, None
        self.snapshot, self.received_at, self.failures = snapshot, at, 0
        self.judgements = judgements

    def failed(self, reason: str) -> float:
        """The connection ended or could not be made: seconds to wait before trying again."""
        self.state, self.reason = HOST_UNREACHABLE, reason
        self.failures += 1
        return retry_delay(self.failures)

    def view(self, now: float) -> HostView:
        """The host as the view shows it at ``now`` (a live host silent too long is stale)."""
        age = None if self.received_at is None else max(0.0, now - self.received_at)
        state: HostState = self.state
        reason = self.reason
        if state == HOST_LIVE and age is not None and age > STALE_AFTER * self.interval:
            state, reason = HOST_STALE, f"no snapshot for {age:.0f} s"
        return HostView(self.name, state, reason, age, self.snapshot, self.judgements)


def retry_delay(failures: int) -> float:
    """Exponential backoff: 2 s after the first failure, doubling, at most 60 s."""
    return min(LAST_RETRY, FIRST_RETRY * 2 ** max(0, failures - 1))


def state_words(view: HostView) -> str:
    """How a host stands, in words: "live", "stale: no snapshot for 12 s", "unreachable: Connection
    refused"."""
    return view.state if not view.reason else f"{view.state}: {view.reason}"
