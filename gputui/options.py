"""Options: everything the user asked for, on the command line (parsed and checked by ``gputui.cli``)
and in the config file (``gputui.config.resolve`` puts it under the flags), typed per mode.

Low in the layers, over the vocabulary only, so that every mode (plain, ui, launch, the probe's demo job)
can name the type it is handed without importing the CLI or the config above it. Pure data.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

from gputui.model.alert import AlertSettings
from gputui.model.waste import WasteRules

# The simulated machines `--demo` offers (each is built in gputui/collect/sim/scenarios.py). Here, not
# there, so the CLI can list them without importing the simulator.
SCENARIOS = ("workstation", "training-node", "leaky", "mig", "faults", "dataparallel", "torchrun",
             "shared-k8s")

THEMES = ("dark", "light")  # the live monitor's colour themes (--theme, the config's theme)

# `gputui serve`'s defaults, here so the CLI can say them without importing the exporter: this
# machine only, unless told (9403, near NVIDIA's DCGM exporter's 9400). Prometheus scrapes every 15 s
# by default: a sample every 5 s is at most a third of that old when scraped, costs a fifth
# of the live monitor's sampling (1 s), and gives the memory trends their 10 readings within a minute.
SERVE_LISTEN = "127.0.0.1:9403"
SERVE_INTERVAL = 5.0

# `gputui web`'s defaults: this machine only, on the exporter's next port. Each browser session is a monitor
# process of its own (the terminal monitor's cost: 47 MB and 3 to 4 % of a core, docs/web.md), so a handful at once;
# one nobody has touched for half an hour is closed (a tab left open in a browser samples for nobody).
WEB_LISTEN = "127.0.0.1:9404"
WEB_SESSIONS = 4
WEB_IDLE = 1800.0

# What `gputui` was asked to do: the monitor, a plain mode, a subcommand.
Mode = Literal["tui", "once", "json", "watch", "run", "attach", "detach", "probes", "probe", "demo-train", "serve",
               "estimate", "oom", "record", "replay", "web"]


@dataclass(frozen=True)
class ServeOptions:
    """``gputui serve``'s own flags."""

    listen: str | None = None  # ADDR:PORT; None: SERVE_LISTEN
    basic_auth_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    hash_password: str | None = None  # NAME: print a users file's line for NAME and exit


@dataclass(frozen=True)
class WebOptions:
    """``gputui web``'s flags (``gputui replay FILE --web``'s too): where the browser view listens, who may open
    it, how many sessions at once and for how long idle."""

    listen: str | None = None  # ADDR:PORT; None: WEB_LISTEN
    basic_auth_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    sessions: int = WEB_SESSIONS  # browser sessions at once (a monitor process each)
    idle: float = WEB_IDLE  # seconds without a key, a click or a resize before a session is closed
    argv: tuple[str, ...] = ()  # the command line as given: each session runs gputui with it, and --web-session
    session: bool = False  # --web-session (which gputui web adds): this process is one browser tab's monitor


@dataclass(frozen=True)
class RecordOptions:
    """``gputui record FILE``'s."""

    file: str = ""
    duration: float | None = None  # seconds; None: until interrupted
    max_size: int | None = None  # bytes before FILE rotates; None: the recorder's default


@dataclass(frozen=True)
class ReplayOptions:
    """``gputui replay FILE``'s."""

    file: str = ""
    at: str | None = None  # --at TIME: the sample printed (None: the last)
    print: bool = False  # --once or --json: print one sample instead of opening the monitor


@dataclass(frozen=True)
class EstimateOptions:
    """``gputui estimate SCRIPT:FUNCTION``'s."""

    job: str = ""
    batch_size: int | None = None
    optimizer: str | None = None  # None: FUNCTION's, else adam
    precision: str = "fp32"
    checkpointing: bool = False
    device_memory: int | None = None  # bytes, --device-memory
    gpu: int | None = None  # --gpu INDEX: that GPU's memory
    max_batch: bool = False
    zero_gpus: int = 8
    fsdp2: bool = False
    what_if: bool = True  # False: --no-what-if


@dataclass(frozen=True)
class DemoTrainOptions:
    """``gputui demo-train``'s."""

    steps: int | None = None  # None: until interrupted
    leak: str | None = None  # graph, outputs or cache; None: no leak


@dataclass(frozen=True)
class Options:
    """Everything the user asked for, parsed and checked; what the config file adds is filled in by
    gputui.config.resolve for the modes that read it (the monitor's and those that sample)."""

    mode: Mode = "tui"
    demo: str | None = None  # simulated scenario, None for the real NVML
    seed: int = 0
    demo_processes: int | None = None  # override the scenario's process count (benchmarks)
    # Seconds between samples: the flag's, else the config's (the live monitor's only); None: the mode's default.
    interval: float | None = None
    watch: float | None = None  # --watch period
    json: bool = False
    only: tuple[str, ...] = ()  # NVML indices or UUIDs
    only_visible: bool = False
    users: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    ascii: bool = False
    color: bool | None = None  # None: decide from the terminal and NO_COLOR
    readonly: bool = False
    theme: str | None = None  # the flag's, else the config's; None: the monitor's default (dark)
    config: str | None = None  # --config PATH
    columns: tuple[str, ...] | None = None  # the config's process table columns; None: the default set
    keys: Mapping[str, str] = field(default_factory=dict)  # the config's [keys]: binding id -> key(s)
    command: tuple[str, ...] = ()  # for `run`
    pid: int | None = None  # for `attach` and `probe`
    file: str | None = None  # for `oom`: the report (None: the latest)
    hosts: tuple[str, ...] | None = None  # --hosts: None = this machine; () = the config's [hosts] list
    alert_flags: tuple[tuple[str, object], ...] = ()  # the --alert-* flags given: ("oom_within", 600.0), ...
    # What alerts to raise and where to send them: the config's [alerts] with alert_flags over them.
    alerts: AlertSettings = field(default_factory=AlertSettings)
    idle_flags: tuple[tuple[str, object], ...] = ()  # --idle-* and --waste-window as given: ("idle_after", "30m")
    # When a held GPU counts as idle: the config's [waste] with idle_flags over it.
    waste: WasteRules = field(default_factory=WasteRules)
    serve: ServeOptions = field(default_factory=ServeOptions)
    web: WebOptions = field(default_factory=WebOptions)
    record: RecordOptions = field(default_factory=RecordOptions)
    replay: ReplayOptions = field(default_factory=ReplayOptions)
    estimate: EstimateOptions = field(default_factory=EstimateOptions)
    demo_train: DemoTrainOptions = field(default_factory=DemoTrainOptions)


def settings_table(table: object, name: str, known: Collection[str], bad: Callable[[str, str], Exception],
                   example: str | None = None) -> dict:
    """The config file's ``[name]`` table, checked to be one and to hold known settings only; ``bad(key,
    why)`` makes the error (``example``: a table as it should be, for the message)."""
    if not isinstance(table, dict):
        raise bad(name, f"must be a table, e.g. {example}" if example else f"must be a table: [{name}]")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise bad(f"{name}.{unknown[0]}", f"is not a setting (known: {', '.join(known)})")
    return table
