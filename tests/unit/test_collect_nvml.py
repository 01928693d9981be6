"""The device reader's guards: each field alone, unsupported calls asked once, GPUs lost mid-run.

The simulated driver answers; a thin proxy over pynvml injects the failures a scenario does not
script (a GPU lost after it was first read, a permission error, a GPU hidden from this container).
"""

import pynvml
import pytest

from gputui.collect import sim
from gputui.collect.nvml import DeviceReader


class Proxy:
    """pynvml with some functions replaced and every call counted."""

    def __init__(self, **overrides):
        self.overrides = overrides
        self.calls = {}

    def __getattr__(self, name):
        target = self.overrides.get(name, getattr(pynvml, name))
        if not (name.startswith("nvmlDevice") and callable(target)):
            return target

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return target(*args, **kwargs)
        return counted


def fail(code):
    def call(*args, **kwargs):
        raise pynvml.NVMLError(code)
    return call


@pytest.fixture
def driver():
    sim.install("workstation", clock=lambda: 0.0)
    pynvml.nvmlInit()
    yield
    sim.uninstall()


@pytest.mark.skipif(not hasattr(pynvml, "nvmlDeviceGetTemperatureV"),
                    reason="calls nvmlDeviceGetTemperatureV, which nvidia-ml-py has from 12.570")
def test_unsupported_field_is_none_and_not_asked_again(driver):
    nv = Proxy(nvmlDeviceGetFanSpeed=fail(pynvml.NVML_ERROR_NOT_SUPPORTED))
    reader = DeviceReader(nv, 0)
    first, second = reader.read(), reader.read()
    assert first.device.fan_speed is None and second.device.fan_speed is None
    assert nv.calls["nvmlDeviceGetFanSpeed"] == 1
    assert nv.calls["nvmlDeviceGetTemperatureV"] == 1  # missing on driver 535: tried once ...
    assert nv.calls["nvmlDeviceGetTemperature"] == 2  # ... then the old call serves every sample
    assert first.device.temperature is not None and first.problems == []


def test_other_errors_become_none_with_a_problem_each_sample(driver):
    nv = Proxy(nvmlDeviceGetPowerUsage=fail(pynvml.NVML_ERROR_NO_PERMISSION))
    reader = DeviceReader(nv, 0)
    for _ in range(2):
        reading = reader.read()
        assert reading.device.power_draw is None and reading.device.power_limit == 450.0
        assert reading.problems == ["GPU 0: power draw: Insufficient Permissions"]


def test_gpu_lost_after_its_first_reading_keeps_its_identity(driver):
    nv = Proxy()
    reader = DeviceReader(nv, 1)
    healthy = reader.read().device
    nv.overrides["nvmlDeviceGetMemoryInfo"] = fail(pynvml.NVML_ERROR_UNKNOWN)
    lost = reader.read()
    assert lost.device.lost == "Unknown Error"
    assert (lost.device.name, lost.device.uuid, lost.device.pci_bus_id) == (
        healthy.name, healthy.uuid, healthy.pci_bus_id)
    assert lost.device.memory_total is None and lost.processes == []
    assert lost.problems == ["GPU 1 is not answering: Unknown Error"]
    del nv.overrides["nvmlDeviceGetMemoryInfo"]
    assert reader.read().device == healthy  # back after a reset: nothing stuck


def test_gpu_hidden_from_this_container(driver):
    nv = Proxy(nvmlDeviceGetHandleByIndex=fail(pynvml.NVML_ERROR_NO_PERMISSION))
    reading = DeviceReader(nv, 0).read()
    assert reading.device.lost == "Insufficient Permissions"
    assert reading.device.index == 0 and reading.device.name is None


class OldBindings(Proxy):
    """pynvml as an older nvidia-ml-py ships it: some wrappers do not exist at all."""

    def __init__(self, *missing, **overrides):
        super().__init__(**overrides)
        self.missing = set(missing)

    def __getattr__(self, name):
        if name in self.missing:
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return super().__getattr__(name)


def test_wrappers_missing_from_an_old_nvidia_ml_py_are_not_supported(driver):
    # nvidia-ml-py 12.535 has no TemperatureV, no ProcessesUtilizationInfo, no process list v2.
    nv = OldBindings("nvmlDeviceGetTemperatureV", "nvmlDeviceGetProcessesUtilizationInfo",
                     "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetFanSpeed")
    new = DeviceReader(Proxy(), 0).read()
    reader = DeviceReader(nv, 0)
    first, second = reader.read(), reader.read()
    assert first.problems == [] and second.problems == []
    assert first.device.fan_speed is None  # a wrapper that is missing reads n/a ...
    assert nv.calls.get("nvmlDeviceGetFanSpeed") is None
    assert first.device.temperature == new.device.temperature  # ... or falls back to an older call
    assert nv.calls["nvmlDeviceGetTemperature"] == 2
    assert [p.pid for p in first.processes] == [p.pid for p in new.processes]
    assert first.processes[0].sm_util is not None  # nvmlDeviceGetProcessUtilization serves it


