"""What the collector sees on a machine at one instant: driver, devices, GPU processes, host.

Every value is in base units (bytes, bytes/s, percent, watts, degrees C, MHz, seconds since the
epoch). A field the hardware or driver does not report is ``None``: never zero, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.model.probe import ProbeReport


@dataclass(frozen=True)
class Driver:
    """Versions of the NVIDIA software stack."""

    driver_version: str | None = None  # e.g. "550.54.15"
    cuda_driver_version: str | None = None  # e.g. "12.4"
    nvml_version: str | None = None  # e.g. "12.550.54.15"


@dataclass(frozen=True)
class MigInstance:
    """One MIG device carved out of a physical GPU."""

    index: int  # MIG device index within its parent
    uuid: str | None = None  # "MIG-..."
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None  # e.g. "1g.10gb"
    memory_total: int | None = None
    memory_used: int | None = None
    cuda_index: int | None = None  # as CUDA_VISIBLE_DEVICES sees it, None if hidden


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


@dataclass(frozen=True)
class Device:
    """One physical GPU as NVML reports it."""

    index: int  # NVML index (the order nvidia-smi uses)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    cuda_index: int | None = None  # index the current CUDA_VISIBLE_DEVICES gives it; None if hidden
    lost: str | None = None  # why the device stopped answering ("GPU is lost"), None when healthy

    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None  # driver/firmware reservation (memory info v2 only)

    gpu_util: int | None = None  # percent of time a kernel was running
    memory_util: int | None = None  # percent of time memory was read or written
    encoder_util: int | None = None
    decoder_util: int | None = None

    temperature: int | None = None  # degrees C
    temperature_slowdown: int | None = None  # threshold at which the GPU slows itself down
    fan_speed: int | None = None  # percent
    power_draw: float | None = None  # watts
    power_limit: float | None = None  # watts (enforced limit)

    clock_sm: int | None = None  # MHz
    clock_sm_max: int | None = None
    clock_memory: int | None = None
    clock_memory_max: int | None = None
    performance_state: int | None = None  # 0 (P0, fastest) .. 15

    pcie_generation: int | None = None
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_rx: int | None = None  # bytes/s
    pcie_tx: int | None = None  # bytes/s
    # When rx/tx were read (seconds since the epoch): NVML blocks ~20 ms per throughput call, so
    # they are read every few seconds, not every sample (collect/nvml.py PCIE_EVERY).
    pcie_read_at: float | None = None

    throttle_reasons: tuple[str, ...] | None = None  # names from THROTTLE_REASONS; () = full speed
    ecc_corrected: int | None = None  # volatile aggregate counts since the driver loaded
    ecc_uncorrected: int | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    compute_mode: str | None = None  # one of COMPUTE_MODES


# GpuProcess.state values
PROCESS_OK = "ok"
PROCESS_GONE = "gone"  # exited between the NVML query and the psutil lookup
PROCESS_DENIED = "denied"  # another user's process: psutil may not read it
PROCESS_ZOMBIE = "zombie"
PROCESS_UNMAPPED = "unmapped"  # NVML's host PID has no PID in this container's namespace


@dataclass(frozen=True)
class GpuProcess:
    """One process holding a context on one device (a process on two GPUs appears twice)."""

    pid: int  # the PID NVML reports (host PID namespace)
    device_index: int
    local_pid: int | None = None  # the same process as this monitor's PID namespace sees it
    kind: str = "compute"  # "compute", "graphics" or "compute+graphics"
    gpu_instance_id: int | None = None  # MIG placement, None outside MIG
    compute_instance_id: int | None = None
    gpu_memory: int | None = None  # bytes NVML charges to this process on this device
    sm_util: int | None = None  # percent, when the driver reports per-process utilisation
    memory_util: int | None = None

    state: str = PROCESS_OK
    name: str | None = None
    command: tuple[str, ...] = ()  # argv
    user: str | None = None
    ppid: int | None = None  # local PID of the parent
    cpu_percent: float | None = None  # since the previous sample; None on the first
    host_memory: int | None = None  # RSS bytes
    started_at: float | None = None  # seconds since the epoch
    note: str | None = None  # why something is missing, for people ("exited", "access denied")

    @property
    def own_pid(self) -> int:
        """The pid a probe inside this process reports: the one in the monitor's PID namespace."""
        return self.local_pid if self.local_pid is not None else self.pid


@dataclass(frozen=True)
class HostProcess:
    """A process holding no GPU: an ancestor of a GPU process (for the process tree), or a probed
    process NVML does not list (a CPU-only job, no driver)."""

    pid: int
    ppid: int | None = None
    name: str | None = None
    command: tuple[str, ...] = ()
    user: str | None = None
    cpu_percent: float | None = None  # probed processes only: since the previous sample
    host_memory: int | None = None  # probed processes only: RSS bytes
    started_at: float | None = None  # probed processes only: seconds since the epoch


@dataclass(frozen=True)
class Host:
    """The machine the GPUs are in."""

    hostname: str = ""
    cpu_count: int | None = None
    cpu_percent: float | None = None  # all cores, since the previous sample
    memory_total: int | None = None
    memory_used: int | None = None
    swap_total: int | None = None
    swap_used: int | None = None
    load_average: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class MonitorCost:
    """What taking a snapshot cost the monitor itself: users watch for a monitor slowing training."""

    cpu_percent: float | None = None  # the monitor's process, % of one core since the last sample
    nvml_ms: float | None = None  # time inside NVML calls for this snapshot
    sample_ms: float | None = None  # time to take the whole snapshot (NVML, /proc, host)


@dataclass(frozen=True)
class Snapshot:
    """Everything the monitor knows at one instant. Immutable: widgets render from it."""

    taken_at: float  # seconds since the epoch
    driver: Driver = field(default_factory=Driver)
    devices: tuple[Device, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    parents: tuple[HostProcess, ...] = ()  # ancestors of GPU processes that hold no GPU themselves
    host: Host = field(default_factory=Host)
    probes: tuple[ProbeReport, ...] = ()  # reports of probed processes, filled in by the monitor
    probed: tuple[HostProcess, ...] = ()  # /proc's view of the probed processes NVML does not list
    source: str = "nvml"  # "nvml" or "sim:<scenario>"
    problems: tuple[str, ...] = ()  # non-fatal trouble worth telling the user about
    monitor: MonitorCost | None = None  # None where not measured (a still picture, a fake clock)
