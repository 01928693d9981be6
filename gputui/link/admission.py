"""Who may talk to the probe, how many at once, how fast and for how long: the probe server's admission
policy, decided on an injectable clock and nothing else (no sockets: link/server.py does the I/O and
asks here). Connections are known by a key the server picks (its sockets' descriptors).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from gputui.link import protocol
from gputui.link.peers import peer_allowed

# A bound on the file descriptors a probe may take from the training job: a monitor holds one
# connection per probe, and a few monitors at once (panes, hosts' root) is the most seen in use.
MAX_CLIENTS = 16
# A connection must send a whole request this soon after it opens, or it is dropped: a client that
# connects and says nothing holds a descriptor for nothing. (One that has asked is dropped after
# protocol.IDLE_TIMEOUT without asking again or taking its replies.)
SILENT_TIMEOUT = 5.0
# When the table is full, a newcomer takes the place of a connection that has never asked and is at
# least this old (the oldest first), else of one that has asked but not for a quarter of the idle
# timeout (the longest quiet first): a monitor asking at any usual refresh interval keeps its
# connection, and idle connections held open (by mistake or on purpose) never keep a monitor from
# its answer. The grace spares one that has just connected and is about to ask.
EVICT_GRACE = 0.5
# Accepts per second, sustained and in a burst: far above any monitor's need (one connection per
# probe per watcher), far below what lets a connect flood take a share of the job's CPU (an accept,
# with its peer check and hang-up, costs 100-250 us beside a training loop: 200 a second is 2-5 % of
# a core, and no measurable change in the job's step time; bench_flood.py).
# Beyond it the listener is not watched until the budget refills; the kernel's backlog holds or
# refuses the rest, and drains in a fraction of a second once the flood stops.
ACCEPT_RATE = 200.0
ACCEPT_BURST = 50.0
# Requests answered per second, all connections together, sustained and in a burst. A monitor asks
# each probe about once a second; a few monitors, an exporter and a many-host view at once ask ten or
# so. Each answer costs the job 0.3-1 ms of CPU under its GIL (a report is put together and encoded):
# three pollers asking flat out (~180 a second) cost a 3.7 ms/step CUDA job 10-19 % of its step time
# (docs/validation.md), 20 a second bounds that near 2 %. Beyond it a request waits in its
# connection, in order, until the budget refills; nothing more is read from that connection meanwhile.
REQUEST_RATE = 20.0
REQUEST_BURST = 20.0
# How the probe's report says, once each, that it is asked faster than it answers (a connect flood;
# pollers asking flat out).
FLOOD_NOTE = "asked faster than"
# (capped: select() refuses a timeout too large for the OS, as a lifted limit would give)
_LONGEST_WAIT = 3600.0


class Entry(NamedTuple):
    """What becomes of a newcomer: refused with a protocol code and message, or let in once the
    connection ``evict`` (where one is named) has made room."""

    refused: tuple[str, str] | None = None
    evict: int | None = None


@dataclass
class _Visit:
    """One connection: when it last showed life (connected, sent a whole request, took part of a
    reply), and whether it has asked anything yet."""

    last_seen: float
    spoke: bool = False


class Admission:
    """The probe server's admission policy; ``note`` keeps a problem worth telling (the probe's report
    lists them). Only the server's thread calls it."""

    def __init__(self, *, max_clients: int = MAX_CLIENTS, silent_timeout: float = SILENT_TIMEOUT,
                 idle_timeout: float = protocol.IDLE_TIMEOUT, accept_rate: float = ACCEPT_RATE,
                 accept_burst: float = ACCEPT_BURST, request_rate: float | None = None,
                 request_burst: float = REQUEST_BURST, clock: Callable[[], float] = time.monotonic,
                 note: Callable[[str], None] = lambda problem: None):
        """``request_rate`` None: REQUEST_RATE as it is now (the benchmark lifts it to measure what the
        bound saves)."""
        self.clock = clock
        self.max_clients = max_clients
        self._silent_timeout = silent_timeout
        self._idle_timeout = idle_timeout
        self._accepts = Budget(accept_rate, accept_burst, clock)
        self._requests = Budget(REQUEST_RATE if request_rate is None else request_rate, request_burst, clock)
        self._note = note
        self._visits: dict[int, _Visit] = {}
        self._waiting: dict[int, None] = {}  # connections whose next request waits for the budget, in order
        self._resting_until: float | None = None  # the listener, while the accept budget refills
        self._told: set[str] = set()  # the flood notes said
        self.dropped_idle = 0
        self.evicted = 0
        self.accepts_deferred = 0
        self.requests_deferred = 0

    # --- coming in ------------------------------------------------------------------------------

    def may_accept(self) -> bool:
        """One accept from the rate budget; when it is spent, False, and the listener rests until it
        refills (:meth:`listen_again`)."""
        if self._accepts.take():
            return True
        if self._resting_until is None:
            self._resting_until = self.clock() + self._accepts.refill_in()
            self.accepts_deferred += 1
            self._tell(f"{FLOOD_NOTE} {self._accepts.rate:g} connections/s: accepting at that rate "
                       "(something keeps connecting to the probe's socket)")
        return False

    def nobody_came(self) -> None:
        """The accept found nobody waiting: it is not spent."""
        self._accepts.give_back()

    def listen_again(self) -> bool:
        """Whether the resting listener may be watched again now (once: True ends the rest)."""
        if self._resting_until is None or self.clock() < self._resting_until:
            return False
        self._resting_until = None
        return True

    def entry(self, peer: tuple[int, int, int] | None) -> Entry:
        """Whether a newcomer, ``peer`` (pid, uid, gid; None where the system cannot tell: then the
        0700 directory alone keeps other users out), may come in."""
        if peer is not None and not peer_allowed(peer[1]):
            self._note(f"refused a connection from uid {peer[1]} (pid {peer[0]})")
            return Entry(refused=(protocol.REFUSED, "this probe only answers its own user (or root)"))
        if len(self._visits) < self.max_clients:
            return Entry()
        quietest = self._quietest()
        if quietest is None:
            return Entry(refused=(protocol.BUSY, f"too many clients (limit {self.max_clients})"))
        # (counted before the drop: whoever sees the connection close sees it counted)
        self.evicted += 1
        return Entry(evict=quietest)

    def _quietest(self) -> int | None:
        """The connection a newcomer may take the place of (see EVICT_GRACE); None when all are in use."""
        now = self.clock()
        quiet_enough = self._idle_timeout / 4
        idle = [key for key, visit in self._visits.items()
                if now - visit.last_seen >= (quiet_enough if visit.spoke else EVICT_GRACE)]
        # (the silent ones first, then the longest quiet; on a tie, the one that came first)
        return min(idle, key=lambda key: (self._visits[key].spoke, self._visits[key].last_seen), default=None)

    def admit(self, key: int) -> None:
        self._visits[key] = _Visit(self.clock())

    def leave(self, key: int) -> None:
        """Forget a connection that closed."""
        self._visits.pop(key, None)
        self._waiting.pop(key, None)

    # --- asking ---------------------------------------------------------------------------------

    def asked(self, key: int) -> None:
        """A whole request came: the connection speaks, and is not idle."""
        visit = self._visits[key]
        visit.spoke, visit.last_seen = True, self.clock()

    def took_reply(self, key: int, at: float) -> None:
        """The connection took part of its replies at ``at`` (a client taking a long reply is not idle)."""
        self._visits[key].last_seen = at

    def may_answer(self, key: int) -> bool:
        """One answer from the rate budget; when it is spent, the connection waits (False)."""
        if self._requests.take():
            return True
        self._waiting[key] = None
        self.requests_deferred += 1
        self._tell(f"{FLOOD_NOTE} {self._requests.rate:g} requests/s: answering at that rate "
                   "(monitors polling it very often, or many at once)")
        return False

    def waits(self, key: int) -> bool:
        """Whether the connection's next request waits for the budget."""
        return key in self._waiting

    # --- time -----------------------------------------------------------------------------------

    def answer_now(self) -> list[int]:
        """The waiting connections, in the order they came to wait, once the budget has refilled (they
        wait no more); none before."""
        if not self._waiting or self._requests.refill_in() > 0:
            return []
        waiting, self._waiting = list(self._waiting), {}
        return waiting

    def overdue(self) -> list[int]:
        """The connections past their time (silent too long since they connected, or idle too long
        since they last asked or took a reply), counted as dropped: the server drops them."""
        now = self.clock()
        late = [key for key, visit in self._visits.items() if now >= visit.last_seen + self._limit(visit)]
        self.dropped_idle += len(late)
        return late

    def timeout(self) -> float | None:
        """Seconds until the next deadline: the listener's rest, the request budget for a waiting
        connection, a connection's time; None when there is none."""
        now = self.clock()
        deadlines = [visit.last_seen + self._limit(visit) for visit in self._visits.values()]
        if self._resting_until is not None:
            deadlines.append(self._resting_until)
        if self._waiting:
            deadlines.append(now + self._requests.refill_in())
        return min(_LONGEST_WAIT, max(0.0, min(deadlines) - now)) if deadlines else None

    def _limit(self, visit: _Visit) -> float:
        return self._idle_timeout if visit.spoke else self._silent_timeout

    def _tell(self, note: str) -> None:
        if note not in self._told:  # once each: a flood is worth knowing of, not counting
            self._told.add(note)
            self._note(note)


class Budget:
    """A token bucket: ``rate`` a second, ``burst`` at once."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]):
        self.rate = rate
        self._burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self) -> bool:
        """One token, if there is one."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        self._tokens += 1.0

    def refill_in(self) -> float:
        """Seconds until the next token (0 when there is one)."""
        tokens = min(self._burst, self._tokens + (self._clock() - self._at) * self.rate)
        return max(0.0, (1.0 - tokens) / self.rate)
