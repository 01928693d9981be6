"""Options: everything the user asked for on the command line, parsed and checked by ``gputui.cli``.

A bottom-layer module so that every mode (plain, ui, launch, the probe's demo job) can name the type
it is handed without importing the CLI above it. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# The simulated machines `--demo` offers (each is built in gputui/collect/sim/scenarios.py). Here, not
# there, so the CLI can list them without importing the simulator.
SCENARIOS = ("workstation", "training-node", "leaky", "mig", "faults", "dataparallel", "torchrun",
             "shared-k8s")

# `gputui serve`'s defaults, here so the CLI can say them without importing the exporter: this
# machine only, unless told (9403, near NVIDIA's DCGM exporter's 9400). Prometheus scrapes every 15 s
# by default: a sample every 5 s is at most a third of that old when scraped, costs a fifth
# of the live monitor's sampling (1 s), and gives the memory trends their 10 readings within a minute.
SERVE_LISTEN = "127.0.0.1:9403"
SERVE_INTERVAL = 5.0

# What `gputui` was asked to do: the monitor, a plain mode, a subcommand.
Mode = Literal["tui", "once", "json", "watch", "run", "attach", "detach", "probes", "probe", "demo-train", "serve",
               "estimate", "oom", "record", "replay"]


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
    alert_flags: tuple[tuple[str, object], ...] = ()  # the --alert-* flags given: ("oom_within", 600.0), ...
    # What alerts to raise and where to send them: a gputui.alerts.settings.AlertSettings the CLI makes of
    # the config's [alerts] and alert_flags for the modes that sample; None for the others.
    alerts: object = None
    idle_flags: tuple[tuple[str, object], ...] = ()  # --idle-* and --waste-window as given: ("idle_after", "30m")
    # When a held GPU counts as idle: a gputui.model.waste.WasteRules the CLI makes of the config's [waste] and
    # idle_flags for the modes that sample; None for the others (the defaults).
    waste: object = None
    extra: dict[str, object] = field(default_factory=dict)  # mode-specific options (demo-train, serve, estimate)
