"""The simulated machine as a real ``libnvidia-ml.so.1`` that any program can load.

``build(directory)`` compiles ``nvmlsim.c`` with the system's C compiler. A feeder
(``python -m gputui.collect.sim.feed``) asks the Python simulator every NVML question the library
can be asked and writes the answers to a state file; the library replays them. So nvitop, gpustat
and gputui without ``--demo`` (``LD_LIBRARY_PATH=DIR GPUTUI_SIM_STATE=FILE``) read the same GPUs
and processes as ``gputui --demo``, and gputui's collector runs through a real dlopen'ed library.

The state file, version 1: one fact per line, tokens separated by one space, texts %XX-escaped so
that they hold no spaces or line breaks::

    gputui-nvmlsim 1
    missing SYMBOL                          this driver lacks SYMBOL: FUNCTION_NOT_FOUND
    SYMBOL CODE VALUE...                    a system call's answer (driver version, device count)
    process PID CODE [NAME]                 nvmlSystemGetProcessName
    device SECTION PARENT|- UUID BUS|- LOST whole GPUs first (SECTION = index), then MIG devices
    SYMBOL[.KIND] CODE VALUE...             this device's answer; KIND for calls that take one,
                                            "*" for the kinds not named
    compute N (PID MEMORY GI CI)...         the running-process lists (GI, CI 4294967295: no MIG)
    graphics N (PID MEMORY GI CI)...
    samples N (PID STAMP SM MEM ENC DEC)... per-process utilisation samples (STAMP: epoch us)
    end

CODE is NVML's return code; VALUE... follow when it is 0. A symbol a device's section does not
name answers NOT_SUPPORTED.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from ctypes import byref, c_int, c_uint, c_ulonglong, c_void_p
from pathlib import Path

import pynvml as N

from gputui.collect.sim.library import TEMPERATURE_V1, Nvml

STATE_VARIABLE = "GPUTUI_SIM_STATE"  # the environment variable naming the state file
LIBRARY = "libnvidia-ml.so.1"
SOURCE = Path(__file__).with_name("nvmlsim.c")
VERSION_LINE = "gputui-nvmlsim 1"
NO_MIG = 0xFFFFFFFF

# Calls answered with one number, and the ctypes type they write.
ONE_NUMBER = (
    ("nvmlDeviceGetIndex", c_uint),
    ("nvmlDeviceGetMinorNumber", c_uint),
    ("nvmlDeviceGetPersistenceMode", c_uint),
    ("nvmlDeviceGetComputeMode", c_uint),
    ("nvmlDeviceGetDisplayMode", c_uint),
    ("nvmlDeviceGetDisplayActive", c_uint),
    ("nvmlDeviceGetFanSpeed", c_uint),
    ("nvmlDeviceGetPowerUsage", c_uint),
    ("nvmlDeviceGetEnforcedPowerLimit", c_uint),
    ("nvmlDeviceGetPowerManagementLimit", c_uint),
    ("nvmlDeviceGetPerformanceState", c_uint),
    ("nvmlDeviceGetCurrPcieLinkGeneration", c_uint),
    ("nvmlDeviceGetMaxPcieLinkGeneration", c_uint),
    ("nvmlDeviceGetCurrPcieLinkWidth", c_uint),
    ("nvmlDeviceGetMaxPcieLinkWidth", c_uint),
    ("nvmlDeviceIsMigDeviceHandle", c_uint),
    ("nvmlDeviceGetGpuInstanceId", c_uint),
    ("nvmlDeviceGetComputeInstanceId", c_uint),
    ("nvmlDeviceGetMaxMigDeviceCount", c_uint),
    ("nvmlDeviceGetCurrentClocksEventReasons", c_ulonglong),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", c_ulonglong),
)
# Calls that take a kind (clock type, sensor, threshold, counter), with the kinds NVML defines;
# "SYMBOL.*" carries the answer to any other kind.
BY_KIND = (
    ("nvmlDeviceGetClockInfo", range(4)),
    ("nvmlDeviceGetMaxClockInfo", range(4)),
    ("nvmlDeviceGetTemperature", range(1)),
    ("nvmlDeviceGetTemperatureThreshold", range(8)),
    ("nvmlDeviceGetPcieThroughput", range(2)),
    ("nvmlDeviceGetTotalEccErrors", range(2)),
)
OTHER_KIND = 0x7FFF  # a kind no NVML enum has: what the simulator says to one
TWO_NUMBERS = ("nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetMigMode")
TEXTS = ("nvmlDeviceGetName", "nvmlDeviceGetUUID")
MIG_SLOTS = 8  # MIG device indices asked for: the 7 a GPU can have, and one past them
RUNNING = {
    "compute": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses"),
    "graphics": ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                 "nvmlDeviceGetGraphicsRunningProcesses"),
}


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class _TemperatureV1(ctypes.Structure):
    """nvmlTemperature_v1_t, which nvidia-ml-py before 12.570 does not define."""

    _fields_ = [("version", c_uint), ("sensorType", c_int), ("temperature", c_int)]


def build(directory: Path | str) -> Path:
    """Compile the library into ``directory`` (once; again when the source is newer) and return its path.

    Raises RuntimeError when there is no C compiler or the build fails."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / LIBRARY
    if library.exists() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return library
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise RuntimeError("building the simulated libnvidia-ml needs a C compiler (cc); none was found")
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        built = Path(scratch) / LIBRARY
        command = [cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", f"-Wl,-soname,{LIBRARY}",
                   "-o", str(built), str(SOURCE), "-lpthread"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the simulated libnvidia-ml failed:\n{done.stderr.strip()}")
        os.replace(built, library)  # whole or not at all, for a program loading it meanwhile
    return library


def escape(text: str) -> str:
    """``text`` as one token: %, spaces, control characters and non-ASCII as %XX of their UTF-8."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        out.append(chr(byte) if 0x20 < byte < 0x7F and byte != 0x25 else f"%{byte:02X}")
    return "".join(out)


def _line(key: str, code: int, *values: str | int) -> str:
    parts = [key, str(code)]
    if code == N.NVML_SUCCESS:
        parts += [escape(v) if isinstance(v, str) else str(int(v)) for v in values]
    return " ".join(parts)


def _text(value: bytes | str) -> str:
    # pynvml's structures hand their char arrays back as str already
    return value if isinstance(value, str) else value.decode("utf-8", "surrogateescape")


def _device_lines(nv: Nvml, handle: int, sections: Mapping[int, int], pid: Mapping[int, int],
                  stamp_us: int | None) -> Iterator[str]:
    """Every answer of one device, asked the way a caller asks the C library."""
    for symbol, kind in ONE_NUMBER:
        out = kind()
        yield _line(symbol, getattr(nv, symbol)(handle, byref(out)), out.value)
    for symbol, kinds in BY_KIND:
        for k in [*kinds, OTHER_KIND]:
            out = c_ulonglong()
            args = (k, N.NVML_VOLATILE_ECC) if symbol == "nvmlDeviceGetTotalEccErrors" else (k,)
            code = getattr(nv, symbol)(handle, *args, byref(out))
            yield _line(f"{symbol}.{'*' if k == OTHER_KIND else k}", code, out.value)
    for symbol in TWO_NUMBERS:
        a, b = c_uint(), c_uint()
        yield _line(symbol, getattr(nv, symbol)(handle, byref(a), byref(b)), a.value, b.value)
    for symbol in TEXTS:
        buf = ctypes.create_string_buffer(256)
        yield _line(symbol, getattr(nv, symbol)(handle, buf, 256), _text(buf.value))
    pci = N.nvmlPciInfo_t()
    yield _line("nvmlDeviceGetPciInfo_v3", nv.nvmlDeviceGetPciInfo_v3(handle, byref(pci)),
                _text(pci.busIdLegacy), pci.domain, pci.bus, pci.device, pci.pciDeviceId,
                pci.pciSubSystemId, _text(pci.busId))
    major, minor = c_int(), c_int()
    yield _line("nvmlDeviceGetCudaComputeCapability",
                nv.nvmlDeviceGetCudaComputeCapability(handle, byref(major), byref(minor)), major.value, minor.value)
    mem = N.c_nvmlMemory_t()
    yield _line("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo(handle, byref(mem)),
                mem.total, mem.free, mem.used)
    mem2 = N.c_nvmlMemory_v2_t()
    mem2.version = N.nvmlMemory_v2
    yield _line("nvmlDeviceGetMemoryInfo_v2", nv.nvmlDeviceGetMemoryInfo_v2(handle, byref(mem2)),
                mem2.total, mem2.reserved, mem2.free, mem2.used)
    util = N.c_nvmlUtilization_t()
    yield _line("nvmlDeviceGetUtilizationRates", nv.nvmlDeviceGetUtilizationRates(handle, byref(util)),
                util.gpu, util.memory)
    temp = _TemperatureV1(TEMPERATURE_V1, N.NVML_TEMPERATURE_GPU, 0)
    yield _line("nvmlDeviceGetTemperatureV", nv.nvmlDeviceGetTemperatureV(handle, byref(temp)), temp.temperature)
    for i in range(MIG_SLOTS):
        found = c_void_p()
        code = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i, byref(found))
        yield _line(f"nvmlDeviceGetMigDeviceHandleByIndex.{i}", code, sections.get(found.value or 0, 0))
    parent = c_void_p()
    code = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle, byref(parent))
    yield _line("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", code, sections.get(parent.value or 0, 0))
    yield from _process_lines(nv, handle, pid, stamp_us)


def _asked(code: int) -> int:
    """A size query's code as the state file keeps it: "has entries" and "has none" are both success."""
    return N.NVML_SUCCESS if code in (N.NVML_ERROR_INSUFFICIENT_SIZE, N.NVML_ERROR_NOT_FOUND) else code


def _process_lines(nv: Nvml, handle: int, pid: Mapping[int, int], stamp_us: int | None) -> Iterator[str]:
    for kind, symbols in RUNNING.items():
        rows = None
        for symbol, struct in zip(symbols, (N.c_nvmlProcessInfo_v3_t, N.c_nvmlProcessInfo_v2_t, _ProcessInfoV1)):
            count = c_uint(0)
            code = getattr(nv, symbol)(handle, byref(count), None)
            yield _line(symbol, _asked(code))
            if rows is None and code in (N.NVML_SUCCESS, N.NVML_ERROR_INSUFFICIENT_SIZE):
                array = (struct * max(1, count.value))()
                getattr(nv, symbol)(handle, byref(count), array)
                rows = [(e.pid, e.usedGpuMemory, getattr(e, "gpuInstanceId", NO_MIG),
                         getattr(e, "computeInstanceId", NO_MIG)) for e in array[:count.value]]
        rows = rows or []
        yield " ".join([kind, str(len(rows))] + [f"{pid.get(p, p)} {m} {g} {c}" for p, m, g, c in rows])

    count = c_uint(0)
    code = nv.nvmlDeviceGetProcessUtilization(handle, None, byref(count), 0)
    yield _line("nvmlDeviceGetProcessUtilization", _asked(code))
    info = N.c_nvmlProcessesUtilizationInfo_v1_t()
    info.version = N.ProcessesUtilizationInfo_v1
    yield _line("nvmlDeviceGetProcessesUtilizationInfo",
                _asked(nv.nvmlDeviceGetProcessesUtilizationInfo(handle, byref(info))))
    samples = []
    if code == N.NVML_ERROR_INSUFFICIENT_SIZE:
        array = (N.c_nvmlProcessUtilizationSample_t * count.value)()
        nv.nvmlDeviceGetProcessUtilization(handle, array, byref(count), 0)
        samples = [(pid.get(s.pid, s.pid), s.timeStamp if stamp_us is None else stamp_us,
                    s.smUtil, s.memUtil, s.encUtil, s.decUtil) for s in array[:count.value]]
    yield " ".join(["samples", str(len(samples))] + [" ".join(map(str, s)) for s in samples])


def state_text(nv: Nvml, *, pids: Mapping[int, int] | None = None, stamp_us: int | None = None) -> str:
    """The whole simulated driver as a state file, as ``nv`` answers now.

    ``pids`` maps simulated pids to the real ones standing in for them; ``stamp_us`` replaces the
    utilisation samples' time (epoch microseconds), for callers that ask for samples of the last second
    by the real clock (nvitop does)."""
    pids = pids or {}
    if not nv.initialized:
        nv.nvmlInit()
    plan = nv.scenario
    gpus = list(plan.gpus)
    slots = [(gpu, slot) for gpu in gpus for slot in gpu.mig]
    sections = {nv.handle_of(gpu): i for i, gpu in enumerate(gpus)}
    sections.update({nv.handle_of(gpu, slot): len(gpus) + i for i, (gpu, slot) in enumerate(slots)})

    lines = [VERSION_LINE]
    lines += [f"missing {symbol}" for symbol in sorted(plan.driver.missing)]
    buf = ctypes.create_string_buffer(256)
    lines.append(_line("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion(buf, 256), _text(buf.value)))
    lines.append(_line("nvmlSystemGetNVMLVersion", nv.nvmlSystemGetNVMLVersion(buf, 256), _text(buf.value)))
    cuda = c_int()
    lines.append(_line("nvmlSystemGetCudaDriverVersion", nv.nvmlSystemGetCudaDriverVersion(byref(cuda)), cuda.value))

    body = []
    for gpu, slot in [(gpu, None) for gpu in gpus] + slots:
        handle = nv.handle_of(gpu, slot)
        parent = "-" if slot is None else str(gpu.index)
        body.append(f"device {sections[handle]} {parent} {escape(slot.uuid if slot else gpu.uuid)} "
                    f"{'-' if slot else gpu.pci_bus_id} {int(gpu.lost)}")
        body += _device_lines(nv, handle, sections, pids, stamp_us)

    listed = {int(line.split()[0]) for line in _listed_rows(body)}
    real = {v: k for k, v in pids.items()}
    for p in sorted(listed):
        code = nv.nvmlSystemGetProcessName(real.get(p, p), buf, 256)
        lines.append(f"process {p} {code}" + (f" {escape(_text(buf.value))}" if code == N.NVML_SUCCESS else ""))
    return "\n".join(lines + body + ["end", ""])


def _listed_rows(lines: list[str]) -> Iterator[str]:
    """"PID ..." for every entry of the process lists in ``lines``."""
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind in ("compute", "graphics"):
            tokens = rest.split()[1:]
            for i in range(0, len(tokens), 4):
                yield " ".join(tokens[i:i + 4])


def write_state(path: Path | str, text: str) -> None:
    """Replace the state file at ``path`` whole (a reader sees the old one or the new one)."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def state_pids(path: Path | str) -> list[int]:
    """The pids the state file at ``path`` lists on any GPU, sorted."""
    lines = Path(path).read_text(encoding="ascii").splitlines()
    return sorted({int(row.split()[0]) for row in _listed_rows(lines)})
