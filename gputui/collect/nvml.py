"""Read the driver and each GPU through pynvml, on any driver version, without ever raising.

Every field is read in its own guard: a field the card or driver lacks becomes None (and is not asked
again), a GPU that stops answering is marked lost while the others still report, and versioned NVML
calls fall back to older ones (process lists v3 -> v2 -> v1, memory info v2 -> v1).

NVML calls are not free on real drivers and serialise through the driver's lock, so each reader
fetches its handle once, reads the fields that never change once, and reads the costly ones on a
slower cadence than the sample: PCIe throughput (each call blocks ~20 ms by design) every
``PCIE_EVERY`` seconds, with the time it was read (``Device.pcie_read_at``), and a graphics-process
list found empty (as on training servers) every ``GRAPHICS_EVERY`` seconds, and the GPU's settings
(power limit, compute mode, MIG mode, PCIe link, ECC error counts), which an administrator or a fault
changes now and then, every ``SETTINGS_EVERY`` seconds: each NVML call costs the monitor tens of
microseconds through pynvml even where the driver answers at once, and these were a third of them.
Compute-process lists and the readings (memory, utilisation, temperature, power, clocks) are read at
every sample: they are the process table, the bars and the source of the leak trends.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from gputui.errors import UserError
from gputui.model import COMPUTE_MODES, Device, Driver, MigInstance, ProcessKind
from gputui.model.record import Record


class NvmlUnavailable(UserError):
    """The NVIDIA driver's NVML library is missing or would not start."""

    def __init__(self, reason: str = "") -> None:
        said = f" (NVML said: {reason})" if reason else ""
        super().__init__(
            "cannot read the GPUs: the NVIDIA driver's NVML library (libnvidia-ml.so.1) could not "
            f"be loaded or initialised{said}. This usually means there is no NVIDIA GPU or driver "
            "on this machine, the driver is not loaded or does not match the kernel module, or this "
            "container was started without GPU access (e.g. docker run --gpus all). "
            "Try `gputui --demo` to see simulated GPUs."
        )


class DeviceLost(Exception):
    """A GPU stopped answering (GPU is lost, unknown error, reset required)."""


# Error codes meaning "this field/function does not exist here": ask once, then remember None.
def _absent_codes(nvml: ModuleType) -> frozenset[int]:
    return frozenset({
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", -1),
    })


def _lost_codes(nvml: ModuleType) -> frozenset[int]:
    return frozenset({
        nvml.NVML_ERROR_GPU_IS_LOST,
        nvml.NVML_ERROR_UNKNOWN,
        nvml.NVML_ERROR_RESET_REQUIRED,
    })


def start(nvml: ModuleType) -> None:
    """Load and initialise NVML, or raise NvmlUnavailable."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(str(exc)) from None
    except OSError as exc:  # a broken library file rather than a missing one
        raise NvmlUnavailable(str(exc)) from None


def read_driver(nvml: ModuleType) -> Driver:
    """Driver, CUDA driver and NVML versions; each None when the driver will not say."""

    def ask(fn: str) -> Any:
        function = getattr(nvml, fn, None)  # None: this nvidia-ml-py has no wrapper for it
        try:
            return function() if function is not None else None
        except nvml.NVMLError:
            return None

    cuda = ask("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = ask("nvmlSystemGetCudaDriverVersion")
    return Driver(
        driver_version=ask("nvmlSystemGetDriverVersion"),
        cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        nvml_version=ask("nvmlSystemGetNVMLVersion"),
    )


def device_count(nvml: ModuleType) -> int:
    return nvml.nvmlDeviceGetCount()


@dataclass(frozen=True, eq=False, repr=False)
class RawProcess(Record):
    """One entry of NVML's running-process lists, before psutil adds what it knows."""

    pid: int
    device_index: int
    kind: ProcessKind
    gpu_memory: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    sm_util: int | None = None
    memory_util: int | None = None


