"""All the hosts of the many-host view: one Link each, started together, read together, closed
together (no ssh child outlives the monitor).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gputui.fleet.entries import HostEntry
from gputui.fleet.link import Link
from gputui.model import HostView

# Decoding a host's snapshot document costs the monitor 1-2 ms (8 GPUs): past this many documents a
# second, hosts are asked to send less often rather than the monitor spending a core on them
# (64 hosts at a 1 s interval: each sends every 8 s). The screen still refreshes every interval.
DOCUMENTS_PER_SECOND = 8


class Fleet:
    """The hosts' latest views, in the order the user named them."""

    def __init__(self, entries: Sequence[HostEntry], interval: float, *,
                 link: Callable[[HostEntry, float], Link] = Link) -> None:
        """``interval``: how often each host is asked for a snapshot, stretched where there are more
        hosts than DOCUMENTS_PER_SECOND allows (``self.period`` is what they are asked for)."""
        self.period = period_for(len(entries), interval)
        self.links = [link(entry, self.period) for entry in entries]

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        for link in self.links:
            link.start()

    def view(self) -> tuple[HostView, ...]:
        return tuple(link.view() for link in self.links)

    def wait_first(self, timeout: float) -> None:
        """Wait until every host has answered once (a snapshot or a failure), ``timeout`` at most."""
        deadline = time.monotonic() + timeout
        for link in self.links:
            link.answered.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        for link in self.links:  # end every child first: each close waits a little for its thread
            link.stop()
        for link in self.links:
            link.close()


def period_for(hosts: int, interval: float) -> float:
    """Seconds between one host's snapshots: ``interval``, or longer for many hosts."""
    return max(interval, hosts / DOCUMENTS_PER_SECOND)
