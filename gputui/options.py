"""Options: everything the user asked for on the command line, parsed and checked by ``gputui.cli``.

A bottom-layer module so that every mode (plain, ui, launch, the probe's demo job) can name the type
it is handed without importing the CLI above it. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# The simulated machines `--demo` offers (each is built in gputui/collect/sim/scenarios.py). Here, not
# there, so the CLI can list them without importing the simulator.
SCENARIOS = ("workstation", "training-node", "leaky", "mig", "faults")

# What `gputui` was asked to do: the monitor, a plain mode, a subcommand.
Mode = Literal["tui", "once", "json", "watch", "run", "attach", "probes", "probe", "demo-train"]


@dataclass(frozen=True)
class Options:
    """Everything the user asked for, parsed and checked."""

    mode: Mode = "tui"
    demo: str | None = None  # simulated scenario, None for the real NVML
    seed: int = 0
    demo_processes: int | None = None  # override the scenario's process count (benchmarks)
    interval: float | None = None  # seconds between samples; None = config or default
    watch: float | None = None  # --watch period
    json: bool = False
    only: tuple[str, ...] = ()  # NVML indices or UUIDs
    only_visible: bool = False
    users: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    ascii: bool = False
    color: bool | None = None  # None: decide from the terminal and NO_COLOR
    readonly: bool = False
    theme: str | None = None
    config: str | None = None
    command: tuple[str, ...] = ()  # for `run`
    pid: int | None = None  # for `attach` and `probe`
    hosts: tuple[str, ...] | None = None  # --hosts: None = this machine; () = the config's [hosts] list
    extra: dict[str, object] = field(default_factory=dict)  # mode-specific options (demo-train)
