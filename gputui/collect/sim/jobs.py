"""PyTorch training jobs on the simulated machine: where their bytes are at every moment.

One model serves both views: NVML's per-process figure is the caching allocator's reserved bytes plus
the CUDA context, and the probe reports the same allocator and tensor categories, so they always agree.
A leaking job keeps some bytes alive every step until its next step no longer fits; it then dies of
OOM and its launcher restarts it as a new process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gputui.collect.sim.devices import MiB

SEGMENT = 2 * MiB  # the caching allocator grows in whole segments
FORWARD = 0.4  # share of a step spent in the forward pass (activations build up)
BACKWARD = 0.5  # share spent in backward (activations drain); the rest is optimizer.step()


def round_up(value: float, unit: int = SEGMENT) -> int:
    return int(math.ceil(value / unit - 1e-12)) * unit


@dataclass(frozen=True)
class Layout:
    """Bytes a training job keeps alive (per rank) and how it moves through time (local seconds)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int  # peak saved-for-backward bytes inside one step
    other: int  # buffers, RNG state, staging
    step_time: float  # seconds per optimizer step
    context: int  # CUDA context bytes NVML adds on top of the allocator
    cuda_init: float = 2.0  # the context exists from here on
    load_start: float = 8.0  # the model moves to the GPU between load_start and load_end
    load_end: float = 18.0
    first_step: float = 20.0  # training begins
    warm_until: float = 60.0  # the allocator cache keeps growing until then
    warm_growth: float = 0.06  # extra cache held once warm, relative to the step peak
    leak_per_step: int = 0  # bytes every step keeps alive by mistake

    @property
    def steady(self) -> int:
        """Allocated bytes between steps once training runs (before any leak)."""
        return self.parameters + self.gradients + self.optimizer_state + self.other

    def steps_done(self, u: float) -> int:
        if u < self.first_step:
            return 0
        return int((u - self.first_step) / self.step_time + 1e-9)

    def step_end(self, step: int) -> float:
        """Local time at which ``step`` (1-based) ends."""
        return self.first_step + step * self.step_time

    def resting(self, step: int) -> int:
        """Allocated bytes between steps once ``step`` steps are done."""
        if step == 0:
            return self.parameters + self.other
        return self.steady + self.leak_per_step * step

    def warmth(self, u: float) -> float:
        f = (u - self.first_step) / (self.warm_until - self.first_step)
        return 1.0 + self.warm_growth * min(1.0, max(0.0, f))

    def reserved(self, step: int, u: float) -> int:
        """Reserved bytes while step ``step + 1`` runs: its peak, plus the cache warmed so far."""
        peak = self.steady + self.activations + self.leak_per_step * step
        return round_up(peak * self.warmth(u))


@dataclass(frozen=True)
class Memory:
    """The allocator of one job at one instant."""

    step: int  # optimizer steps completed
    allocated: int
    reserved: int
    activations: int  # saved tensors alive now, the leaked ones included
    leaked: int
    busy: bool  # running steps (False while loading or after an OOM)


def memory_at(layout: Layout, u: float) -> Memory | None:
    """The allocator at local time ``u``; None before the CUDA context exists."""
    if u < layout.cuda_init:
        return None
    if u < layout.load_start:
        return Memory(0, 0, 0, 0, 0, False)
    if u < layout.first_step:
        f = min(1.0, (u - layout.load_start) / (layout.load_end - layout.load_start))
        loaded = round_up((layout.parameters + layout.other) * f)
        return Memory(0, loaded, loaded, 0, 0, False)
    step = layout.steps_done(u)
    phase = (u - layout.step_end(step)) / layout.step_time  # 0..1 through the running step
    if phase < FORWARD:
        live = layout.activations * phase / FORWARD
    else:
        live = layout.activations * max(0.0, 1.0 - (phase - FORWARD) / BACKWARD)
    live = round_up(live)
    leaked = layout.leak_per_step * step
    allocated = layout.resting(step) + live
    if step == 0:  # gradients and optimizer state appear during the first step
        allocated = layout.steady + live
    return Memory(step, allocated, layout.reserved(step, u), live + leaked, leaked, True)


@dataclass(frozen=True)
class Run:
    """One incarnation of a job: its own process, started at ``start`` (scenario seconds)."""

    number: int
    pid: int
    start: float
    oom_step: int | None  # steps done when the next step no longer fits
    oom_at: float | None  # scenario seconds of the OOM error
    exit_at: float | None  # the process is gone from here on


@dataclass(frozen=True)
class Job:
    """A training job on one GPU (one rank), restarted by its launcher after an OOM."""

    layout: Layout
    start: float  # scenario seconds the first run starts
    pid: int
    budget: int | None = None  # bytes the allocator can get on its GPU; None: unlimited
    pid_stride: int = 17  # each restart gets a fresh pid
    linger: float = 3.0  # seconds from the OOM error until the process has exited
    restart_delay: float = 4.0  # seconds from exit until the launcher starts the next run

    def oom_step(self) -> int | None:
        """Steps done when the reserved bytes for the next step would exceed the budget."""
        lay = self.layout
        if self.budget is None or lay.leak_per_step <= 0:
            return None
        full = 1.0 + lay.warm_growth
        k = max(0, int((self.budget / full - lay.steady - lay.activations) / lay.leak_per_step) - 3)
        while lay.reserved(k, lay.warm_until) <= self.budget:
            k += 1
        return k

    def period(self) -> float | None:
        k = self.oom_step()
        return None if k is None else self._period(k)

    def _period(self, k: int) -> float:
        return self.layout.step_end(k) + FORWARD * self.layout.step_time + self.linger + self.restart_delay

    def run_at(self, t: float) -> Run | None:
        """The run alive at ``t`` (None before the first start and between runs)."""
        if t < self.start:
            return None
        k = self.oom_step()
        if k is None:
            return Run(0, self.pid, self.start, None, None, None)
        period = self._period(k)
        number = int((t - self.start) // period)
        start = self.start + number * period
        oom_at = start + self.layout.step_end(k) + FORWARD * self.layout.step_time
        run = Run(number, self.pid + number * self.pid_stride, start, k, oom_at, oom_at + self.linger)
        return run if t < oom_at + self.linger else None

    def memory(self, run: Run, t: float) -> Memory | None:
        """The allocator of ``run`` at scenario time ``t``."""
        u = t - run.start
        k = run.oom_step  # (known when oom_at is)
        if run.oom_at is not None and k is not None and t >= run.oom_at - self.layout.step_time * FORWARD:
            # The forward pass of the step after oom_step asked for more and failed: the cache stays
            # as it was, the step's activations are freed by the exception, the leak stays alive.
            lay = self.layout
            failed = t >= run.oom_at
            live = 0 if failed else round_up(
                lay.activations * (t - run.start - lay.step_end(k)) / (FORWARD * lay.step_time))
            return Memory(k, lay.resting(k) + live, lay.reserved(k - 1, u), live + lay.leak_per_step * k,
                          lay.leak_per_step * k, not failed)
        return memory_at(self.layout, u)
