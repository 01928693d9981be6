"""What a gputui probe inside a simulated training job would report.

The figures come from the same allocator model as NVML's per-process memory (NVML = reserved +
CUDA context), so the monitor can join the two views exactly as it would on a real machine.
"""

from __future__ import annotations

from gputui.collect.sim.devices import MiB
from gputui.collect.sim.jobs import Job, Layout, Memory, Run, round_up
from gputui.collect.sim.state import JobNow, MachineView
from gputui.model import (
    FIRST_STEPS_KEPT,
    AllocationSite,
    AllocatorStats,
    LeakKeeper,
    MemoryCategories,
    OomRecord,
    Placement,
    ProbeDevice,
    ProbeReport,
    StepRecord,
)
from gputui.model.probe import LIMIT_LOSS_OUTSIDE

HISTORY = 200  # steps a probe keeps
RECORDED = 16  # steps of allocation-site recording in the leaky job's report
TORCH_VERSION = "2.5.1+cu124"
LEAK_SITE = "train.py:97 in train_step"
KEEPING_LINE = "train.py:131 in main"  # losses.append(loss): the loss history that keeps each graph


def _buffers(lay: Layout) -> int:
    """The model's buffers (attention masks, normalisation statistics): a part of the layout's other
    bytes, as a probe that sees the model's modules counts them."""
    return round_up(lay.other // 12)


def _categories(lay: Layout, mem: Memory) -> MemoryCategories:
    if mem.step == 0 and not mem.busy:  # still moving the model to the GPU
        parameters = mem.allocated * lay.parameters // max(1, lay.parameters + lay.other)
        return MemoryCategories(parameters, 0, 0, 0, mem.allocated - parameters)
    buffers = _buffers(lay)
    # Read inside a step's forward or backward (as the allocator's figures are): what is saved now.
    return MemoryCategories(lay.parameters, lay.gradients, lay.optimizer_state, mem.activations,
                            lay.other - buffers, buffers=buffers)


def _activations_peak(lay: Layout, step: int) -> int:
    """What step ``step`` held for backward at its peak: its own graph and the ones the leak kept."""
    return lay.activations + lay.leak_per_step * (step - 1)


def _allocator(lay: Layout, mem: Memory, peak_step: int, ooms: int) -> AllocatorStats:
    cached = mem.reserved - mem.allocated
    peak = lay.steady + lay.activations + lay.leak_per_step * max(0, peak_step - 1)
    return AllocatorStats(
        allocated=mem.allocated,
        reserved=mem.reserved,
        active=mem.allocated,
        inactive_split=cached // 5,  # part of the cache is stranded inside split blocks
        requested=mem.allocated - mem.allocated // 400,  # rounding to 512-byte blocks
        allocated_peak=max(mem.allocated, peak if peak_step else mem.allocated),
        reserved_peak=mem.reserved,
        active_peak=max(mem.allocated, peak if peak_step else mem.allocated),
        inactive_split_peak=cached // 4,
        requested_peak=max(mem.allocated, peak if peak_step else mem.allocated) * 399 // 400,
        alloc_retries=0,
        ooms=ooms,
        segments=max(1, mem.reserved // (20 * MiB)),
        largest_free_block=cached * 3 // 5,
        settings="",
        expandable_segments=False,
    )


def _steps(job: Job, run: Run, upto: int, device: str, epoch: float) -> tuple[StepRecord, ...]:
    lay = job.layout
    records = []
    window = range(max(1, upto - HISTORY + 1), upto + 1)
    # As the real probe, the first two steps stay in front of the window (FIRST_STEPS_KEPT).
    for k in [k for k in range(1, FIRST_STEPS_KEPT + 1) if k < window.start] + list(window):
        end = lay.step_end(k)
        before = lay.resting(k - 1)
        forward = before + lay.activations
        # Gradients are kept between steps (zero_grad(set_to_none=False)): the first step makes them
        # in its backward pass, and its optimizer.step() makes the optimizer state.
        backward = forward + (lay.gradients if k == 1 else round_up(lay.parameters * 0.05))
        records.append(StepRecord(
            step=k,
            ended_at=epoch + run.start + end,
            duration=lay.step_time,
            device=device,
            allocated=lay.resting(k),
            reserved=lay.reserved(k - 1, end),
            inactive_split=(lay.reserved(k - 1, end) - lay.resting(k)) // 5,
            alloc_retries=0,
            peak_forward=forward,
            peak_backward=backward,
            peak_optimizer=lay.resting(k) + round_up(lay.parameters),  # foreach Adam's temporaries
            categories=MemoryCategories(lay.parameters, lay.gradients, lay.optimizer_state,
                                        lay.leak_per_step * k, lay.other - _buffers(lay), buffers=_buffers(lay)),
            activations_kept=lay.leak_per_step,
            activations_peak=_activations_peak(lay, k),
            allocated_at_start=before,
        ))
    return tuple(records)


def _sites(lay: Layout, upto: int) -> tuple[tuple[int, ...], tuple[AllocationSite, ...]]:
    steps = tuple(range(max(1, upto - RECORDED + 1), upto + 1))
    sites = (
        AllocationSite("train.py:61 in main", tuple(lay.optimizer_state for _ in steps),
                       ("train.py:61 in main", "torch/optim/adam.py:98 in _init_group")),
        AllocationSite("train.py:44 in main", tuple(lay.parameters for _ in steps),
                       ("train.py:44 in main", "torch/nn/modules/module.py:1174 in to")),
        AllocationSite(LEAK_SITE, tuple(lay.leak_per_step * s for s in steps),
                       ("train.py:97 in train_step", "torch/_tensor.py:41 in wrapped")),
    )
    return steps, sites


def _keepers(lay: Layout, upto: int) -> tuple[LeakKeeper, ...]:
    """The loop's loss history, one graph-carrying loss more each step, as the probe would find it."""
    return (LeakKeeper(name="losses", scope="local", what="a list", size=upto, per_step=1.0,
                       where=(KEEPING_LINE,)),)


def report_for(now: JobNow, machine: MachineView) -> ProbeReport:
    """The report the probe inside ``now``'s process would send."""
    program, run, mem = now.program, now.run, now.memory
    job, lay = now.job, now.job.layout
    epoch = machine.wallclock() - machine.elapsed()
    gpu = machine.plan.gpus[program.uses[0].device]
    device = f"cuda:{gpu.index}"
    failed = run.oom_at is not None and machine.now() >= run.oom_at
    devices: tuple[ProbeDevice, ...] = ()
    steps: tuple[StepRecord, ...] = ()
    if mem is not None:
        allocator = _allocator(lay, mem, mem.step + 1 if mem.busy or failed else mem.step, int(failed))
        devices = (ProbeDevice(device, gpu.index, gpu.uuid, allocator, _categories(lay, mem)),)
        steps = _steps(job, run, mem.step, device, epoch)
    last_oom = None
    if failed and run.oom_at is not None and mem is not None:  # (a failed run has both)
        budget = job.budget or 0
        asked = round_up(lay.activations * 0.25)
        last_oom = OomRecord(
            at=epoch + run.oom_at,
            device=device,
            requested=asked,
            free=max(0, budget - mem.reserved),
            allocated=mem.allocated,
            reserved=mem.reserved,
            message=(f"CUDA out of memory. Tried to allocate {asked / MiB:.2f} MiB. GPU {gpu.index} has a total "
                     f"capacity of {gpu.model.memory_total / 2**30:.2f} GiB of which "
                     f"{max(0, budget - mem.reserved) / MiB:.2f} MiB is free."),
            where=("train.py:88 in train_step", "model.py:41 in forward",
                   "torch/nn/functional.py:2573 in layer_norm"),
            line="model.py:41 in forward",
            phase="forward",
            step=mem.step,
        )
    recorded: tuple[int, ...] = ()
    sites: tuple[AllocationSite, ...] = ()
    keepers: tuple[LeakKeeper, ...] = ()
    recording = lay.leak_per_step > 0 and mem is not None and mem.step > 0
    if recording and mem is not None:
        recorded, sites = _sites(lay, mem.step)
        keepers = _keepers(lay, mem.step)
    return ProbeReport(
        pid=run.pid,
        taken_at=machine.wallclock(),
        torch_version=TORCH_VERSION,
        started_at=epoch + run.start,
        command=program.cmdline,
        placement=Placement.from_environ(dict(program.environ)),
        devices=devices,
        # As the real probe: figures read at the end of the last step (or, before one, on request).
        read_at=(steps[-1].ended_at if steps else machine.wallclock()) if mem is not None else None,
        read_at_step=mem.step if mem is not None else None,
        steps=steps,
        last_oom=last_oom,
        recording=recording,
        recorded_steps=recorded,
        sites=sites,
        keepers=keepers,
        recording_cost=0.0031 if recording else None,
        probe_cpu_seconds=round(0.0004 * (mem.step if mem else 0) + 0.05, 4),
        # As a real probe that has seen the model (the simulated jobs' losses are computed in the loop).
        limits=(LIMIT_LOSS_OUTSIDE,) if mem is not None and (mem.step or mem.busy) else (),
    )


def probe_reports(machine: MachineView) -> tuple[ProbeReport, ...]:
    state = machine.state()
    return tuple(report_for(now, machine) for pid, now in sorted(state.jobs.items()) if now.program.probed)


