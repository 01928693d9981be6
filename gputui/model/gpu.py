"""What the collector sees on a machine at one instant: driver, devices, GPU processes, host.

Every value is in base units (bytes, bytes/s, percent, watts, degrees C, MHz, seconds since the
epoch). A field the hardware or driver does not report is ``None``: never zero, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.fielddoc import doc
from gputui.model.job import Job
from gputui.model.owner import Owner
from gputui.model.probe import ProbeReport
from gputui.model.record import Record


@dataclass(frozen=True, eq=False, repr=False)
class Driver(Record):
    """Versions of the NVIDIA software stack."""

    driver_version: str | None = field(default=None, metadata=doc('NVIDIA driver version, e.g. `"550.54.15"`'))
    cuda_driver_version: str | None = field(default=None, metadata=doc(
        'highest CUDA version the driver supports, e.g. `"12.4"`'))
    nvml_version: str | None = field(default=None, metadata=doc('NVML library version, e.g. `"12.550.54.15"`'))


@dataclass(frozen=True, eq=False, repr=False)
class MigInstance(Record):
    """One MIG device carved out of a physical GPU."""

    index: int = field(metadata=doc("MIG device index within its parent GPU", minimum=0))
    uuid: str | None = field(default=None, metadata=doc('MIG device UUID, `"MIG-..."`'))
    gpu_instance_id: int | None = field(default=None, metadata=doc("GPU instance id"))
    compute_instance_id: int | None = field(default=None, metadata=doc("compute instance id"))
    profile: str | None = field(default=None, metadata=doc('MIG profile, e.g. `"1g.10gb"`'))
    memory_total: int | None = field(default=None, metadata=doc("memory of the instance (bytes)", minimum=0))
    memory_used: int | None = field(default=None, metadata=doc("memory in use (bytes)", minimum=0))
    cuda_index: int | None = field(default=None, metadata=doc(
        "CUDA index under the current `CUDA_VISIBLE_DEVICES`; null when hidden"))


def mig_name(gpu: int, gpu_instance_id: int | None) -> str:
    """A MIG instance's name, the same in every view (--once, the monitor, the detail screen): its GPU's
    NVML index and its GPU instance id, "0:1", the pair nvidia-smi's process table gives (GPU, GI).
    Not the MIG device index: a process knows only its GPU instance, and memory is the instance's."""
    return f"{gpu}:{'?' if gpu_instance_id is None else gpu_instance_id}"


# Names used in Device.throttle_reasons, in the order they are usually worth showing.
THROTTLE_REASONS = (
    "hw_slowdown",  # hardware asked for it (power brake, thermal)
    "hw_thermal",
    "hw_power_brake",
    "sw_thermal",
    "sw_power_cap",
    "sync_boost",
    "app_clocks",
    "display_clocks",
    "idle",
)

COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")