@dataclass
class DeviceReading:
    device: Device
    processes: list[RawProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class _ProcessInfoV1(ctypes.Structure):
    # nvmlProcessInfo_v1_t of drivers before 470: no MIG placement. pynvml 13 has no wrapper for it.
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


# Bits of nvmlClocksEventReasons / nvmlClocksThrottleReasons (same values) -> THROTTLE_REASONS names.
_THROTTLE_BITS = (
    (0x08, "hw_slowdown"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x20, "sw_thermal"),
    (0x04, "sw_power_cap"),
    (0x10, "sync_boost"),
    (0x02, "app_clocks"),
    (0x100, "display_clocks"),
    (0x01, "idle"),
)

PCIE_EVERY = 5.0  # seconds between PCIe throughput reads
GRAPHICS_EVERY = 10.0  # seconds before an empty graphics-process list is asked for again
SETTINGS_EVERY = 5.0  # seconds between reads of a GPU's settings (_read_settings)

_NOT_AVAILABLE = ctypes.c_ulonglong(-1).value  # usedGpuMemory when the driver cannot tell (WDDM)


class DeviceReader:
    """Reads one GPU. Remembers its handle, its static facts, and which calls it does not support."""

    def __init__(self, nvml: ModuleType, index: int, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.nvml = nvml
        self.index = index
        self.timer = timer
        self.nvml_seconds = 0.0  # time spent inside NVML calls, summed over this reader's life
        self._absent = _absent_codes(nvml)
        self._lost = _lost_codes(nvml)
        self._handle: Any = None
        self._static: dict[str, Any] | None = None
        self._unsupported: set[str] = set()
        self._chosen: dict[str, int] = {}  # field -> index of the variant that works here
        self._util_seen: int = 0  # NVML timestamp (us) of the newest per-process sample seen
        self._problems: list[str] = []
        self._pcie: tuple[Any, Any, float | None] = (None, None, None)  # rx, tx, read at (wall)
        self._pcie_due = float("-inf")  # monotonic second of the next PCIe read
        self._graphics: list[Any] = []
        self._graphics_due = float("-inf")
        self._settings: dict[str, Any] = {}
        self._settings_due = float("-inf")  # monotonic second of the next read of the settings
        self._now = self._wall = 0.0

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """One NVML call, its time added to ``nvml_seconds`` (raises as the call does)."""
        started = self.timer()
        try:
            return function(*args)
        finally:
            self.nvml_seconds += self.timer() - started

    # -- guards ---------------------------------------------------------------------------------

    def _ask(self, name: str, fn: str, *args: Any) -> Any:
        """Call pynvml's ``fn``; None when unsupported (remembered), DeviceLost when the GPU is gone."""
        if name in self._unsupported:
            return None
        function = getattr(self.nvml, fn, None)
        if function is None:
            # An older nvidia-ml-py lacks the wrapper: the same as a driver without the function.
            self._unsupported.add(name)
            return None
        try:
            return self._call(function, *args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._lost:
                raise DeviceLost(str(exc)) from None
            if code in self._absent:
                self._unsupported.add(name)
            else:
                self._problems.append(f"GPU {self.index}: {name.replace('_', ' ')}: {exc}")
            return None

    def _ask_first(self, name: str, variants: list[Callable[[], Any]]) -> Any:
        """Try newer-to-older variants of a call; remember which one this driver has."""
        if name in self._unsupported:
            return None
        start = self._chosen.get(name, 0)
        for i in range(start, len(variants)):
            try:
                value = self._call(variants[i])
            except AttributeError:  # this nvidia-ml-py has no wrapper for the variant
                continue
            except self.nvml.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code in self._lost:
                    raise DeviceLost(str(exc)) from None
                if code in self._absent:
                    continue
                self._problems.append(f"GPU {self.index}: {name.replace('_', ' ')}: {exc}")
                return None
            self._chosen[name] = i
            return value
        self._unsupported.add(name)
        return None

    # -- reading --------------------------------------------------------------------------------

    def read(self, now: float | None = None, wall: float | None = None) -> DeviceReading:
        """The device at monotonic second ``now`` (for the slower cadences) and wall-clock second
        ``wall`` (when the slow fields were read); None: the time module's clocks."""
        self._problems = []
        self._now = time.monotonic() if now is None else now
        self._wall = time.time() if wall is None else wall
        static = self._static or {}
        try:
            if self._handle is None:
                try:
                    self._handle = self._call(self.nvml.nvmlDeviceGetHandleByIndex, self.index)
                except self.nvml.NVMLError as exc:  # lost, or hidden from us (NO_PERMISSION)
                    raise DeviceLost(str(exc)) from None
            if self._static is None:
                static = self._static = self._read_static()
            device, processes = self._read_dynamic(static)
        except DeviceLost as exc:
            device = Device(
                index=self.index, name=static.get("name"), uuid=static.get("uuid"),
                pci_bus_id=static.get("pci_bus_id"), lost=str(exc),
            )
            self._problems.append(f"GPU {self.index} is not answering: {exc}")
            return DeviceReading(device, [], self._problems)
        return DeviceReading(device, processes, self._problems)

    def _read_static(self) -> dict[str, Any]:
        nv, h = self.nvml, self._handle
        pci = self._ask("pci_info", "nvmlDeviceGetPciInfo", h)
        return {
            "name": self._ask("name", "nvmlDeviceGetName", h),
            "uuid": self._ask("uuid", "nvmlDeviceGetUUID", h),
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "clock_sm_max": self._ask("clock_sm_max", "nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM),
            "clock_memory_max": self._ask(
                "clock_memory_max", "nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_MEM),
            "pcie_generation_max": self._ask(
                "pcie_generation_max", "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_width_max": self._ask("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", h),
            "temperature_slowdown": self._ask(
                "temperature_slowdown", "nvmlDeviceGetTemperatureThreshold", h,
                nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        }

    def _read_dynamic(self, static: dict[str, Any]) -> tuple[Device, list[RawProcess]]:
        nv, h, ask = self.nvml, self._handle, self._ask
        memory = self._ask_first("memory", [
            lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
            lambda: nv.nvmlDeviceGetMemoryInfo(h),
        ])
        util = ask("utilization", "nvmlDeviceGetUtilizationRates", h)
        encoder = ask("encoder_util", "nvmlDeviceGetEncoderUtilization", h)
        decoder = ask("decoder_util", "nvmlDeviceGetDecoderUtilization", h)
        temperature = self._ask_first("temperature", [
            lambda: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU),
            lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        ])
        power = ask("power_draw", "nvmlDeviceGetPowerUsage", h)
        settings = self._read_settings()
        power_limit = settings["power_limit"]
        pstate = ask("performance_state", "nvmlDeviceGetPerformanceState", h)
        reasons = self._ask_first("throttle_reasons", [
            lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        ])
        rx, tx, pcie_read_at = self._read_pcie()
        mig_mode = settings["mig_mode"]
        mig_enabled = None if mig_mode is None else mig_mode[0] == nv.NVML_DEVICE_MIG_ENABLE
        compute_mode = settings["compute_mode"]

        device = Device(
            index=self.index,
            name=static["name"],
            uuid=static["uuid"],
            pci_bus_id=static["pci_bus_id"],
            memory_total=memory.total if memory is not None else None,
            memory_used=memory.used if memory is not None else None,
            memory_free=memory.free if memory is not None else None,
            memory_reserved=getattr(memory, "reserved", None) if memory is not None else None,
            gpu_util=util.gpu if util is not None else None,
            memory_util=util.memory if util is not None else None,
            encoder_util=encoder[0] if encoder is not None else None,
            decoder_util=decoder[0] if decoder is not None else None,
            temperature=temperature,
            temperature_slowdown=static["temperature_slowdown"],
            fan_speed=ask("fan_speed", "nvmlDeviceGetFanSpeed", h),
            power_draw=power / 1000 if power is not None else None,
            power_limit=power_limit / 1000 if power_limit is not None else None,
            clock_sm=ask("clock_sm", "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
            clock_sm_max=static["clock_sm_max"],
            clock_memory=ask("clock_memory", "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
            clock_memory_max=static["clock_memory_max"],
            # 32 is NVML_PSTATE_UNKNOWN
            performance_state=pstate if pstate is not None and pstate < 16 else None,
            pcie_generation=settings["pcie_generation"],
            pcie_generation_max=static["pcie_generation_max"],
            pcie_width=settings["pcie_width"],
            pcie_width_max=static["pcie_width_max"],
            pcie_rx=rx * 1024 if rx is not None else None,  # NVML reports KB/s
            pcie_tx=tx * 1024 if tx is not None else None,
            pcie_read_at=pcie_read_at,
            throttle_reasons=(
                tuple(name for bit, name in _THROTTLE_BITS if reasons & bit)
                if reasons is not None else None
            ),
            ecc_corrected=settings["ecc_corrected"],
            ecc_uncorrected=settings["ecc_uncorrected"],
            mig_enabled=mig_enabled,
            mig_instances=self._read_mig() if mig_enabled else (),
            compute_mode=(
                COMPUTE_MODES[compute_mode]
                if compute_mode is not None and 0 <= compute_mode < len(COMPUTE_MODES) else None
            ),
        )
        return device, self._read_processes()

    def _read_settings(self) -> dict[str, Any]:
        """The GPU's settings and error counts, asked again once ``SETTINGS_EVERY`` has passed."""
        if self._now >= self._settings_due:
            nv, h, ask = self.nvml, self._handle, self._ask
            self._settings = {
                "power_limit": ask("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h),
                "mig_mode": ask("mig_mode", "nvmlDeviceGetMigMode", h),
                "compute_mode": ask("compute_mode", "nvmlDeviceGetComputeMode", h),
                "pcie_generation": ask("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration", h),
                "pcie_width": ask("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h),
                "ecc_corrected": ask("ecc_corrected", "nvmlDeviceGetTotalEccErrors", h,
                                     nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
                "ecc_uncorrected": ask("ecc_uncorrected", "nvmlDeviceGetTotalEccErrors", h,
                                       nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            }
            self._settings_due = self._now + SETTINGS_EVERY
        return self._settings

    def _read_pcie(self) -> tuple[Any, Any, float | None]:
        """PCIe rx/tx in KB/s and when they were read, asked again once ``PCIE_EVERY`` has passed."""
        if self._now >= self._pcie_due:
            nv, h = self.nvml, self._handle
            rx = self._ask("pcie_rx", "nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES)
            tx = self._ask("pcie_tx", "nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES)
            read = rx is not None or tx is not None
            self._pcie = (rx, tx, self._wall if read else None)
            self._pcie_due = self._now + PCIE_EVERY
        return self._pcie

    def _read_mig(self) -> tuple[MigInstance, ...]:
        nv, h = self.nvml, self._handle
        count = self._ask("mig_count", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
        instances = []
        for slot in range(count):
            try:
                mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in self._lost:
                    raise DeviceLost(str(exc)) from None
                continue  # NOT_FOUND: an empty slot
            name = self._ask("mig_name", "nvmlDeviceGetName", mig)
            memory = self._ask("mig_memory", "nvmlDeviceGetMemoryInfo", mig)
            instances.append(MigInstance(
                index=slot,
                uuid=self._ask("mig_uuid", "nvmlDeviceGetUUID", mig),
                gpu_instance_id=self._ask("mig_gi", "nvmlDeviceGetGpuInstanceId", mig),
                compute_instance_id=self._ask("mig_ci", "nvmlDeviceGetComputeInstanceId", mig),
                # MIG device names end with the profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
                profile=name.rsplit(" MIG ", 1)[1] if name and " MIG " in name else None,
                memory_total=memory.total if memory is not None else None,
                memory_used=memory.used if memory is not None else None,
            ))
        return tuple(instances)

    # -- processes ------------------------------------------------------------------------------

    def _read_processes(self) -> list[RawProcess]:
        nv, h = self.nvml, self._handle
        compute = self._ask_first("compute_processes", [
            lambda: nv.nvmlDeviceGetComputeRunningProcesses_v3(h),
            lambda: nv.nvmlDeviceGetComputeRunningProcesses_v2(h),
            lambda: _processes_v1(nv, "nvmlDeviceGetComputeRunningProcesses", h),
        ]) or []
        if self._graphics or self._now >= self._graphics_due:
            self._graphics = self._ask_first("graphics_processes", [
                lambda: nv.nvmlDeviceGetGraphicsRunningProcesses_v3(h),
                lambda: nv.nvmlDeviceGetGraphicsRunningProcesses_v2(h),
                lambda: _processes_v1(nv, "nvmlDeviceGetGraphicsRunningProcesses", h),
            ]) or []
            self._graphics_due = self._now + GRAPHICS_EVERY
        graphics = self._graphics
        merged: dict[int, RawProcess] = {}
        lists: tuple[tuple[ProcessKind, list[Any]], ...] = (("compute", compute), ("graphics", graphics))
        for kind, entries in lists:
            for info in entries:
                pid = info.pid
                memory = info.usedGpuMemory
                if memory == _NOT_AVAILABLE:
                    memory = None
                gi = getattr(info, "gpuInstanceId", None)
                ci = getattr(info, "computeInstanceId", None)
                # 0xFFFFFFFF marks "no MIG placement" in the v2/v3 structs
                gi = None if gi is None or gi >= 0xFFFFFFFF else gi
                ci = None if ci is None or ci >= 0xFFFFFFFF else ci
                before = merged.get(pid)
                if before is not None:
                    memory = max((m for m in (before.gpu_memory, memory) if m is not None),
                                 default=None)
                    kind_now: ProcessKind = before.kind if before.kind == kind else "compute+graphics"
                    merged[pid] = RawProcess(pid, self.index, kind_now, memory,
                                             before.gpu_instance_id, before.compute_instance_id)
                else:
                    merged[pid] = RawProcess(pid, self.index, kind, memory, gi, ci)
        if not merged:
            return []
        utils = self._read_process_utilization()
        if not utils:
            return list(merged.values())
        out = []
        for raw in merged.values():
            sample = utils.get(raw.pid)
            if sample is not None:
                raw = RawProcess(raw.pid, raw.device_index, raw.kind, raw.gpu_memory,
                                 raw.gpu_instance_id, raw.compute_instance_id, sample[0], sample[1])
            out.append(raw)
        return out

    def _read_process_utilization(self) -> dict[int, tuple[int, int]]:
        """Per-process SM and memory utilisation from samples newer than the last ones seen."""
        nv, h = self.nvml, self._handle
        if "process_utilization" in self._unsupported:
            return {}
        since = self._util_seen
        variants = [
            lambda: nv.nvmlDeviceGetProcessesUtilizationInfo(h, since),
            lambda: nv.nvmlDeviceGetProcessUtilization(h, since),
        ]
        start = self._chosen.get("process_utilization", 0)
        samples = None
        for i in range(start, len(variants)):
            try:
                samples = self._call(variants[i])
            except AttributeError:  # this nvidia-ml-py has no wrapper for the variant
                continue
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code in self._lost:
                    raise DeviceLost(str(exc)) from None
                if code == nv.NVML_ERROR_NOT_FOUND:  # no samples since `since`: nothing ran
                    self._chosen["process_utilization"] = i
                    return {}
                if code in self._absent:
                    continue
                self._problems.append(f"GPU {self.index}: process utilization: {exc}")
                return {}
            self._chosen["process_utilization"] = i
            break
        else:
            self._unsupported.add("process_utilization")
            return {}
        newest: dict[int, tuple[int, int, int]] = {}
        for s in samples:
            stamp = s.timeStamp
            known = newest.get(s.pid)
            if known is None or stamp >= known[0]:
                newest[s.pid] = (stamp, s.smUtil, s.memUtil)
            if stamp > self._util_seen:
                self._util_seen = stamp
        return {pid: (sm, mem) for pid, (_, sm, mem) in newest.items()}


def _processes_v1(nvml: ModuleType, symbol: str, handle: Any) -> list[Any]:
    """The v1 process list (drivers before 470), which pynvml 13 no longer wraps."""
    fn = nvml._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == nvml.NVML_SUCCESS:
        return []
    if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise nvml.NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes that start meanwhile
    array = (_ProcessInfoV1 * count.value)()
    ret = fn(handle, ctypes.byref(count), array)
    if ret != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(ret)
    return [array[i] for i in range(count.value)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
