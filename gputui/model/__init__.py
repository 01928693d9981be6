"""The shared vocabulary of gputui: frozen dataclasses that every layer speaks.

Pure data: nothing here imports another gputui package, textual, torch, psutil or pynvml.
"""

from gputui.model.codec import from_jsonable, to_jsonable
from gputui.model.gpu import (
    COMPUTE_MODES,
    PROCESS_DENIED,
    PROCESS_GONE,
    PROCESS_OK,
    PROCESS_UNMAPPED,
    PROCESS_ZOMBIE,
    THROTTLE_REASONS,
    Device,
    Driver,
    GpuProcess,
    Host,
    HostProcess,
    MigInstance,
    Snapshot,
)
from gputui.model.probe import (
    AllocatorStats,
    AllocationSite,
    MemoryCategories,
    OomRecord,
    ProbeDevice,
    ProbeReport,
    StepRecord,
)

__all__ = [
    "COMPUTE_MODES",
    "PROCESS_DENIED",
    "PROCESS_GONE",
    "PROCESS_OK",
    "PROCESS_UNMAPPED",
    "PROCESS_ZOMBIE",
    "THROTTLE_REASONS",
    "AllocationSite",
    "AllocatorStats",
    "Device",
    "Driver",
    "GpuProcess",
    "Host",
    "HostProcess",
    "MemoryCategories",
    "MigInstance",
    "OomRecord",
    "ProbeDevice",
    "ProbeReport",
    "Snapshot",
    "StepRecord",
    "from_jsonable",
    "to_jsonable",
]
