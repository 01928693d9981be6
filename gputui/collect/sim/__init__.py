"""Simulated GPUs: a fake NVML library that the real pynvml talks to, driven by named scenarios.

``install(scenario)`` points ``pynvml.nvmlLib`` at the simulated driver, so the collector's own
NVML code (version checks and fallbacks included) runs unchanged for ``gputui --demo`` and the tests.
"""

from __future__ import annotations

from typing import Callable

import pynvml

from gputui.collect.sim.library import Library, Nvml
from gputui.collect.sim.machine import EPOCH, TICK, SimulatedMachine
from gputui.collect.sim.scenarios import DEMO_START, SCENARIOS

__all__ = ["DEMO_START", "EPOCH", "SCENARIOS", "TICK", "SimulatedMachine", "install", "uninstall"]


def install(scenario: str, *, seed: int = 0, clock: Callable[[], float] | None = None,
            processes: int | None = None, start: float = 0.0) -> SimulatedMachine:
    """Make pynvml talk to a simulated machine running ``scenario`` from second ``start``."""
    machine = SimulatedMachine(scenario, seed=seed, clock=clock, processes=processes, start=start)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = Library(Nvml(machine))
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
    return machine


def uninstall() -> None:
    """Put pynvml back as it was on import: no library loaded, nothing cached."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
