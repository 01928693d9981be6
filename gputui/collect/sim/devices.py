"""The simulated hardware: GPU models with their real limits, and driver generations.

Figures are those nvidia-smi shows for the real boards (memory totals in MiB, clock maxima in MHz,
power limits in W). ``unsupported`` names the NVML symbols the board answers NOT_SUPPORTED.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class MigProfile:
    """One MIG slice shape, e.g. 3g.40gb."""

    name: str  # "3g.40gb"
    slices: int  # compute slices out of 7
    memory: int  # bytes the MIG device reports as total


@dataclass(frozen=True)
class GpuModel:
    """What one board is: the numbers that do not change while it runs."""

    name: str
    memory_total: int
    memory_reserved: int  # firmware/driver reservation (memory info v2)
    power_limit: float  # W, enforced
    power_idle: float  # W at rest
    sm_max: int
    sm_idle: int
    mem_max: int
    mem_idle: int  # HBM does not downclock; GDDR drops to ~400 MHz at rest
    pcie_gen: int
    pcie_width: int
    pci_device_id: int  # 0xDEVICEVENDOR as NVML packs it
    temp_idle: int
    temp_rise: int  # degrees above idle at full power
    temp_slowdown: int
    temp_shutdown: int
    idle_pstate: int = 0  # datacenter boards sit in P0; GeForce rests in P8
    busy_pstate: int = 0
    pcie_gen_idle: int | None = None  # GeForce drops the link to gen 1 at rest
    has_fan: bool = False
    has_ecc: bool = True
    mig_profiles: tuple[MigProfile, ...] = ()
    context_memory: int = 500 * MiB  # what a CUDA context costs on this board
    compute_capability: tuple[int, int] = (9, 0)
    unsupported: frozenset[str] = field(default_factory=frozenset)


# Figures as a real H100 SXM gave them (docs/validation.md, 2026-11-25): total and reserved from
# memory info v2, idle and maximum clocks, no fan, and the CUDA context with its libraries as torch
# 2.11 on CUDA 13 loads them.
H100_SXM = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    memory_total=81559 * MiB,
    memory_reserved=480 * MiB,
    power_limit=700.0,
    power_idle=71.0,
    sm_max=1980,
    sm_idle=345,
    mem_max=2619,
    mem_idle=2619,
    pcie_gen=5,
    pcie_width=16,
    pci_device_id=0x233010DE,
    temp_idle=31,
    temp_rise=40,
    temp_slowdown=87,
    temp_shutdown=92,
    mig_profiles=(
        MigProfile("1g.10gb", 1, 9984 * MiB),
        MigProfile("2g.20gb", 2, 20096 * MiB),
        MigProfile("3g.40gb", 3, 40320 * MiB),
        MigProfile("7g.80gb", 7, 80896 * MiB),
    ),
    compute_capability=(9, 0),
    context_memory=742 * MiB,
    unsupported=frozenset({"nvmlDeviceGetFanSpeed"}),
)

A100_SXM_40 = GpuModel(
    name="NVIDIA A100-SXM4-40GB",
    memory_total=40960 * MiB,
    memory_reserved=384 * MiB,
    power_limit=400.0,
    power_idle=54.0,
    sm_max=1410,
    sm_idle=210,
    mem_max=1215,
    mem_idle=1215,
    pcie_gen=4,
    pcie_width=16,
    pci_device_id=0x20B010DE,
    temp_idle=29,
    temp_rise=38,
    temp_slowdown=89,
    temp_shutdown=92,
    mig_profiles=(
        MigProfile("1g.5gb", 1, 4864 * MiB),
        MigProfile("2g.10gb", 2, 9984 * MiB),
        MigProfile("3g.20gb", 3, 19968 * MiB),
        MigProfile("7g.40gb", 7, 40192 * MiB),
    ),
    compute_capability=(8, 0),
    unsupported=frozenset({"nvmlDeviceGetFanSpeed"}),
)

RTX_4090 = GpuModel(
    name="NVIDIA GeForce RTX 4090",
    memory_total=24564 * MiB,
    memory_reserved=380 * MiB,
    power_limit=450.0,
    power_idle=21.0,
    sm_max=3120,
    sm_idle=210,
    mem_max=10501,
    mem_idle=405,
    pcie_gen=4,
    pcie_width=16,
    pci_device_id=0x268410DE,
    temp_idle=36,
    temp_rise=42,
    temp_slowdown=87,
    temp_shutdown=92,
    idle_pstate=8,
    busy_pstate=2,
    pcie_gen_idle=1,
    has_fan=True,
    has_ecc=False,
    context_memory=420 * MiB,
    compute_capability=(8, 9),
    unsupported=frozenset(
        {
            # GeForce boards have no ECC and no MIG.
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetMigDeviceHandleByIndex",
        }
    ),
)

RTX_A6000 = GpuModel(
    name="NVIDIA RTX A6000",
    memory_total=49140 * MiB,
    memory_reserved=430 * MiB,
    power_limit=300.0,
    power_idle=23.0,
    sm_max=2100,
    sm_idle=210,
    mem_max=8001,
    mem_idle=405,
    pcie_gen=4,
    pcie_width=16,
    pci_device_id=0x223010DE,
    temp_idle=33,
    temp_rise=45,
    temp_slowdown=93,
    temp_shutdown=98,
    idle_pstate=8,
    busy_pstate=2,
    pcie_gen_idle=1,
    has_fan=True,
    context_memory=440 * MiB,
    compute_capability=(8, 6),
    unsupported=frozenset(
        {"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex"}
    ),
)

V100_SXM2 = GpuModel(
    name="Tesla V100-SXM2-32GB",
    memory_total=32768 * MiB,
    memory_reserved=258 * MiB,
    power_limit=300.0,
    power_idle=42.0,
    sm_max=1530,
    sm_idle=135,
    mem_max=877,
    mem_idle=877,
    pcie_gen=3,
    pcie_width=16,
    pci_device_id=0x1DB510DE,
    temp_idle=34,
    temp_rise=60,  # a clogged chassis: it reaches its slowdown threshold under load
    temp_slowdown=87,
    temp_shutdown=90,
    compute_capability=(7, 0),
    unsupported=frozenset(
        {
            "nvmlDeviceGetFanSpeed",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetMigDeviceHandleByIndex",
        }
    ),
)

GTX_1080_TI = GpuModel(
    name="NVIDIA GeForce GTX 1080 Ti",
    memory_total=11264 * MiB,
    memory_reserved=0,
    power_limit=250.0,
    power_idle=11.0,
    sm_max=1911,
    sm_idle=139,
    mem_max=5505,
    mem_idle=405,
    pcie_gen=3,
    pcie_width=16,
    pci_device_id=0x1B0610DE,
    temp_idle=30,
    temp_rise=45,
    temp_slowdown=93,
    temp_shutdown=96,
    idle_pstate=8,
    busy_pstate=2,
    pcie_gen_idle=1,
    has_fan=True,
    has_ecc=False,
    context_memory=300 * MiB,
    compute_capability=(6, 1),
    unsupported=frozenset(
        {
            "nvmlDeviceGetTotalEccErrors",
            # Pascal GeForce under this driver reports no video-engine or PCIe counters.
            "nvmlDeviceGetEncoderUtilization",
            "nvmlDeviceGetDecoderUtilization",
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetProcessUtilization",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetMigDeviceHandleByIndex",
        }
    ),
)


@dataclass(frozen=True)
class Driver:
    """A driver generation: its version strings and the NVML symbols it lacks."""

    version: str  # "560.35.03"
    cuda: int  # 12060 for CUDA 12.6, as nvmlSystemGetCudaDriverVersion packs it
    missing: frozenset[str] = frozenset()

    @property
    def nvml_version(self) -> str:
        return f"{self.cuda // 1000}.{self.version}"


# Symbols that arrived after each generation (checked against NVML's change log).
_AFTER_535 = frozenset({"nvmlDeviceGetTemperatureV", "nvmlDeviceGetProcessesUtilizationInfo"})
_AFTER_450 = _AFTER_535 | frozenset(
    {
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetCurrentClocksEventReasons",
    }
)

DRIVER_560 = Driver("560.35.03", 12060)
DRIVER_535 = Driver("535.183.01", 12020, _AFTER_535)
DRIVER_450 = Driver("450.248.02", 11000, _AFTER_450)
