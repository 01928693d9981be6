"""The simulated machine: a scenario, a seed and a clock, and what they give at the current second.

State is a pure function of (scenario, seed, seconds since install) computed once per 0.1 s tick and
cached, so one collector sample sees one consistent machine. ``freeze()`` pins the time, which lets a
benchmark keep the simulator's own cost out of the collector's figures.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from gputui.collect.sim import scenarios
from gputui.collect.sim.files import SimFiles
from gputui.collect.sim.host import SimPsutil
from gputui.collect.sim.jobs import Job
from gputui.collect.sim.probes import probe_reports
from gputui.collect.sim.scenarios import Program
from gputui.collect.sim.state import MachineState, state_at

EPOCH = 1767603600.0  # 2026-01-05 09:00:00 UTC: scenario second 0 on the wall clock
TICK = 0.1  # seconds between state updates (NVML's counters move in steps too)


class SimulatedMachine:
    """A scenario running on a clock. ``.psutil`` and the installed NVML library read from it."""

    def __init__(self, scenario: str, *, seed: int = 0, clock: Callable[[], float] | None = None,
                 processes: int | None = None, start: float = 0.0):
        """``start``: the scenario second the clock begins at (a demo starts where things happen)."""
        self.plan = scenarios.build(scenario, processes)
        self.scenario = scenario
        self.seed = int(seed)
        self.processes = processes
        self.hostname = self.plan.hostname
        self._clock = clock or time.monotonic
        self._start = self._clock() - float(start)
        self._frozen: float | None = None
        self._cached: tuple[int, MachineState] | None = None
        self._programs = {p.pid: p for p in self.plan.programs if p.job is None}
        self._jobs: tuple[tuple[Program, Job], ...] = tuple(
            (p, p.job) for p in self.plan.programs if p.job is not None)
        self._probe_cache: tuple[int, tuple] | None = None
        self.psutil = SimPsutil(self)
        self.files = SimFiles(self)

    # ------------------------------------------------------------------ time

    def clock(self) -> float:
        """Monotonic seconds: the clock this machine was given."""
        return self._clock()

    def elapsed(self) -> float:
        """Scenario seconds since install (the frozen second while frozen)."""
        if self._frozen is not None:
            return self._frozen
        return self._clock() - self._start

    def tick(self) -> int:
        return math.floor(self.elapsed() / TICK + 1e-6)

    def now(self) -> float:
        """The scenario second the state is computed for (the elapsed time rounded down to a tick)."""
        return self.tick() * TICK if self._frozen is None else self._frozen

    def wallclock(self) -> float:
        """Seconds since the epoch on the simulated machine's wall clock."""
        return EPOCH + self.elapsed()

    def epoch_us(self, t: float) -> int:
        """Microseconds since the epoch at scenario second ``t`` (NVML's sample timestamps)."""
        return int(round((EPOCH + t) * 1e6))

    def freeze(self, at: float | None = None) -> MachineState:
        """Stop the clock at scenario second ``at`` (default: now) and compute that state once."""
        self._frozen = self.elapsed() if at is None else float(at)
        self._cached = None
        return self.state()

    def unfreeze(self) -> None:
        self._frozen = None
        self._cached = None

    # ------------------------------------------------------------------ state

    def state(self) -> MachineState:
        key = self.tick() if self._frozen is None else -1
        cached = self._cached
        if cached is None or cached[0] != key:
            cached = self._cached = (key, state_at(self.plan, self.seed, self.now()))
        return cached[1]

    def program(self, pid: int) -> Program | None:
        """The program whose process has ``pid`` now (None if no such process exists now)."""
        t = self.now()
        program = self._programs.get(pid)
        if program is not None:
            return program if program.started <= t else None
        for p, job in self._jobs:
            run = job.run_at(t)
            if run is not None and run.pid == pid:
                return p
        return None

    def started(self, pid: int, program: Program) -> float:
        """Scenario second at which process ``pid`` started (a job's current run)."""
        if program.job is not None:
            run = program.job.run_at(self.now())
            if run is not None and run.pid == pid:
                return run.start
        return program.started

    def pids(self) -> list[int]:
        """Every process alive now (NVML's vanished ones excluded)."""
        t = self.now()
        alive = [p.pid for p in self._programs.values() if p.started <= t and p.access != scenarios.VANISHED]
        for _, job in self._jobs:
            run = job.run_at(t)
            if run is not None:
                alive.append(run.pid)
        return sorted(alive)

    def probe_reports(self) -> tuple:
        """ProbeReports of the probed processes (a rank of the training job, the leaking job)."""
        key = self.tick() if self._frozen is None else -1
        if self._probe_cache is None or self._probe_cache[0] != key:
            self._probe_cache = (key, probe_reports(self))
        return self._probe_cache[1]