def test_old_nvidia_ml_py_driver_versions_fall_back(driver):
    from gputui.collect.nvml import read_driver

    nv = OldBindings("nvmlSystemGetCudaDriverVersion_v2")
    assert read_driver(nv) == read_driver(Proxy())
    assert read_driver(nv).cuda_driver_version is not None


def test_pcie_throughput_is_read_every_few_seconds_with_its_time(driver):
    # Each throughput call blocks ~20 ms in a real driver: asked once per PCIE_EVERY, not per sample.
    from gputui.collect.nvml import PCIE_EVERY

    nv = Proxy()
    reader = DeviceReader(nv, 0)
    first = reader.read(now=100.0, wall=5000.0).device
    assert nv.calls["nvmlDeviceGetPcieThroughput"] == 2  # rx and tx
    assert first.pcie_read_at == 5000.0 and first.pcie_rx is not None
    later = reader.read(now=100.0 + PCIE_EVERY - 1, wall=5000.0 + PCIE_EVERY - 1).device
    assert nv.calls["nvmlDeviceGetPcieThroughput"] == 2
    assert (later.pcie_rx, later.pcie_tx, later.pcie_read_at) == (first.pcie_rx, first.pcie_tx, 5000.0)
    again = reader.read(now=100.0 + PCIE_EVERY, wall=5000.0 + PCIE_EVERY).device
    assert nv.calls["nvmlDeviceGetPcieThroughput"] == 4
    assert again.pcie_read_at == 5000.0 + PCIE_EVERY
    # Fast fields are read at every sample all the same.
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 3


SETTINGS_CALLS = ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetComputeMode",  # (MIG mode: not on this GPU)
                  "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")


def test_a_gpus_settings_are_read_every_few_seconds_and_its_readings_every_sample(driver):
    """Each NVML call costs the monitor tens of microseconds through pynvml; the settings (power limit,
    compute mode, MIG mode, PCIe link, ECC counts) were a third of a sample's calls. Asked once per
    SETTINGS_EVERY, the readings at every sample."""
    from gputui.collect.nvml import SETTINGS_EVERY

    nv = Proxy()
    reader = DeviceReader(nv, 0)
    first = reader.read(now=100.0, wall=5000.0).device
    assert {name: nv.calls[name] for name in SETTINGS_CALLS} == dict.fromkeys(SETTINGS_CALLS, 1)
    for second in range(1, int(SETTINGS_EVERY)):
        later = reader.read(now=100.0 + second, wall=5000.0 + second).device
        assert (later.power_limit, later.compute_mode, later.pcie_width, later.ecc_uncorrected) == (
            first.power_limit, first.compute_mode, first.pcie_width, first.ecc_uncorrected)
    assert {name: nv.calls[name] for name in SETTINGS_CALLS} == dict.fromkeys(SETTINGS_CALLS, 1)
    reader.read(now=100.0 + SETTINGS_EVERY, wall=5000.0 + SETTINGS_EVERY)
    assert {name: nv.calls[name] for name in SETTINGS_CALLS} == dict.fromkeys(SETTINGS_CALLS, 2)
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == nv.calls["nvmlDeviceGetPowerUsage"] == int(SETTINGS_EVERY) + 1


def test_empty_graphics_list_is_asked_again_only_after_a_while(driver):
    from gputui.collect.nvml import GRAPHICS_EVERY

    nv = Proxy(nvmlDeviceGetGraphicsRunningProcesses_v3=lambda handle: [])  # a server: no desktop
    reader = DeviceReader(nv, 0)
    graphics = "nvmlDeviceGetGraphicsRunningProcesses_v3"
    for second in (0.0, 1.0, 2.0):
        reader.read(now=second, wall=second)
    asked = nv.calls[graphics]
    assert asked == 1 and nv.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 3
    reader.read(now=GRAPHICS_EVERY, wall=GRAPHICS_EVERY)
    assert nv.calls[graphics] == 2


def test_a_graphics_list_with_entries_is_read_every_sample(driver):
    listed = [pynvml.c_nvmlProcessInfo_v3_t(pid=4242, usedGpuMemory=1 << 20,
                                            gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)]
    nv = Proxy(nvmlDeviceGetGraphicsRunningProcesses_v3=lambda h: listed)
    reader = DeviceReader(nv, 0)
    reader.read(now=0.0, wall=0.0)
    listed.clear()  # the desktop closed: the next sample must not keep showing it
    second = reader.read(now=1.0, wall=1.0)
    assert 4242 not in {p.pid for p in second.processes}


def test_nvml_time_is_summed_from_the_calls_themselves(driver):
    ticks = iter(range(0, 10_000, 1))

    def timer():  # every NVML call takes exactly 1 "second" on this clock
        return float(next(ticks))

    reader = DeviceReader(pynvml, 0, timer=timer)
    reader.read(now=0.0, wall=0.0)
    calls = reader.nvml_seconds
    assert calls > 10  # handle, static fields, then each dynamic field: one tick each
    reader.read(now=1.0, wall=1.0)
    assert reader.nvml_seconds > calls
