"""Where the training thread and the socket thread meet: plain data, published by reference swap.

The training thread writes here (in its hooks, after reading torch); the socket thread only reads what
is here, and leaves requests that the training thread takes up at its next hook. Nothing on the board
is a torch object: numbers, strings, tuples and frozen records (each step a StepEntry). This module
imports no torch, so the socket side (gputui.probe.desk), which is handed only a Board, cannot reach a tensor.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from gputui.model import FIRST_STEPS_KEPT, AllocationSite, LeakKeeper, OomRecord, ProbeDevice, StepRecord
from gputui.probe.steps import StepEntry


@dataclass(frozen=True)
class Reading:
    """Device figures read together on the training thread, and when."""

    devices: tuple[ProbeDevice, ...] = ()
    read_at: float | None = None  # wall clock; None: nothing read yet
    step: int = 0  # training steps counted when read
    monotonic: float = float("-inf")  # the same moment on the probe's clock, to judge staleness


@dataclass(frozen=True)
class SitesView:
    """Allocation-site recording as of the latest step end."""

    recording: bool = False
    recorded_steps: tuple[int, ...] = ()
    sites: tuple[AllocationSite, ...] = ()
    cost: float | None = None
    started_at: float = 0.0  # tells one recording window from the next
    keepers: tuple[LeakKeeper, ...] = ()  # names that held more at each step of the window


class Problems:
    """Exceptions the probe contained, counted by message (bounded, for the report)."""

    def __init__(self, limit: int = 20):
        self._counts: dict[str, int] = {}
        self._limit = limit

    def record(self, where: str, exc: BaseException) -> None:
        self._count(f"{where}: {type(exc).__name__}: {exc}")

    def unavailable(self, where: str, why: str) -> None:
        """Something of torch's the probe relies on is missing or changed in this version: what
        needs it is not available, and the report says why. A state, not an event: said once,
        however often it is found again."""
        key = f"{where}: not available: {why}"[:300]
        if key not in self._counts and len(self._counts) < self._limit:
            self._counts[key] = 1

    def _count(self, key: str) -> None:
        key = key[:300]
        if key in self._counts or len(self._counts) < self._limit:
            self._counts[key] = self._counts.get(key, 0) + 1

    def lines(self) -> tuple[str, ...]:
        return tuple(k if n == 1 else f"{k} (x{n})" for k, n in list(self._counts.items()))


class Board:
    """The probe's published state. Each attribute is replaced whole, never changed in place, except
    the step logs, which only ever get StepEntries appended, and their latest entry replaced once, a
    step later (see revise_latest). A deque copies in one C call.
    """

    def __init__(self, *, max_steps: int = 600, measured_kept: int = 128):
        # Every step, measured or not.
        self.steps: deque[StepEntry] = deque(maxlen=max_steps)
        # Measured steps are kept longer: at a low sampling rate the last ``max_steps`` steps may hold
        # too few of them for a leak verdict.
        self.measured: deque[StepEntry] = deque(maxlen=measured_kept)
        self.first: tuple[StepEntry, ...] = ()  # the first measured steps, kept for good
        self.problems = Problems()
        self.server_problems: tuple[str, ...] | deque = ()
        # Written by the training thread (and the OOM hooks, on the thread that ran out).
        self.reading = Reading()
        self.sites = SitesView()
        self.last_oom: OomRecord | None = None
        # The probe's time on the training thread by its own account (Tracker.cost), as of the latest reading.
        self.hook_seconds = 0.0
        self.limits: tuple[str, ...] = ()  # what the probe cannot see in this job (Tracker.limits)
        # Constant once the probe has started.
        self.pid = 0
        self.started_at = time.time()
        self.torch_version: str | None = None
        self.command: tuple[str, ...] = ()
        self.via = "api"
        # Requests from the socket thread. Never cleared by the reader: each carries a serial number
        # and the training thread remembers the last one it took, so no request is lost in a race.
        self.reading_wanted = float("-inf")  # when (the probe's clock) a fresher reading was last asked for
        self.sites_wanted: tuple[int, int, bool] = (0, 0, False)  # (serial, steps, on)
        self.sites_taken = 0  # serial of the last sites request the training thread acted on
        # Whether the probe's step end has anything to do beyond counting the step: set after each request
        # (and by the training thread while sites are recorded), so that a step end looks at one flag.
        self.wanted = False

    def want_reading(self, now: float) -> None:
        """A monitor asks for figures fresher than the board's (``now``: monotonic time)."""
        self.reading_wanted = now
        self.wanted = True  # (after the request: a step end that clears it then reads the request)

    def want_sites(self, steps: int, on: bool) -> None:
        """A monitor asks to start (``on``, for ``steps`` steps) or stop recording allocation sites."""
        self.sites_wanted = (self.sites_wanted[0] + 1, steps, on)
        self.wanted = True

    @property
    def step_count(self) -> int:
        """Training steps counted so far (the newest record's number)."""
        try:
            last = self.steps[-1]
        except IndexError:
            return 0
        return last.step

    def add_measured(self, entry: StepEntry) -> None:
        """A measured step's entry, after it was appended to ``steps``."""
        self.measured.append(entry)
        if len(self.first) < FIRST_STEPS_KEPT:
            self.first = self.first + (entry,)

    def entries(self) -> list[StepEntry]:
        """The recent steps, oldest first, with measured steps from before the kept window in front
        of it, and the first measured steps in front of all."""
        recent = list(self.steps)
        if not recent:
            return recent
        start = recent[0].step
        older = [r for r in list(self.measured) if r.step < start]
        start = older[0].step if older else start
        return [r for r in self.first if r.step < start] + older + recent

    def recent_durations(self, count: int) -> list[float | None]:
        """The durations of the latest ``count`` steps, oldest first (a list: None where unknown)."""
        return [entry.duration for entry in list(self.steps)[-count:]]

    def records(self) -> tuple[StepRecord, ...]:
        """entries() as the report's StepRecords."""
        return tuple(entry.to_record() for entry in self.entries())

    def revise_latest(self, old: StepEntry, new: StepEntry) -> None:
        """Put ``new`` in the place of ``old`` where it is still the latest entry of a log."""
        for log in (self.steps, self.measured):
            if log and log[-1] is old:
                log[-1] = new
        if self.first and self.first[-1] is old:
            self.first = self.first[:-1] + (new,)

    def clear_steps(self) -> None:
        self.steps.clear()
        self.measured.clear()
        self.first = ()

    @property
    def sites_pending(self) -> bool:
        """A request to start recording sites that the training thread has not taken up yet."""
        serial, _, on = self.sites_wanted
        return on and serial > self.sites_taken
