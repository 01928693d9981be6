"""Scenario behaviour over time: the leaking job, probe reports, throttle reasons, freezing."""

import pynvml as N
import pytest

from gputui.collect import sim
from gputui.collect.sim import EPOCH
from gputui.collect.sim.scenarios import build
from gputui.collect.sim.state import state_at
from gputui.model import ProbeReport, from_jsonable, to_jsonable

MiB = 1 << 20


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def run():
    clock = Clock()

    def make(scenario: str, **kw):
        machine = sim.install(scenario, clock=clock, **kw)
        N.nvmlInit()
        return machine, clock

    yield make
    sim.uninstall()


def leaky_reading(clock, at):
    clock.now = at
    h = N.nvmlDeviceGetHandleByIndex(0)
    procs = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h)}
    return N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2), procs


def test_leaky_job_grows_every_step_until_the_gpu_is_full(run):
    machine, clock = run("leaky")
    seen = []
    for k in range(0, 470):  # 0.4 s a step: every reading is one step later
        mem, procs = leaky_reading(clock, 0.05 + k * 0.4)
        seen.append(procs[51200])
    growth = [b - a for a, b in zip(seen, seen[1:])]
    assert all(g >= 0 for g in growth)
    assert sum(1 for g in growth if g > 0) > 400  # it grows nearly every step
    assert seen[-1] - seen[0] > 20 * 1024 * MiB
    mem, procs = leaky_reading(clock, 189.0)  # just before the OOM
    assert mem.free < 2 * 1024 * MiB
    assert mem.used + mem.reserved + mem.free == mem.total


def test_leaky_job_ooms_and_restarts_with_a_new_pid(run):
    machine, clock = run("leaky")
    mem, procs = leaky_reading(clock, 190.0)  # the OOM came at 189.36 s; the process lingers 3 s
    assert 51200 in procs
    (report,) = machine.probe_reports()
    assert report.last_oom is not None
    assert report.last_oom.at == EPOCH + 189.36
    assert report.last_oom.message.startswith("CUDA out of memory. Tried to allocate")
    assert N.nvmlDeviceGetUtilizationRates(N.nvmlDeviceGetHandleByIndex(0)).gpu <= 10
    mem, procs = leaky_reading(clock, 194.0)  # gone, launcher not yet restarted it
    assert 51200 not in procs and 51217 not in procs
    assert machine.probe_reports() == ()
    mem, procs = leaky_reading(clock, 200.0)
    assert procs[51217] == 500 * MiB  # the new run has only its CUDA context so far
    assert mem.used == 4 * MiB + (3572 + 1536 + 500) * MiB
    mem, procs = leaky_reading(clock, 196.36 + 189.36 + 30.0 - 1.0)  # the second run near its own OOM
    assert procs[51217] > 30 * 1024 * MiB


def test_leaky_probe_matches_nvml_and_records_the_leak(run):
    machine, clock = run("leaky")
    clock.now = 100.0
    _, procs = leaky_reading(clock, 100.0)
    (report,) = machine.probe_reports()
    assert report.pid == 51200
    (device,) = report.devices
    assert device.device == "cuda:0"
    assert device.uuid == N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex(0))
    assert procs[51200] == device.allocator.reserved + 500 * MiB  # NVML = reserved + CUDA context
    cats = device.categories
    assert cats.tensor_bytes() == device.allocator.allocated
    first, steps = report.steps[:2], report.steps[2:]
    assert [s.step for s in first] == [1, 2]  # the job's start, kept in front of the window
    # Step 1 makes the gradients in its backward pass and the optimizer state in its step.
    assert first[0].allocated_at_start == first[0].categories.parameters + first[0].categories.other \
        + first[0].categories.buffers
    assert first[1].allocated_at_start == first[0].allocated
    assert len(steps) == 200
    assert [s.step for s in steps] == list(range(76, 276))  # (100 + 30 - 20) / 0.4 = 275 done
    assert steps[-1].ended_at == EPOCH - 30.0 + 20.0 + 275 * 0.4
    assert all(b.allocated - a.allocated == 48 * MiB for a, b in zip(steps, steps[1:]))
    assert all(b.categories.activations - a.categories.activations == 48 * MiB for a, b in zip(steps, steps[1:]))
    assert report.recording and len(report.recorded_steps) == 16
    leak = next(s for s in report.sites if s.where == "train.py:97 in train_step")
    assert leak.live_bytes[-1] - leak.live_bytes[0] == 15 * 48 * MiB
    assert from_jsonable(ProbeReport, to_jsonable(report)) == report


def test_training_node_probes_rank_zero(run):
    machine, clock = run("training-node")
    clock.now = 120.0
    (report,) = machine.probe_reports()
    assert report.pid == 48231
    assert report.command[2] == "train.py"
    (device,) = report.devices
    (proc,) = N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(0))
    assert proc.usedGpuMemory == device.allocator.reserved + 742 * MiB  # an H100's CUDA context
    assert device.allocator.allocated <= device.allocator.reserved
    assert report.steps[-1].step == 161  # (120 - 20) / 0.62 steps done
    assert report.last_oom is None and not report.recording


def test_no_probes_where_no_job_is_probed(run):
    machine, clock = run("workstation")
    clock.now = 50.0
    assert machine.probe_reports() == ()


def test_throttle_reasons_follow_the_state(run):
    machine, clock = run("training-node")
    capped = 0
    for k in range(300):
        clock.now = 60.0 + k * 1.3
        for i in range(8):
            h = N.nvmlDeviceGetHandleByIndex(i)
            reasons = N.nvmlDeviceGetCurrentClocksEventReasons(h)
            power = N.nvmlDeviceGetPowerUsage(h)
            util = N.nvmlDeviceGetUtilizationRates(h).gpu
            assert bool(reasons & N.nvmlClocksEventReasonGpuIdle) == (util == 0)
            if reasons & N.nvmlClocksEventReasonSwPowerCap:
                capped += 1
                assert power >= 0.97 * 700000
                assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) < 1980
            else:
                assert power < 0.97 * 700000
    assert capped > 0  # a busy H100 touches its power limit now and then


def test_state_is_a_pure_function():
    plan = build("training-node")
    assert state_at(plan, 5, 77.7) == state_at(plan, 5, 77.7)
    assert state_at(plan, 5, 77.7) != state_at(plan, 6, 77.7)


def test_freeze_pins_the_state(run):
    machine, clock = run("training-node", processes=1000)
    clock.now = 100.0
    frozen = machine.freeze()
    clock.now = 500.0
    assert machine.state() is frozen
    assert machine.wallclock() == EPOCH + 100.0
    machine.unfreeze()
    assert machine.state() is not frozen
    assert machine.state().t == 500.0


def test_each_scenario_answers_through_pynvml(run):
    for name in sim.SCENARIOS:
        machine, clock = run(name)
        clock.now = 75.0
        for i in range(N.nvmlDeviceGetCount()):
            h = N.nvmlDeviceGetHandleByIndex(i)
            try:
                name_ = N.nvmlDeviceGetName(h)
            except N.NVMLError_GpuIsLost:
                continue
            assert name_
            assert N.nvmlDeviceGetMemoryInfo(h).total > 0
        sim.uninstall()
