"""What the collector asks of the psutil it is handed: the real module, or the simulated machine's
``SimPsutil`` (``--demo``, tests). Protocols, so either one is checked against the same list.

Only what gputui calls is here; the real psutil (its typeshed stubs) satisfies these as it is.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol


class CpuTimes(Protocol):
    @property
    def user(self) -> float: ...

    @property
    def system(self) -> float: ...


class MemoryInfo(Protocol):
    @property
    def rss(self) -> int: ...


class VirtualMemory(Protocol):
    @property
    def total(self) -> int: ...

    @property
    def available(self) -> int: ...


class SwapMemory(Protocol):
    @property
    def total(self) -> int: ...

    @property
    def used(self) -> int: ...


class PsProcess(Protocol):
    """One process, as ``psutil.Process(pid)`` gives it."""

    def oneshot(self) -> AbstractContextManager[None]: ...

    def cpu_times(self) -> CpuTimes: ...

    def memory_info(self) -> MemoryInfo: ...

    def status(self) -> str: ...

    def create_time(self) -> float: ...

    def name(self) -> str: ...

    def username(self) -> str: ...

    def ppid(self) -> int: ...

    def cmdline(self) -> list[str]: ...

    def environ(self) -> dict[str, str]: ...


class Psutil(Protocol):
    """The psutil module, as far as gputui uses it."""

    @property
    def NoSuchProcess(self) -> type[Exception]: ...  # noqa: N802 - psutil's names

    @property
    def ZombieProcess(self) -> type[Exception]: ...  # noqa: N802

    @property
    def AccessDenied(self) -> type[Exception]: ...  # noqa: N802

    @property
    def STATUS_ZOMBIE(self) -> str: ...  # noqa: N802

    def Process(self, pid: int) -> PsProcess: ...  # noqa: N802

    def cpu_count(self) -> int | None: ...

    def cpu_percent(self, interval: float | None = None) -> float: ...

    def virtual_memory(self) -> VirtualMemory: ...

    def swap_memory(self) -> SwapMemory: ...

    def getloadavg(self) -> tuple[float, float, float]: ...

    def boot_time(self) -> float: ...
