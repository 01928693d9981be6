"""What the simulated machine reads at one instant: per-GPU sensors and NVML's process lists.

``state_at(scenario, seed, t)`` is a pure function. Device figures follow from the processes on the
device (memory is their sum plus a base; power, heat, clocks and throttle reasons follow the load) so
every view of the machine tells the same story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pynvml

from gputui.collect.sim.jobs import Job, Memory, Run, round_up
from gputui.collect.sim.scenarios import BOTH, COMPUTE, GRAPHICS, VANISHED, Gpu, Program, Scenario, Use
from gputui.collect.sim.signals import clamp, noise, ramp, stream


@dataclass(frozen=True, slots=True)
class UseNow:
    """One process on one GPU as NVML lists it now."""

    pid: int
    device: int
    kind: str
    memory: int
    sm: int
    mem: int
    encoder: int
    decoder: int
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass(frozen=True, slots=True)
class JobNow:
    """A job's live run and allocator, for the processes table and the probe."""

    program: Program
    run: Run
    memory: Memory | None
    job: Job  # the program's job


@dataclass(frozen=True)
class GpuNow:
    """Sensors of one physical GPU now."""

    memory_used: int  # bytes in use, the firmware reservation excluded (memory info v2 "used")
    slot_used: tuple[int, ...]  # per MIG device
    gpu_util: int
    mem_util: int
    encoder: int
    decoder: int
    temperature: int
    fan: int
    power_mw: int
    sm_clock: int
    mem_clock: int
    pstate: int
    pcie_gen: int
    pcie_rx_kb: int
    pcie_tx_kb: int
    reasons: int  # nvmlClocksEventReason* bits
    compute: tuple[UseNow, ...]
    graphics: tuple[UseNow, ...]


@dataclass(frozen=True)
class MachineState:
    t: float
    gpus: tuple[GpuNow, ...]
    jobs: dict[int, JobNow]  # by pid
    gone: frozenset[int]  # pids NVML lists but the host no longer has


def _job_use(program: Program, use: Use, now: JobNow, seed: int, t: float) -> tuple[int, int]:
    """(memory, sm%) of a job's rank now."""
    mem = now.memory
    if mem is None:
        return 0, 0
    memory = now.job.layout.context + (mem.reserved if use.share == 1.0 else round_up(mem.reserved * use.share))
    if not mem.busy:
        return memory, 0
    lay = now.job.layout
    u = t - now.run.start
    level = use.sm * ramp(u, lay.first_step, lay.first_step + 15.0)
    sm = level + use.jitter * noise(seed, stream("sm", now.run.pid, use.device), t)
    return memory, int(round(clamp(sm, 0.0, 100.0)))


def _fixed_sm(use: Use, pid: int, seed: int, t: float) -> int:
    if use.jitter == 0:
        return int(round(clamp(use.sm, 0.0, 100.0)))
    sm = use.sm + use.jitter * noise(seed, stream("sm", pid, use.device), t)
    return int(round(clamp(sm, 0.0, 100.0)))


def _uses(scenario: Scenario, seed: int, t: float) -> tuple[list[list[UseNow]], dict[int, JobNow]]:
    by_gpu: list[list[UseNow]] = [[] for _ in scenario.gpus]
    jobs: dict[int, JobNow] = {}
    for p in scenario.programs:
        if not p.uses or p.started > t:
            continue
        pid = p.pid
        now = None
        if p.job is not None:
            run = p.job.run_at(t)
            if run is None:
                continue
            now = JobNow(p, run, p.job.memory(run, t), p.job)
            pid = run.pid
            jobs[pid] = now
            if now.memory is None:
                continue
        for use in p.uses:
            if now is not None:
                memory, sm = _job_use(p, use, now, seed, t)
            else:
                memory, sm = use.memory, _fixed_sm(use, pid, seed, t)
            enc_noise = 3 * noise(seed, stream("enc", pid), t) if use.encoder else 0
            dec_noise = 3 * noise(seed, stream("dec", pid), t) if use.decoder else 0
            enc = int(round(clamp(use.encoder + enc_noise, 0, 100)))
            dec = int(round(clamp(use.decoder + dec_noise, 0, 100)))
            by_gpu[use.device].append(UseNow(pid, use.device, use.kind, memory, sm, int(sm * use.mem_ratio), enc, dec,
                                             use.gpu_instance_id, use.compute_instance_id))
    return by_gpu, jobs


