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
    assert sim.SCENARIOS == ("workstation", "training-node", "leaky", "mig", "faults", "dataparallel", "torchrun",
                             "shared-k8s")


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
    assert v2.reserved == 480 * MiB  # as a real H100 reports it
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
    assert memory[0] == 742 * MiB  # the context only (torch 2.11, CUDA 13 on a real H100)
    assert memory[-1] > 58 * 1024 * MiB
    assert seen[0][1] == 0 and seen[-1][1] >= 90


def test_workstation_exact_values_at_100_seconds(machine_at):
    machine_at("workstation", 100.0)
    assert N.nvmlSystemGetDriverVersion() == "535.183.01"
    g0, g1 = handle(0), handle(1)
    assert N.nvmlDeviceGetName(g0) == "NVIDIA GeForce RTX 4090"
    assert N.nvmlDeviceGetName(g1) == "NVIDIA RTX A6000"
    assert N.nvmlDeviceGetUUID(g0) == "GPU-bec9046d-f254-1046-0b5d-69416be5108b"
    mem = N.nvmlDeviceGetMemoryInfo(g0, version=N.nvmlMemory_v2)
    assert (mem.total, mem.reserved, mem.used, mem.free) == (24564 * MiB, 380 * MiB, 18742247424, 6616514560)
    util = N.nvmlDeviceGetUtilizationRates(g0)
    assert (util.gpu, util.memory) == (100, 61)
    assert N.nvmlDeviceGetTemperature(g0, N.NVML_TEMPERATURE_GPU) == 73
    assert N.nvmlDeviceGetFanSpeed(g0) == 89
    assert N.nvmlDeviceGetPowerUsage(g0) == 396587
    assert N.nvmlDeviceGetEnforcedPowerLimit(g0) == 450000
    assert N.nvmlDeviceGetClockInfo(g0, N.NVML_CLOCK_SM) == 3120
    assert N.nvmlDeviceGetClockInfo(g0, N.NVML_CLOCK_MEM) == 10501
    assert N.nvmlDeviceGetPerformanceState(g0) == 2
    assert N.nvmlDeviceGetCurrentClocksEventReasons(g0) == 0
    assert N.nvmlDeviceGetPcieThroughput(g0, N.NVML_PCIE_UTIL_TX_BYTES) == 558071
    assert N.nvmlDeviceGetPcieThroughput(g0, N.NVML_PCIE_UTIL_RX_BYTES) == 1800231
    assert [(p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses(g0)] == [(3120, 18310234112)]
    assert [(p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetGraphicsRunningProcesses(g0)] == [
        (1455, 312 * MiB), (2210, 96 * MiB)]
    # GPU 1: a notebook, an NVENC transcode and a Blender render that is both compute and graphics
    assert [(p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses(g1)] == [
        (4502, 6348 * MiB), (5120, 310 * MiB), (5230, 3482 * MiB)]
    assert [p.pid for p in N.nvmlDeviceGetGraphicsRunningProcesses(g1)] == [5230]
    assert N.nvmlDeviceGetEncoderUtilization(g1) == [49, 167000]
    assert N.nvmlDeviceGetDecoderUtilization(g1) == [30, 167000]
    assert N.nvmlDeviceGetFanSpeed(g1) == 75
    assert N.nvmlDeviceGetTotalEccErrors(g1, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC) == 0
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetTotalEccErrors(g0, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetMigMode(g0)
    samples = N.nvmlDeviceGetProcessUtilization(g1, 0)
    assert [(s.pid, s.smUtil, s.memUtil, s.encUtil, s.decUtil) for s in samples] == [
        (5120, 10, 10, 49, 30), (5230, 67, 23, 0, 0)]
    assert {s.timeStamp for s in samples} == {1767603700000000}  # 2026-01-05 09:01:40 UTC


def test_same_seed_and_clock_give_identical_values(clock):
    def read(seed):
        clock.now = 50.0
        sim.install("training-node", seed=seed, clock=clock)
        clock.now = 50.0 + 87.3
        N.nvmlInit()
        try:
            out = []
            for i in range(8):
                h = handle(i)
                u = N.nvmlDeviceGetUtilizationRates(h)
                out.append((u.gpu, u.memory, N.nvmlDeviceGetTemperature(h, 0), N.nvmlDeviceGetPowerUsage(h),
                            N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM), N.nvmlDeviceGetMemoryInfo(h).used,
                            N.nvmlDeviceGetCurrentClocksEventReasons(h)))
            return out
        finally:
            sim.uninstall()

    assert read(0) == read(0)
    assert read(3) == read(3)
    assert read(0) != read(3)


def test_utilisation_moves_smoothly(machine_at, clock):
    machine_at("training-node", 100.0)
    h = handle(0)
    values = []
    for k in range(100):
        clock.now = 1100.0 + k * 0.1
        values.append(N.nvmlDeviceGetUtilizationRates(h).gpu)
    assert len(set(values)) > 3  # it moves
    assert max(abs(a - b) for a, b in zip(values, values[1:])) <= 2  # but no jumps between ticks
    assert all(85 <= v <= 100 for v in values)


def test_process_list_count_probing_at_the_c_layer(machine_at):
    machine_at("workstation", 100.0)
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
    count = ctypes.c_uint(0)
    assert fn(handle(1), ctypes.byref(count), None) == N.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3
    small = (N.c_nvmlProcessInfo_v3_t * 2)()
    count.value = 2
    assert fn(handle(1), ctypes.byref(count), small) == N.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3
    room = (N.c_nvmlProcessInfo_v3_t * 8)()
    count.value = 8
    assert fn(handle(1), ctypes.byref(count), room) == N.NVML_SUCCESS
    assert count.value == 3
    assert [room[i].pid for i in range(3)] == [4502, 5120, 5230]
    assert room[0].gpuInstanceId == 0xFFFFFFFF  # not in MIG mode
    assert room[3].pid == 0  # untouched past the count
    graphics = N._nvmlGetFunctionPointer("nvmlDeviceGetGraphicsRunningProcesses_v3")
    one = ctypes.c_uint(0)
    assert graphics(handle(1), ctypes.byref(one), None) == N.NVML_ERROR_INSUFFICIENT_SIZE
    assert one.value == 1


def test_empty_process_list_is_success_with_zero(machine_at):
    machine_at("training-node", 100.0)
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetGraphicsRunningProcesses_v3")
    count = ctypes.c_uint(5)
    assert fn(handle(0), ctypes.byref(count), None) == N.NVML_SUCCESS
    assert count.value == 0
    assert N.nvmlDeviceGetGraphicsRunningProcesses_v2(handle(0)) == []


def test_process_utilisation_only_returns_new_samples(machine_at, clock):
    machine_at("training-node", 100.0)
    h = handle(0)
    (sample,) = N.nvmlDeviceGetProcessUtilization(h, 0)
    assert sample.pid == 48231
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetProcessUtilization(h, sample.timeStamp)
    clock.now += 1.0
    (later,) = N.nvmlDeviceGetProcessUtilization(h, sample.timeStamp)
    assert later.timeStamp == sample.timeStamp + 1_000_000


def test_processes_utilization_info_on_a_new_driver(machine_at):
    machine_at("training-node", 100.0)
    h = handle(7)
    old = N.nvmlDeviceGetProcessUtilization(h, 0)
    new = N.nvmlDeviceGetProcessesUtilizationInfo(h, 0)
    assert [(s.pid, s.smUtil, s.memUtil, s.timeStamp) for s in new] == [
        (s.pid, s.smUtil, s.memUtil, s.timeStamp) for s in old]
    assert [s.pid for s in new] == [48238, 52044]


@pytest.mark.skipif(not hasattr(N, "nvmlDeviceGetTemperatureV"),
                    reason="calls nvmlDeviceGetTemperatureV, which nvidia-ml-py has from 12.570")
def test_driver_generations_offer_different_symbols(machine_at):
    machine_at("training-node", 100.0)
    assert N.nvmlDeviceGetTemperatureV(handle(0), N.NVML_TEMPERATURE_GPU) == N.nvmlDeviceGetTemperature(handle(0), 0)
    sim.uninstall()
    machine_at("workstation", 100.0)  # 535: no TemperatureV, no ProcessesUtilizationInfo yet
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetTemperatureV(handle(0), N.NVML_TEMPERATURE_GPU)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetProcessesUtilizationInfo(handle(0), 0)
    assert N.nvmlDeviceGetCurrentClocksEventReasons(handle(0)) == N.nvmlDeviceGetCurrentClocksThrottleReasons(handle(0))


def test_mig_devices(machine_at):
    machine_at("mig", 100.0)
    parent = handle(0)
    assert N.nvmlDeviceGetMigMode(parent) == [N.NVML_DEVICE_MIG_ENABLE, N.NVML_DEVICE_MIG_ENABLE]
    assert N.nvmlDeviceGetMigMode(handle(1)) == [N.NVML_DEVICE_MIG_DISABLE, N.NVML_DEVICE_MIG_DISABLE]
    assert N.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    migs = [N.nvmlDeviceGetMigDeviceHandleByIndex(parent, i) for i in range(4)]
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetMigDeviceHandleByIndex(parent, 4)
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetMigDeviceHandleByIndex(handle(1), 0)
    assert [N.nvmlDeviceGetName(h) for h in migs] == [
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "NVIDIA H100 80GB HBM3 MIG 2g.20gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
    assert all(N.nvmlDeviceGetUUID(h).startswith("MIG-") for h in migs)
    assert [N.nvmlDeviceGetGpuInstanceId(h) for h in migs] == [1, 5, 13, 14]
    assert [N.nvmlDeviceGetComputeInstanceId(h) for h in migs] == [0, 0, 0, 0]
    assert [N.nvmlDeviceIsMigDeviceHandle(h).value for h in migs] == [1, 1, 1, 1]
    assert N.nvmlDeviceIsMigDeviceHandle(parent).value == 0
    back = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migs[2])
    assert N.nvmlDeviceGetUUID(back) == N.nvmlDeviceGetUUID(parent)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetGpuInstanceId(parent)
    mem = N.nvmlDeviceGetMemoryInfo(migs[0], version=N.nvmlMemory_v2)
    assert (mem.total, mem.reserved, mem.used) == (40320 * MiB, 0, 31210 * MiB)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in N.nvmlDeviceGetComputeRunningProcesses(migs[1])] == [
        (61100, 5, 0)]
    everyone = N.nvmlDeviceGetComputeRunningProcesses(parent)
    assert [(p.pid, p.gpuInstanceId) for p in everyone] == [(61010, 1), (61100, 5), (61200, 13), (61300, 14)]
    parent_mem = N.nvmlDeviceGetMemoryInfo(parent, version=N.nvmlMemory_v2)
    assert parent_mem.used == 4 * MiB + sum(p.usedGpuMemory for p in everyone)
    # whole-GPU utilisation is not reported in MIG mode, nor most queries on a MIG device
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetUtilizationRates(parent)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetTemperature(migs[0], 0)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetProcessUtilization(parent, 0)
    assert N.nvmlDeviceGetComputeMode(handle(1)) == N.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert N.nvmlDeviceGetPowerUsage(parent) > 71000  # the instances' work still heats the board


def test_processes_override_for_benchmarks(machine_at):
    machine_at("training-node", 120.0, processes=1000)
    lists = [N.nvmlDeviceGetComputeRunningProcesses(handle(i)) for i in range(8)]
    assert sum(len(x) for x in lists) == 1000
    assert [len(x) for x in lists] == [125] * 8
    pids = [p.pid for x in lists for p in x]
    assert len(set(pids)) == 1000
    for i, procs in enumerate(lists):
        mem = N.nvmlDeviceGetMemoryInfo(handle(i), version=N.nvmlMemory_v2)
        assert mem.used == 4 * MiB + sum(p.usedGpuMemory for p in procs)
        assert mem.free > 0


def test_processes_override_trims(machine_at):
    machine_at("training-node", 120.0, processes=3)
    counts = [len(N.nvmlDeviceGetComputeRunningProcesses(handle(i))) for i in range(8)]
    assert counts == [1, 1, 1, 0, 0, 0, 0, 0]


def test_v1_symbol_writes_v1_structs(machine_at):
    machine_at("faults", 100.0)
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    count = ctypes.c_uint(0)
    assert fn(handle(0), ctypes.byref(count), None) == N.NVML_ERROR_INSUFFICIENT_SIZE
    infos = (ProcessInfoV1 * count.value)()
    assert fn(handle(0), ctypes.byref(count), infos) == N.NVML_SUCCESS
    assert [(p.pid, p.usedGpuMemory) for p in infos] == [(3141, 24870 * MiB), (2718, 2148 * MiB), (1618, 1126 * MiB)]


def test_error_string_symbol(machine_at):
    machine_at("workstation", 0.0)
    fn = N._nvmlGetFunctionPointer("nvmlErrorString")
    assert fn(N.NVML_ERROR_GPU_IS_LOST) == b"GPU is lost"