@dataclass(frozen=True, eq=False, repr=False)
class Device(Record):
    """One physical GPU as NVML reports it."""

    index: int = field(metadata=doc("NVML index (nvidia-smi order; not necessarily the CUDA order)", minimum=0))
    name: str | None = field(default=None, metadata=doc('product name, e.g. `"NVIDIA H100 80GB HBM3"`'))
    uuid: str | None = field(default=None, metadata=doc('GPU UUID, `"GPU-..."`'))
    pci_bus_id: str | None = field(default=None, metadata=doc('PCI bus id, e.g. `"00000000:17:00.0"`'))
    cuda_index: int | None = field(default=None, metadata=doc(
        "the index CUDA gives this GPU under the current `CUDA_VISIBLE_DEVICES`; null when hidden from CUDA"))
    lost: str | None = field(default=None, metadata=doc(
        'why the GPU stopped answering (e.g. `"GPU is lost"`); null when healthy. A lost GPU has null readings.'))

    memory_total: int | None = field(default=None, metadata=doc("total memory (bytes)", minimum=0))
    memory_used: int | None = field(default=None, metadata=doc(
        "used memory (bytes); with memory info v2 this counts like nvidia-smi", minimum=0))
    memory_free: int | None = field(default=None, metadata=doc("free memory (bytes)", minimum=0))
    memory_reserved: int | None = field(default=None, metadata=doc(
        "memory the driver and firmware reserve (bytes; only drivers with memory info v2)", minimum=0))

    gpu_util: int | None = field(default=None, metadata=doc(
        "share of time a kernel was running (percent)", minimum=0))
    memory_util: int | None = field(default=None, metadata=doc(
        "share of time device memory was read or written (percent)", minimum=0))
    encoder_util: int | None = field(default=None, metadata=doc("video encoder utilisation (percent)", minimum=0))
    decoder_util: int | None = field(default=None, metadata=doc("video decoder utilisation (percent)", minimum=0))

    temperature: int | None = field(default=None, metadata=doc("GPU temperature (degrees C)"))
    temperature_slowdown: int | None = field(default=None, metadata=doc(
        "temperature at which the GPU slows itself down (degrees C)"))
    fan_speed: int | None = field(default=None, metadata=doc(
        "fan speed (percent of maximum); null on passively cooled GPUs", minimum=0))
    power_draw: float | None = field(default=None, metadata=doc("power draw (watts)", minimum=0))
    power_limit: float | None = field(default=None, metadata=doc("enforced power limit (watts)", minimum=0))

    clock_sm: int | None = field(default=None, metadata=doc("SM clock (MHz)", minimum=0))
    clock_sm_max: int | None = field(default=None, metadata=doc("maximum SM clock (MHz)", minimum=0))
    clock_memory: int | None = field(default=None, metadata=doc("memory clock (MHz)", minimum=0))
    clock_memory_max: int | None = field(default=None, metadata=doc("maximum memory clock (MHz)", minimum=0))
    performance_state: int | None = field(default=None, metadata=doc(
        "performance state, 0 (P0, fastest) to 15", minimum=0, maximum=15))

    pcie_generation: int | None = field(default=None, metadata=doc("current PCIe link generation"))
    pcie_generation_max: int | None = field(default=None, metadata=doc("maximum PCIe link generation"))
    pcie_width: int | None = field(default=None, metadata=doc("current PCIe link width (lanes)"))
    pcie_width_max: int | None = field(default=None, metadata=doc("maximum PCIe link width (lanes)"))
    pcie_rx: int | None = field(default=None, metadata=doc("PCIe receive throughput (bytes/s)", minimum=0))
    pcie_tx: int | None = field(default=None, metadata=doc("PCIe transmit throughput (bytes/s)", minimum=0))
    # Read every PCIE_EVERY seconds (collect/nvml.py), not every sample.
    pcie_read_at: float | None = field(default=None, metadata=doc(
        "when `pcie_rx` and `pcie_tx` were read (seconds since the epoch): each NVML throughput call blocks "
        "about 20 ms, so gputui reads them every 5 s, not at every sample"))

    throttle_reasons: tuple[str, ...] | None = field(default=None, metadata=doc(
        "why the clocks are held down; `[]` = full speed, null = not reported", enum=THROTTLE_REASONS))
    ecc_corrected: int | None = field(default=None, metadata=doc(
        "corrected ECC errors since the driver loaded (count)", minimum=0))  # volatile aggregate counts
    ecc_uncorrected: int | None = field(default=None, metadata=doc(
        "uncorrected ECC errors since the driver loaded (count)", minimum=0))
    mig_enabled: bool | None = field(default=None, metadata=doc("MIG mode is on"))
    mig_instances: tuple[MigInstance, ...] = field(default=(), metadata=doc(
        "the MIG devices of this GPU; `[]` outside MIG"))
    compute_mode: str | None = field(default=None, metadata=doc("compute mode", enum=COMPUTE_MODES))


# GpuProcess.state values
ProcessState = Literal["ok", "gone", "denied", "zombie", "unmapped"]
PROCESS_OK: Final = "ok"
PROCESS_GONE: Final = "gone"  # exited between the NVML query and the psutil lookup
PROCESS_DENIED: Final = "denied"  # another user's process: psutil may not read it
PROCESS_ZOMBIE: Final = "zombie"
PROCESS_UNMAPPED: Final = "unmapped"  # NVML's host PID has no PID in this container's namespace
PROCESS_STATES: tuple[ProcessState, ...] = (
    PROCESS_OK, PROCESS_GONE, PROCESS_DENIED, PROCESS_ZOMBIE, PROCESS_UNMAPPED,
)

# GpuProcess.kind values: the context types NVML lists a process under
ProcessKind = Literal["compute", "graphics", "compute+graphics"]
PROCESS_KINDS: tuple[ProcessKind, ...] = ("compute", "graphics", "compute+graphics")


