"""The faults scenario: an old driver, unsupported fields, a lost GPU, troubled processes."""

import pynvml as N
import pytest

from gputui.collect import sim

MiB = 1 << 20


@pytest.fixture
def faults():
    now = [0.0]
    machine = sim.install("faults", clock=lambda: now[0])
    now[0] = 100.0
    N.nvmlInit()
    yield machine
    sim.uninstall()


def handle(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def test_old_driver_versions(faults):
    assert N.nvmlSystemGetDriverVersion() == "450.248.02"
    assert N.nvmlSystemGetCudaDriverVersion() == 11000
    assert N.nvmlDeviceGetCount() == 3


def test_old_driver_lacks_versioned_process_calls(faults):
    h = handle(0)
    for call in (N.nvmlDeviceGetComputeRunningProcesses_v3, N.nvmlDeviceGetComputeRunningProcesses_v2,
                 N.nvmlDeviceGetGraphicsRunningProcesses_v3, N.nvmlDeviceGetGraphicsRunningProcesses_v2):
        with pytest.raises(N.NVMLError_FunctionNotFound):
            call(h)
    # pynvml's unversioned wrapper calls _v3 and turns the missing symbol into a library mismatch
    with pytest.raises(N.NVMLLibraryMismatchError):
        N.nvmlDeviceGetComputeRunningProcesses(h)


@pytest.mark.skipif(not hasattr(N, "nvmlDeviceGetTemperatureV"),
                    reason="calls nvmlDeviceGetTemperatureV, which nvidia-ml-py has from 12.570")
def test_old_driver_lacks_memory_v2_and_clock_event_reasons(faults):
    h = handle(0)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetCurrentClocksEventReasons(h)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetTemperatureV(h, 0)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetProcessesUtilizationInfo(h, 0)
    mem = N.nvmlDeviceGetMemoryInfo(h)  # v1 still answers, with the reservation inside "used"
    assert mem.total == 32768 * MiB
    assert mem.used == 258 * MiB + 4 * MiB + (24870 + 2148 + 1126) * MiB
    assert mem.free == mem.total - mem.used


def test_hot_v100_throttles_for_heat(faults):
    h = handle(0)
    assert N.nvmlDeviceGetTemperature(h, 0) == 88  # held just above its slowdown threshold (87)
    reasons = N.nvmlDeviceGetCurrentClocksThrottleReasons(h)
    assert reasons & N.nvmlClocksThrottleReasonHwThermalSlowdown
    assert not reasons & N.nvmlClocksThrottleReasonGpuIdle
    assert N.nvmlDeviceGetPowerUsage(h) == 228124
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) == 1245
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) < N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM)
    assert N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC) == 17
    assert N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda h: N.nvmlDeviceGetName(h),
        lambda h: N.nvmlDeviceGetUUID(h),
        lambda h: N.nvmlDeviceGetPciInfo(h),
        lambda h: N.nvmlDeviceGetMemoryInfo(h),
        lambda h: N.nvmlDeviceGetUtilizationRates(h),
        lambda h: N.nvmlDeviceGetTemperature(h, 0),
        lambda h: N.nvmlDeviceGetPowerUsage(h),
        lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
        lambda h: N.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        lambda h: N.nvmlDeviceGetMigMode(h),
        lambda h: N.nvmlDeviceIsMigDeviceHandle(h),
        lambda h: N.nvmlDeviceGetProcessUtilization(h, 0),
        lambda h: N.nvmlDeviceGetComputeMode(h),
    ],
)
def test_lost_gpu_answers_gpu_is_lost_to_every_call(faults, call):
    with pytest.raises(N.NVMLError_GpuIsLost):
        call(handle(1))


def test_lost_gpu_lists_no_processes_through_the_v1_symbol(faults):
    import ctypes

    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    count = ctypes.c_uint(0)
    assert fn(handle(1), ctypes.byref(count), None) == N.NVML_ERROR_GPU_IS_LOST


def test_other_gpus_still_answer(faults):
    assert N.nvmlDeviceGetName(handle(0)) == "Tesla V100-SXM2-32GB"
    assert N.nvmlDeviceGetName(handle(2)) == "NVIDIA GeForce GTX 1080 Ti"


def test_fields_a_board_does_not_support(faults):
    v100, gtx = handle(0), handle(2)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetFanSpeed(v100)
    assert N.nvmlDeviceGetFanSpeed(gtx) == 71
    for call in (lambda: N.nvmlDeviceGetEncoderUtilization(gtx),
                 lambda: N.nvmlDeviceGetDecoderUtilization(gtx),
                 lambda: N.nvmlDeviceGetPcieThroughput(gtx, N.NVML_PCIE_UTIL_RX_BYTES),
                 lambda: N.nvmlDeviceGetProcessUtilization(gtx, 0),
                 lambda: N.nvmlDeviceGetTotalEccErrors(gtx, 0, 0),
                 lambda: N.nvmlDeviceGetMigMode(gtx)):
        with pytest.raises(N.NVMLError_NotSupported):
            call()


def test_process_names_from_nvml(faults):
    assert N.nvmlSystemGetProcessName(3141) == "python"
    with pytest.raises(N.NVMLError_NoPermission):
        N.nvmlSystemGetProcessName(2718)
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlSystemGetProcessName(4040)