def _sensors(gpu: Gpu, uses: list[UseNow], seed: int, t: float) -> GpuNow:
    m = gpu.model
    memory = gpu.base_memory + sum(u.memory for u in uses)
    slot_used = tuple(sum(u.memory for u in uses if u.gpu_instance_id == s.gpu_instance_id) for s in gpu.mig)
    if gpu.mig:  # each instance owns a share of the SMs
        share: dict[int | None, float] = {s.gpu_instance_id: s.profile.slices / 7 for s in gpu.mig}
        util = min(100, int(round(sum(u.sm * share.get(u.gpu_instance_id, 0) for u in uses))))
    else:
        util = min(100, sum(u.sm for u in uses))
    mem_util = min(100, sum(u.mem for u in uses))
    encoder = min(100, sum(u.encoder for u in uses))
    decoder = min(100, sum(u.decoder for u in uses))
    key = stream("gpu", gpu.index)

    load = util / 100.0
    wobble = 0.92 + 0.08 * noise(seed, key + 1, t, 2.0)
    raw = m.power_idle + (m.power_limit * 1.02 - m.power_idle) * load**1.3 * wobble
    reasons = 0
    sm_clock = m.sm_max if util else m.sm_idle
    if util == 0:
        reasons |= pynvml.nvmlClocksEventReasonGpuIdle
    elif util < 30:
        sm_clock = int(m.sm_idle + (m.sm_max - m.sm_idle) * (0.55 + 1.5 * load))
        sm_clock = min(sm_clock, m.sm_max)
    power = raw
    if raw >= 0.97 * m.power_limit:  # the power controller pulls the clocks back to hold the limit
        reasons |= pynvml.nvmlClocksEventReasonSwPowerCap
        sm_clock = int(sm_clock * (1.0 - 2.0 * (raw / m.power_limit - 0.97)))
        power = min(raw, 0.995 * m.power_limit)
    temperature = int(round(m.temp_idle + m.temp_rise * (power / m.power_limit) ** 0.9
                            + 1.2 * noise(seed, key + 2, t, 6.0)))
    if temperature >= m.temp_slowdown:
        # the slowdown holds the board just above its threshold, at lower clocks and power
        reasons |= pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonHwSlowdown
        temperature = min(temperature, m.temp_slowdown + 1)
        sm_clock = int(sm_clock * 0.82)
        power *= 0.85
    elif temperature >= m.temp_slowdown - 3:
        reasons |= pynvml.nvmlClocksEventReasonSwThermalSlowdown
        sm_clock = int(sm_clock * 0.93)
    sm_clock = sm_clock // 15 * 15  # boost bins are 15 MHz apart
    fan = int(clamp(30 + (temperature - 40) * 1.8, 30, 100)) if m.has_fan else 0
    busy = util > 0 or memory > gpu.base_memory + 600 * (1 << 20)
    rx = int((1_800_000 * load + 250 + 120 * noise(seed, key + 3, t)) if busy
             else 40 + 20 * (noise(seed, key + 3, t) + 1))
    tx = int(rx * 0.31)
    compute = tuple(u for u in uses if u.kind in (COMPUTE, BOTH))
    graphics = tuple(u for u in uses if u.kind in (GRAPHICS, BOTH))
    return GpuNow(
        memory_used=memory, slot_used=slot_used, gpu_util=util, mem_util=mem_util, encoder=encoder,
        decoder=decoder, temperature=temperature, fan=fan, power_mw=int(power * 1000), sm_clock=sm_clock,
        mem_clock=m.mem_max if busy else m.mem_idle, pstate=m.busy_pstate if busy else m.idle_pstate,
        pcie_gen=m.pcie_gen if busy or m.pcie_gen_idle is None else m.pcie_gen_idle,
        pcie_rx_kb=max(0, rx), pcie_tx_kb=max(0, tx), reasons=reasons, compute=compute, graphics=graphics,
    )


def state_at(scenario: Scenario, seed: int, t: float) -> MachineState:
    """Everything NVML can report at scenario second ``t``."""
    by_gpu, jobs = _uses(scenario, seed, t)
    gpus = tuple(_sensors(g, by_gpu[g.index], seed, t) for g in scenario.gpus)
    gone = frozenset(p.pid for p in scenario.programs if p.access == VANISHED)
    return MachineState(t, gpus, jobs, gone)


class MachineView(Protocol):
    """What the machine's views (its psutil, its files, its probes) read of the running scenario: the
    machine (machine.py) makes them and hands itself in, so they depend on this, not on it."""

    plan: Scenario
    seed: int

    def elapsed(self) -> float: ...
    def now(self) -> float: ...
    def wallclock(self) -> float: ...
    def state(self) -> MachineState: ...
    def program(self, pid: int) -> Program | None: ...
    def started(self, pid: int, program: Program) -> float: ...
    def pids(self) -> list[int]: ...