@dataclass(frozen=True, eq=False, repr=False)
class GpuProcess(Record):
    """One process holding a context on one device (a process on two GPUs appears twice)."""

    pid: int = field(metadata=doc("the PID NVML reports (the host's PID namespace)", minimum=1))
    device_index: int = field(metadata=doc("NVML index of the GPU", minimum=0))
    local_pid: int | None = field(default=None, metadata=doc(
        "the same process's PID in gputui's PID namespace (differs inside containers); null when it cannot be "
        "mapped", minimum=1))
    kind: ProcessKind = field(default="compute", metadata=doc("context type", enum=PROCESS_KINDS))
    gpu_instance_id: int | None = field(default=None, metadata=doc(
        "MIG GPU instance the process runs in; null outside MIG"))
    compute_instance_id: int | None = field(default=None, metadata=doc("MIG compute instance; null outside MIG"))
    gpu_memory: int | None = field(default=None, metadata=doc(
        "GPU memory NVML charges to this process on this GPU (bytes)", minimum=0))
    sm_util: int | None = field(default=None, metadata=doc(
        "SM utilisation of this process (percent), where the driver reports per-process utilisation", minimum=0))
    memory_util: int | None = field(default=None, metadata=doc(
        "memory utilisation of this process (percent)", minimum=0))

    state: ProcessState = field(default=PROCESS_OK, metadata=doc(
        "whether the host process could be read: `ok`; `gone` (exited between the NVML query and the process "
        "lookup); `denied` (another user's process: details not readable); `zombie`; `unmapped` (NVML's host "
        "PID has no PID in this container)", enum=PROCESS_STATES))
    name: str | None = field(default=None, metadata=doc("process name"))
    command: tuple[str, ...] = field(default=(), metadata=doc("command line (argv); `[]` when unknown"))
    user: str | None = field(default=None, metadata=doc("owner's user name"))
    ppid: int | None = field(default=None, metadata=doc("parent PID (gputui's namespace)"))
    cpu_percent: float | None = field(default=None, metadata=doc(
        "CPU use since the previous sample (percent of one core, so up to 100 × cores); null on the first "
        "sample. `--once` and `--json` sample twice, 0.3 s apart, so this is known.", minimum=0))
    host_memory: int | None = field(default=None, metadata=doc("resident host memory, RSS (bytes)", minimum=0))
    started_at: float | None = field(default=None, metadata=doc("process start time (seconds since the epoch)"))
    note: str | None = field(default=None, metadata=doc(
        'why something is missing, for people (e.g. `"access denied"`)'))
    uses_torch: bool | None = field(default=None, metadata=doc(
        "the process has loaded PyTorch (torch's libraries are in its memory map, read once per process): one "
        "the probe can be attached to; null when its map cannot be read (another user's process) or in `--demo`"))
    owner: Owner | None = field(default=None, metadata=doc(
        "whose it is: user, container, Kubernetes pod, Slurm job, systemd unit (read once per process); null when "
        "its process could not be read"))

    @property
    def gpu_name(self) -> str:
        """Where it runs, as the GPU column says: "1", or in a MIG instance "0:1" (``mig_name``)."""
        return str(self.device_index) if self.gpu_instance_id is None else mig_name(
            self.device_index, self.gpu_instance_id)

    @property
    def own_pid(self) -> int:
        """The pid a probe inside this process reports: the one in the monitor's PID namespace."""
        return self.local_pid if self.local_pid is not None else self.pid


@dataclass(frozen=True, eq=False, repr=False)
class HostProcess(Record):
    """A process holding no GPU: an ancestor of a GPU process (for the process tree), or a probed
    process NVML does not list (a CPU-only job, no driver)."""

    pid: int = field(metadata=doc("PID", minimum=1))
    ppid: int | None = field(default=None, metadata=doc("parent PID"))
    name: str | None = field(default=None, metadata=doc("process name"))
    command: tuple[str, ...] = field(default=(), metadata=doc("command line (argv)"))
    user: str | None = field(default=None, metadata=doc("owner's user name"))
    cpu_percent: float | None = field(default=None, metadata=doc(
        "CPU use since the previous sample (percent of one core); probed processes only", minimum=0))
    host_memory: int | None = field(default=None, metadata=doc(
        "resident host memory, RSS (bytes); probed processes only", minimum=0))
    started_at: float | None = field(default=None, metadata=doc(
        "process start time (seconds since the epoch); probed processes only"))


