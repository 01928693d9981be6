"""A fake libnvidia-ml: the NVML C functions, taking the same ctypes arguments pynvml passes.

pynvml looks every symbol up on its module-level ``nvmlLib`` and calls it with byref() out-parameters,
struct pointers and char buffers; these functions write their answers there and return NVML return
codes. A symbol the simulated driver lacks is simply not an attribute, as with an old real library.
"""

from __future__ import annotations

import ctypes
import functools
from ctypes import c_uint, c_ulonglong, c_void_p

import pynvml as N

from gputui.collect.sim.scenarios import DENIED, VANISHED, Gpu, MigSlot
from gputui.collect.sim.state import GpuNow, UseNow

NA_UINT = 0xFFFFFFFF  # "not applicable": instance ids of a process outside MIG
# nvmlTemperature_v1: sizeof(nvmlTemperature_v1_t) | 1 << 24. The driver's ABI; nvidia-ml-py before
# 12.570 has no name for it (nor a wrapper for nvmlDeviceGetTemperatureV).
TEMPERATURE_V1 = 12 | 1 << 24

# Calls a MIG device handle answers; anything else on it is NOT_SUPPORTED, as on real MIG devices.
MIG_CALLS = frozenset(
    {
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
    }
)


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t, which pynvml no longer defines: what the unversioned symbols write."""

    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


def _target(arg):
    """The ctypes object behind an out-parameter: byref(x), pointer(x) or x itself."""
    obj = getattr(arg, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(arg, ctypes._Pointer):
        return arg.contents
    return arg


def _value(arg):
    """A by-value argument: a ctypes scalar or a plain int."""
    return arg.value if hasattr(arg, "value") else arg


def _handle_value(handle) -> int | None:
    if handle is None:
        return None
    if isinstance(handle, int):
        return handle
    try:
        return c_void_p.from_buffer(handle).value
    except TypeError:
        return None


def _put_string(buf, length, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > _value(length):
        return N.NVML_ERROR_INSUFFICIENT_SIZE
    ctypes.memmove(buf, data + b"\0", len(data) + 1)
    return N.NVML_SUCCESS


def _set_handle(out, value: int) -> None:
    c_void_p.from_buffer(_target(out)).value = value


class Library:
    """The object pynvml.nvmlLib points to; its attributes are the symbols of one driver."""

    def __init__(self, driver: "Nvml"):
        missing = driver.machine.plan.driver.missing
        for name in dir(Nvml):
            if name.startswith("nvml") and name not in missing:
                # partial objects take attributes, so pynvml may set .restype as on a CDLL function
                setattr(self, name, functools.partial(getattr(Nvml, name), driver))


class Nvml:
    """The behaviour of the simulated driver, one method per NVML C symbol."""

    HANDLE_BASE = 0x5EED_0000_1000

    def __init__(self, machine):
        self.machine = machine
        self.scenario = machine.plan
        self.initialized = 0
        self.handles: dict[int, tuple[Gpu, MigSlot | None]] = {}
        for gpu in self.scenario.gpus:
            self.handles[self.handle_of(gpu)] = (gpu, None)
            for slot in gpu.mig:
                self.handles[self.handle_of(gpu, slot)] = (gpu, slot)
        self._cache_state = None
        self._cache: dict = {}

    # ------------------------------------------------------------------ plumbing

    def handle_of(self, gpu: Gpu, slot: MigSlot | None = None) -> int:
        """The handle value of a whole GPU or of one of its MIG devices."""
        return self.HANDLE_BASE + gpu.index * 0x100 + (0x10 + slot.index if slot else 0)

    def _device(self, handle, symbol: str):
        """(gpu, slot, now, code): the device behind ``handle`` or the code a real driver returns."""
        if not self.initialized:
            return None, None, None, N.NVML_ERROR_UNINITIALIZED
        value = _handle_value(handle)
        found = None if value is None else self.handles.get(value)
        if found is None:
            return None, None, None, N.NVML_ERROR_INVALID_ARGUMENT
        gpu, slot = found
        if gpu.lost:
            return gpu, slot, None, N.NVML_ERROR_GPU_IS_LOST
        if symbol in gpu.model.unsupported or (slot is not None and symbol not in MIG_CALLS):
            return gpu, slot, None, N.NVML_ERROR_NOT_SUPPORTED
        return gpu, slot, self.machine.state().gpus[gpu.index], N.NVML_SUCCESS

    def _cached(self, key, make):
        state = self.machine.state()
        if state is not self._cache_state:
            self._cache_state, self._cache = state, {}
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _simple(self, handle, out, symbol: str, read) -> int:
        gpu, slot, now, code = self._device(handle, symbol)
        if code:
            return code
        _target(out).value = read(gpu, now)
        return N.NVML_SUCCESS

    # ------------------------------------------------------------------ library and system

    def nvmlInitWithFlags(self, flags) -> int:
        self.initialized += 1
        return N.NVML_SUCCESS

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlInit(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        self.initialized -= 1
        return N.NVML_SUCCESS

    def nvmlErrorString(self, result) -> bytes:
        return N.NVMLError._errcode_to_string.get(_value(result), "Unknown Error").encode()

    def nvmlSystemGetDriverVersion(self, buf, length) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        return _put_string(buf, length, self.scenario.driver.version)

    def nvmlSystemGetNVMLVersion(self, buf, length) -> int:
        return _put_string(buf, length, self.scenario.driver.nvml_version)

    def nvmlSystemGetCudaDriverVersion(self, out) -> int:
        _target(out).value = self.scenario.driver.cuda
        return N.NVML_SUCCESS

    def nvmlSystemGetCudaDriverVersion_v2(self, out) -> int:
        return self.nvmlSystemGetCudaDriverVersion(out)

    def nvmlSystemGetProcessName(self, pid, buf, length) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        program = self.machine.program(_value(pid))
        if program is None or program.access == VANISHED:
            return N.NVML_ERROR_NOT_FOUND
        if program.access == DENIED:
            return N.NVML_ERROR_NO_PERMISSION
        return _put_string(buf, length, program.cmdline[0])

    # ------------------------------------------------------------------ finding devices

    def nvmlDeviceGetCount_v2(self, out) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        _target(out).value = len(self.scenario.gpus)
        return N.NVML_SUCCESS

    def nvmlDeviceGetCount(self, out) -> int:
        return self.nvmlDeviceGetCount_v2(out)

    def nvmlDeviceGetHandleByIndex_v2(self, index, out) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        index = _value(index)
        if not 0 <= index < len(self.scenario.gpus):
            return N.NVML_ERROR_INVALID_ARGUMENT
        _set_handle(out, self.handle_of(self.scenario.gpus[index]))
        return N.NVML_SUCCESS

    def nvmlDeviceGetHandleByIndex(self, index, out) -> int:
        return self.nvmlDeviceGetHandleByIndex_v2(index, out)

    def _handle_where(self, out, match) -> int:
        if not self.initialized:
            return N.NVML_ERROR_UNINITIALIZED
        for value, (gpu, slot) in self.handles.items():
            if match(gpu, slot):
                if gpu.lost:
                    return N.NVML_ERROR_GPU_IS_LOST
                _set_handle(out, value)
                return N.NVML_SUCCESS
        return N.NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetHandleByUUID(self, uuid, out) -> int:
        text = _value(uuid)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return self._handle_where(out, lambda g, s: (s.uuid if s else g.uuid) == text)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, out) -> int:
        text = _value(bus_id)
        text = (text.decode() if isinstance(text, bytes) else str(text)).upper()
        return self._handle_where(out, lambda g, s: s is None and g.pci_bus_id.endswith(text[-7:]))

    def nvmlDeviceGetIndex(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetIndex", lambda g, now: g.index)

    def nvmlDeviceGetMinorNumber(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetMinorNumber", lambda g, now: g.index)

    # ------------------------------------------------------------------ identity

    def nvmlDeviceGetName(self, handle, buf, length) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetName")
        if code:
            return code
        name = f"{gpu.model.name} MIG {slot.profile.name}" if slot else gpu.model.name
        return _put_string(buf, length, name)

    def nvmlDeviceGetUUID(self, handle, buf, length) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetUUID")
        if code:
            return code
        return _put_string(buf, length, slot.uuid if slot else gpu.uuid)

    def nvmlDeviceGetPciInfo_v3(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetPciInfo_v3")
        if code:
            return code
        info = _target(out)
        info.busIdLegacy = f"0000:{gpu.bus:02X}:00.0".encode()
        info.domain, info.bus, info.device = 0, gpu.bus, 0
        info.pciDeviceId = gpu.model.pci_device_id
        info.pciSubSystemId = (gpu.model.pci_device_id & 0xFFFF) | 0x16C10000
        info.busId = gpu.pci_bus_id.encode()
        return N.NVML_SUCCESS

    def nvmlDeviceGetPciInfo_v2(self, handle, out) -> int:
        return self.nvmlDeviceGetPciInfo_v3(handle, out)

    def nvmlDeviceGetPciInfo(self, handle, out) -> int:
        return self.nvmlDeviceGetPciInfo_v3(handle, out)

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetCudaComputeCapability")
        if code:
            return code
        _target(major).value, _target(minor).value = gpu.model.compute_capability
        return N.NVML_SUCCESS

    def nvmlDeviceGetPersistenceMode(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetPersistenceMode", lambda g, now: int(not g.model.has_fan))

    def nvmlDeviceGetComputeMode(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetComputeMode", lambda g, now: g.compute_mode)

    # datacenter boards drive no display (nvitop's Disp.A column asks)
    def nvmlDeviceGetDisplayMode(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetDisplayMode", lambda g, now: N.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetDisplayActive(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetDisplayActive", lambda g, now: N.NVML_FEATURE_DISABLED)

    # ------------------------------------------------------------------ memory

    def _memory(self, gpu: Gpu, slot: MigSlot | None, now: GpuNow) -> tuple[int, int, int]:
        """(total, reserved, used) in the v2 sense."""
        if slot is not None:
            return slot.profile.memory, 0, now.slot_used[slot.index]
        return gpu.model.memory_total, gpu.model.memory_reserved, now.memory_used

    def nvmlDeviceGetMemoryInfo(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetMemoryInfo")
        if code:
            return code
        total, reserved, used = self._memory(gpu, slot, now)
        mem = _target(out)
        mem.total, mem.used, mem.free = total, used + reserved, total - reserved - used
        return N.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo_v2(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetMemoryInfo_v2")
        if code:
            return code
        mem = _target(out)
        if mem.version != N.nvmlMemory_v2:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        total, reserved, used = self._memory(gpu, slot, now)
        mem.total, mem.reserved, mem.used, mem.free = total, reserved, used, total - reserved - used
        return N.NVML_SUCCESS

    # ------------------------------------------------------------------ utilisation

    def nvmlDeviceGetUtilizationRates(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetUtilizationRates")
        if code:
            return code
        if gpu.mig:  # a GPU in MIG mode reports no whole-GPU utilisation
            return N.NVML_ERROR_NOT_SUPPORTED
        util = _target(out)
        util.gpu, util.memory = now.gpu_util, now.mem_util
        return N.NVML_SUCCESS

    def _engine(self, handle, util, period, symbol: str, read) -> int:
        gpu, slot, now, code = self._device(handle, symbol)
        if code:
            return code
        if gpu.mig:
            return N.NVML_ERROR_NOT_SUPPORTED
        _target(util).value = read(now)
        _target(period).value = 167000  # microseconds the driver averages over
        return N.NVML_SUCCESS

    def nvmlDeviceGetEncoderUtilization(self, handle, util, period) -> int:
        return self._engine(handle, util, period, "nvmlDeviceGetEncoderUtilization", lambda now: now.encoder)

    def nvmlDeviceGetDecoderUtilization(self, handle, util, period) -> int:
        return self._engine(handle, util, period, "nvmlDeviceGetDecoderUtilization", lambda now: now.decoder)

    # ------------------------------------------------------------------ thermals and power

    def nvmlDeviceGetTemperature(self, handle, sensor, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetTemperature")
        if code:
            return code
        if _value(sensor) != N.NVML_TEMPERATURE_GPU:
            return N.NVML_ERROR_INVALID_ARGUMENT
        _target(out).value = now.temperature
        return N.NVML_SUCCESS

    def nvmlDeviceGetTemperatureV(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetTemperatureV")
        if code:
            return code
        temp = _target(out)
        if temp.version != TEMPERATURE_V1:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if temp.sensorType != N.NVML_TEMPERATURE_GPU:
            return N.NVML_ERROR_INVALID_ARGUMENT
        temp.temperature = now.temperature
        return N.NVML_SUCCESS

    def nvmlDeviceGetTemperatureThreshold(self, handle, kind, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetTemperatureThreshold")
        if code:
            return code
        m = gpu.model
        limits = {
            N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: m.temp_shutdown,
            N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: m.temp_slowdown,
            N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: m.temp_slowdown - 2,
        }
        value = limits.get(_value(kind))
        if value is None:
            return N.NVML_ERROR_NOT_SUPPORTED
        _target(out).value = value
        return N.NVML_SUCCESS

    def nvmlDeviceGetFanSpeed(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetFanSpeed", lambda g, now: now.fan)

    def nvmlDeviceGetPowerUsage(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetPowerUsage", lambda g, now: now.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetEnforcedPowerLimit",
                            lambda g, now: int(g.model.power_limit * 1000))

    def nvmlDeviceGetPowerManagementLimit(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetPowerManagementLimit",
                            lambda g, now: int(g.model.power_limit * 1000))

    def nvmlDeviceGetPerformanceState(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetPerformanceState", lambda g, now: now.pstate)

    # ------------------------------------------------------------------ clocks

    def _clock(self, handle, kind, out, symbol: str, current: bool) -> int:
        gpu, slot, now, code = self._device(handle, symbol)
        if code:
            return code
        m, kind = gpu.model, _value(kind)
        if kind in (N.NVML_CLOCK_GRAPHICS, N.NVML_CLOCK_SM):
            value = now.sm_clock if current else m.sm_max
        elif kind == N.NVML_CLOCK_MEM:
            value = now.mem_clock if current else m.mem_max
        elif kind == N.NVML_CLOCK_VIDEO:
            value = (now.sm_clock if current else m.sm_max) * 9 // 10
        else:
            return N.NVML_ERROR_INVALID_ARGUMENT
        _target(out).value = value
        return N.NVML_SUCCESS

    def nvmlDeviceGetClockInfo(self, handle, kind, out) -> int:
        return self._clock(handle, kind, out, "nvmlDeviceGetClockInfo", True)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind, out) -> int:
        return self._clock(handle, kind, out, "nvmlDeviceGetMaxClockInfo", False)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetCurrentClocksEventReasons", lambda g, now: now.reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda g, now: now.reasons)

    # ------------------------------------------------------------------ PCIe

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetCurrPcieLinkGeneration", lambda g, now: now.pcie_gen)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetMaxPcieLinkGeneration", lambda g, now: g.model.pcie_gen)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetCurrPcieLinkWidth", lambda g, now: g.model.pcie_width)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle, out) -> int:
        return self._simple(handle, out, "nvmlDeviceGetMaxPcieLinkWidth", lambda g, now: g.model.pcie_width)

    def nvmlDeviceGetPcieThroughput(self, handle, counter, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetPcieThroughput")
        if code:
            return code
        counter = _value(counter)
        if counter == N.NVML_PCIE_UTIL_TX_BYTES:
            _target(out).value = now.pcie_tx_kb
        elif counter == N.NVML_PCIE_UTIL_RX_BYTES:
            _target(out).value = now.pcie_rx_kb
        else:
            return N.NVML_ERROR_INVALID_ARGUMENT
        return N.NVML_SUCCESS

    # ------------------------------------------------------------------ ECC

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetTotalEccErrors")
        if code:
            return code
        kind = _value(error_type)
        if kind == N.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            _target(out).value = gpu.ecc_corrected
        elif kind == N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            _target(out).value = gpu.ecc_uncorrected
        else:
            return N.NVML_ERROR_INVALID_ARGUMENT
        return N.NVML_SUCCESS

    # ------------------------------------------------------------------ MIG

    def nvmlDeviceGetMigMode(self, handle, current, pending) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetMigMode")
        if code:
            return code
        if not gpu.model.mig_profiles:
            return N.NVML_ERROR_NOT_SUPPORTED
        mode = N.NVML_DEVICE_MIG_ENABLE if gpu.mig else N.NVML_DEVICE_MIG_DISABLE
        _target(current).value = _target(pending).value = mode
        return N.NVML_SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if code:
            return code
        if not gpu.model.mig_profiles:
            return N.NVML_ERROR_NOT_SUPPORTED
        _target(out).value = 7
        return N.NVML_SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if code:
            return code
        if not gpu.model.mig_profiles:
            return N.NVML_ERROR_NOT_SUPPORTED
        index = _value(index)
        if not 0 <= index < 7:
            return N.NVML_ERROR_INVALID_ARGUMENT
        if index >= len(gpu.mig):
            return N.NVML_ERROR_NOT_FOUND
        _set_handle(out, self.handle_of(gpu, gpu.mig[index]))
        return N.NVML_SUCCESS

    def nvmlDeviceIsMigDeviceHandle(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceIsMigDeviceHandle")
        if code:
            return code
        _target(out).value = int(slot is not None)
        return N.NVML_SUCCESS

    def _instance_id(self, handle, out, symbol: str, read) -> int:
        gpu, slot, now, code = self._device(handle, symbol)
        if code:
            return code
        if slot is None:
            return N.NVML_ERROR_NOT_SUPPORTED
        _target(out).value = read(slot)
        return N.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle, out) -> int:
        return self._instance_id(handle, out, "nvmlDeviceGetGpuInstanceId", lambda s: s.gpu_instance_id)

    def nvmlDeviceGetComputeInstanceId(self, handle, out) -> int:
        return self._instance_id(handle, out, "nvmlDeviceGetComputeInstanceId", lambda s: s.compute_instance_id)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if code:
            return code
        if slot is None:
            return N.NVML_ERROR_INVALID_ARGUMENT
        _set_handle(out, self.handle_of(gpu))
        return N.NVML_SUCCESS

    # ------------------------------------------------------------------ processes

    def _listed(self, slot: MigSlot | None, now: GpuNow, kind: str) -> tuple[UseNow, ...]:
        uses = now.compute if kind == "compute" else now.graphics
        if slot is not None:
            uses = tuple(u for u in uses if u.gpu_instance_id == slot.gpu_instance_id)
        return uses

    def _process_array(self, gpu, slot, now, kind: str, struct):
        def make():
            uses = self._listed(slot, now, kind)
            rows: list[tuple[int, ...]]
            if struct is ProcessInfoV1:
                rows = [(u.pid, u.memory) for u in uses]
            else:
                rows = [(u.pid, u.memory,
                         NA_UINT if u.gpu_instance_id is None else u.gpu_instance_id,
                         NA_UINT if u.compute_instance_id is None else u.compute_instance_id) for u in uses]
            return len(rows), (struct * max(1, len(rows)))(*rows)

        return self._cached((gpu.index, slot.index if slot else None, kind, struct), make)

    def _processes(self, handle, count, infos, symbol: str, kind: str, struct) -> int:
        gpu, slot, now, code = self._device(handle, symbol)
        if code:
            return code
        n, array = self._process_array(gpu, slot, now, kind, struct)
        count = _target(count)
        if infos is None or count.value < n:
            count.value = n
            return N.NVML_ERROR_INSUFFICIENT_SIZE if n else N.NVML_SUCCESS
        ctypes.memmove(infos, array, ctypes.sizeof(struct) * n)
        count.value = n
        return N.NVML_SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetComputeRunningProcesses_v3", "compute",
                               N.c_nvmlProcessInfo_v3_t)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetComputeRunningProcesses_v2", "compute",
                               N.c_nvmlProcessInfo_v2_t)

    def nvmlDeviceGetComputeRunningProcesses(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetComputeRunningProcesses", "compute",
                               ProcessInfoV1)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics",
                               N.c_nvmlProcessInfo_v3_t)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics",
                               N.c_nvmlProcessInfo_v2_t)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle, count, infos) -> int:
        return self._processes(handle, count, infos, "nvmlDeviceGetGraphicsRunningProcesses", "graphics",
                               ProcessInfoV1)

    # ------------------------------------------------------------------ per-process utilisation

    def _samples(self, gpu, now: GpuNow, since: int) -> list[tuple]:
        """(pid, timestamp us, sm, mem, enc, dec) of processes that ran since ``since``."""

        def make():
            stamp = self.machine.epoch_us(self.machine.state().t)
            seen, rows = set(), []
            for u in now.compute + now.graphics:
                if u.pid not in seen and (u.sm or u.encoder or u.decoder):
                    seen.add(u.pid)
                    rows.append((u.pid, stamp, u.sm, u.mem, u.encoder, u.decoder))
            return rows

        rows = self._cached((gpu.index, "samples"), make)
        return [r for r in rows if r[1] > since]

    def nvmlDeviceGetProcessUtilization(self, handle, samples, count, since) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetProcessUtilization")
        if code:
            return code
        if gpu.mig:
            return N.NVML_ERROR_NOT_SUPPORTED
        rows = self._samples(gpu, now, _value(since))
        if not rows:
            return N.NVML_ERROR_NOT_FOUND
        count = _target(count)
        if samples is None or count.value < len(rows):
            count.value = len(rows)
            return N.NVML_ERROR_INSUFFICIENT_SIZE
        array = (N.c_nvmlProcessUtilizationSample_t * len(rows))(*rows)
        ctypes.memmove(samples, array, ctypes.sizeof(array))
        count.value = len(rows)
        return N.NVML_SUCCESS

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle, out) -> int:
        gpu, slot, now, code = self._device(handle, "nvmlDeviceGetProcessesUtilizationInfo")
        if code:
            return code
        info = _target(out)
        if info.version != N.ProcessesUtilizationInfo_v1:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if gpu.mig:
            return N.NVML_ERROR_NOT_SUPPORTED
        rows = self._samples(gpu, now, info.lastSeenTimeStamp)
        if not rows:
            return N.NVML_ERROR_NOT_FOUND
        if not info.procUtilArray or info.processSamplesCount < len(rows):
            info.processSamplesCount = len(rows)
            return N.NVML_ERROR_INSUFFICIENT_SIZE
        # the v1 info struct orders timestamp before pid, and adds JPEG and OFA engines
        array = (N.c_nvmlProcessUtilizationInfo_v1_t * len(rows))(
            *[(stamp, pid, sm, mem, enc, dec, 0, 0) for pid, stamp, sm, mem, enc, dec in rows]
        )
        ctypes.memmove(info.procUtilArray, array, ctypes.sizeof(array))
        info.processSamplesCount = len(rows)
        return N.NVML_SUCCESS
