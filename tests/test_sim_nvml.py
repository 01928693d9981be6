"""The simulated NVML library, exercised only through the real pynvml wrappers."""

import ctypes

import pynvml as N
import pytest

from gputui.collect import sim
from gputui.collect.sim.library import ProcessInfoV1

MiB = 1 << 20


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def machine_at(clock):
    """install(scenario) and move the fake clock to ``at`` scenario seconds; nvmlInit done."""

    def make(scenario: str, at: float, **kw):
        clock.now = 1000.0
        machine = sim.install(scenario, clock=clock, **kw)
        clock.now = 1000.0 + at
        N.nvmlInit()
        return machine

    yield make
    sim.uninstall()


def handle(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def test_install_and_uninstall_swap_the_library(machine_at):
    machine_at("workstation", 0.0)
    assert N.nvmlLib is not None
    N.nvmlShutdown()
    sim.uninstall()
    assert N.nvmlLib is None
    assert N._nvmlGetFunctionPointer_cache == {}
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlDeviceGetCount()


def test_calls_before_init_are_uninitialized(clock):
    sim.install("workstation", clock=clock)
    try:
        with pytest.raises(N.NVMLError_Uninitialized):
            N.nvmlDeviceGetCount()
    finally:
        sim.uninstall()


def test_scenarios_listed():
    assert sim.SCENARIOS == ("workstation", "training-node", "leaky", "mig", "faults")


def test_unknown_scenario_is_a_value_error(clock):
    with pytest.raises(ValueError, match="unknown scenario"):
        sim.install("nope", clock=clock)


def test_driver_versions(machine_at):
    machine_at("training-node", 0.0)
    assert N.nvmlSystemGetDriverVersion() == "560.35.03"
    assert N.nvmlSystemGetCudaDriverVersion() == 12060
    assert N.nvmlSystemGetCudaDriverVersion_v2() == 12060
    assert N.nvmlSystemGetNVMLVersion() == "12.560.35.03"


def test_training_node_identity(machine_at):
    machine_at("training-node", 0.0)
    assert N.nvmlDeviceGetCount() == 8
    h = handle(0)
    assert N.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert N.nvmlDeviceGetUUID(h).startswith("GPU-")
    assert len({N.nvmlDeviceGetUUID(handle(i)) for i in range(8)}) == 8
    pci = N.nvmlDeviceGetPciInfo(h)
    assert pci.busId == "00000000:18:00.0"
    assert pci.bus == 0x18
    assert pci.pciDeviceId == 0x233010DE
    assert N.nvmlDeviceGetPciInfo(handle(7)).busId == "00000000:DB:00.0"


def test_handles_are_distinct_opaque_pointers(machine_at):
    machine_at("mig", 0.0)
    values = {ctypes.cast(handle(i), ctypes.c_void_p).value for i in range(2)}
    values.add(ctypes.cast(N.nvmlDeviceGetMigDeviceHandleByIndex(handle(0), 0), ctypes.c_void_p).value)
    assert len(values) == 3 and 0 not in values


def test_h100_limits(machine_at):
    machine_at("training-node", 120.0)
    h = handle(0)
    assert N.nvmlDeviceGetEnforcedPowerLimit(h) == 700000
    assert N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM) == 1980
    assert N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM) == 2619
    assert N.nvmlDeviceGetMaxPcieLinkGeneration(h) == 5
    assert N.nvmlDeviceGetCurrPcieLinkGeneration(h) == 5
    assert N.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
    assert N.nvmlDeviceGetCurrPcieLinkWidth(h) == 16
    assert N.nvmlDeviceGetTemperatureThreshold(h, N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == 87
    assert N.nvmlDeviceGetTemperatureThreshold(h, N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == 92
    assert N.nvmlDeviceGetComputeMode(h) == N.NVML_COMPUTEMODE_DEFAULT
    assert N.nvmlDeviceGetPerformanceState(h) == 0
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetFanSpeed(h)  # passively cooled SXM board


def test_memory_v2_and_v1_agree(machine_at):
    machine_at("training-node", 120.0)
    h = handle(0)
    v2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    v1 = N.nvmlDeviceGetMemoryInfo(h)
    assert v2.total == v1.total == 81559 * MiB
    assert v2.reserved == 512 * MiB
    assert v2.used + v2.reserved == v1.used  # v1 counts the reservation as used
    assert v2.free == v1.free == v2.total - v2.reserved - v2.used
    procs = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert v2.used == 4 * MiB + sum(p.usedGpuMemory for p in procs)


def test_memory_v2_checks_the_struct_version(machine_at):
    machine_at("training-node", 0.0)
    with pytest.raises(N.NVMLError_ArgumentVersionMismatch):
        N.nvmlDeviceGetMemoryInfo(handle(0), version=0x01000028)


def test_training_rank_ramps_up_over_the_first_minute(machine_at, clock):
    machine_at("training-node", 0.0)
    h = handle(0)
    assert N.nvmlDeviceGetComputeRunningProcesses(h) == []  # no CUDA context yet
    assert N.nvmlDeviceGetUtilizationRates(h).gpu == 0
    assert N.nvmlDeviceGetCurrentClocksEventReasons(h) == N.nvmlClocksEventReasonGpuIdle
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) == 345
    seen = []
    for at in (5.0, 15.0, 25.0, 40.0, 60.0, 120.0):
        clock.now = 1000.0 + at
        (proc,) = N.nvmlDeviceGetComputeRunningProcesses(h)
        assert proc.pid == 48231
        seen.append((proc.usedGpuMemory, N.nvmlDeviceGetUtilizationRates(h).gpu))
    memory = [m for m, _ in seen]
    assert memory == sorted(memory)
    assert memory[0] == 500 * MiB  # the context only
    assert memory[-1] > 58 * 1024 * MiB
    assert seen[0][1] == 0 and seen[-1][1] >= 90