@dataclass(frozen=True, eq=False, repr=False)
class Host(Record):
    """The machine the GPUs are in."""

    hostname: str = field(default="", metadata=doc("host name"))
    cpu_count: int | None = field(default=None, metadata=doc("logical CPUs", minimum=1))
    cpu_percent: float | None = field(default=None, metadata=doc(
        "CPU use of all cores together since the previous sample (percent, 0-100)", minimum=0))
    memory_total: int | None = field(default=None, metadata=doc("physical memory (bytes)", minimum=0))
    memory_used: int | None = field(default=None, metadata=doc("memory in use (bytes)", minimum=0))
    swap_total: int | None = field(default=None, metadata=doc("swap (bytes)", minimum=0))
    swap_used: int | None = field(default=None, metadata=doc("swap in use (bytes)", minimum=0))
    load_average: tuple[float, float, float] | None = field(default=None, metadata=doc(
        "1, 5 and 15 minute load averages"))
    boot_time: float | None = field(default=None, metadata=doc(
        "when the host booted (Unix time, seconds): its uptime is the snapshot's time less this", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class MonitorCost(Record):
    """What taking a snapshot cost the monitor itself: users watch for a monitor slowing training."""

    cpu_percent: float | None = field(default=None, metadata=doc(
        "gputui's own process, all its threads: CPU time since its previous sample over the time between them "
        "(percent of one core); null on the first sample (`--once`)", minimum=0))
    nvml_ms: float | None = field(default=None, metadata=doc(
        "time spent inside NVML calls for this snapshot (milliseconds); on real drivers these calls serialise "
        "through the driver's lock", minimum=0))
    sample_ms: float | None = field(default=None, metadata=doc(
        "time to take the whole snapshot: NVML, /proc and the host's figures (milliseconds)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class EndedProcess(Record):
    """A probed process that an out-of-memory error ended while the monitor watched it: kept in view,
    with the report it left, instead of letting its row vanish."""

    pid: int = field(metadata=doc("its PID (gputui's namespace)", minimum=1))
    ended_at: float = field(metadata=doc("when the out-of-memory error came (seconds since the epoch)"))
    report: ProbeReport = field(metadata=doc(
        "its probe's last report: the OOM report file's where one was written, whose `last_oom` says what "
        "failed, where and in which phase"))
    report_file: str | None = field(default=None, metadata=doc(
        "the OOM report the probe wrote (`gputui oom FILE` prints it); null when the process was seen to fail "
        "but left no file"))
    user: str | None = field(default=None, metadata=doc("owner's user name, as last seen"))
    devices: tuple[int, ...] = field(default=(), metadata=doc(
        "NVML indices of the GPUs it held memory on when last seen", minimum=0))
    gpu_memory: int | None = field(default=None, metadata=doc(
        "GPU memory NVML charged to it when last seen, all its GPUs (bytes)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class Snapshot(Record):
    """Everything the monitor knows at one instant. Immutable: widgets render from it."""

    taken_at: float = field(metadata=doc("when the snapshot was taken (seconds since the epoch)"))
    driver: Driver = field(default_factory=Driver, metadata=doc("versions of the NVIDIA software"))
    devices: tuple[Device, ...] = field(default=(), metadata=doc(
        "the GPUs, in NVML index order (the order of nvidia-smi)"))
    processes: tuple[GpuProcess, ...] = field(default=(), metadata=doc(
        "GPU processes: one entry per process and GPU (a process on two GPUs appears twice)"))
    parents: tuple[HostProcess, ...] = field(default=(), metadata=doc(
        "ancestors of GPU processes that hold no GPU themselves (shells, launchers)"))
    host: Host = field(default_factory=Host, metadata=doc("the machine's CPU and memory"))
    # filled in by the monitor, not the collector
    probes: tuple[ProbeReport, ...] = field(default=(), metadata=doc(
        "reports of probed PyTorch processes, including ones NVML does not list (CPU-only jobs)"))
    probed: tuple[HostProcess, ...] = field(default=(), metadata=doc(
        "the probed processes NVML does not list, as /proc sees them (user, CPU, RSS, start time)"))
    source: str = field(default="nvml", metadata=doc(
        '`"nvml"` for the real driver, `"sim:<scenario>"` for `--demo`'))
    problems: tuple[str, ...] = field(default=(), metadata=doc(
        "non-fatal trouble for people to read: a lost GPU, a probe that did not answer, no driver (when only "
        "probes could be shown)"))
    monitor: MonitorCost | None = field(default=None, metadata=doc(
        "what taking this snapshot cost gputui itself; null where it was not measured (`gputui probes` documents, "
        "still pictures)"))
    jobs: tuple[Job, ...] = field(default=(), metadata=doc(
        "training jobs: processes grouped across their ranks and GPUs (a torchrun job, a Slurm step, one process "
        "on several GPUs), probed CPU jobs included"))
    ended: tuple[EndedProcess, ...] = field(default=(), metadata=doc(
        "probed processes an out-of-memory error ended while the live monitor watched, oldest first (the live "
        "monitor's; `--once` and `--json` sample too briefly to see one end)"))
