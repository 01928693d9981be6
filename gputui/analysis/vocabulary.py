"""The words, letters, glyphs and thresholds of every view: --once and the monitor say the same thing
the same way because both take it from here (numbers themselves: gputui.units).

Pure, no Textual: each renderer only lays these out and colours them its own way.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputui import units
from gputui.model import PROCESS_OK, GpuProcess
from gputui.model.record import Record

# ------------------------------------------------------------------------------ the process table


@dataclass(frozen=True, eq=False, repr=False)
class Column(Record):
    """One column of the process table: its label, the monitor's cells for it (--once fits its
    content), and where its text sits."""

    label: str
    width: int
    right: bool = False  # numbers sit right, words left
    most: int | None = None  # --once crops a longer cell to this (the monitor crops at ``width``)


COLUMNS: dict[str, Column] = {
    "host": Column("HOST", 12),  # the many-host view's
    "pid": Column("PID", 7, right=True),
    "probe": Column("P", 1),  # the monitor's probe mark
    "user": Column("USER", 8, most=10),
    "owner": Column("OWNER", 16, most=24),
    "gpu": Column("GPU", 4, right=True),
    "type": Column("TYPE", 4),
    "gpu_memory": Column("GPU MEM", 7, right=True),
    "trend": Column("TREND", 11, right=True),
    "trend_mark": Column("TREND", 5, right=True),  # narrow panes: arrow and time to OOM
    "sm": Column("SM%", 4, right=True),
    "memory_util": Column("MBW%", 4, right=True),
    "cpu": Column("CPU%", 5, right=True),
    "host_memory": Column("HOST MEM", 8, right=True),
    "elapsed": Column("ELAPSED", 8, right=True),
    "started": Column("STARTED", 19, right=True),
    "command": Column("COMMAND", 0),  # takes what is left
}

# Which columns give way first where the terminal or pane is too narrow to leave the command a
# readable width: TYPE is "C" for nearly every training job, so it says least; OWNER outlasts CPU% (on a
# shared node whose a process is matters more); the SM % goes last, after the monitor's probe marks.
GIVE_WAY = ("started", "memory_util", "type", "host_memory", "elapsed", "cpu", "owner", "user", "probe", "trend",
            "sm")

# A process's kind as NVML lists it (GpuProcess.kind), in a letter or two, as nvidia-smi's Type.
KIND_LETTERS = {"compute": "C", "graphics": "G", "compute+graphics": "C+G"}


def owner_of(p: GpuProcess) -> str:
    """The OWNER cell: the most specific of pod, container, Slurm job, unit and user ("" unknown)."""
    return p.owner.most_specific() if p.owner is not None else (p.user or "")


def command_line(argv: tuple[str, ...], name: str | None = None) -> str:
    """The command as one line; the process name in brackets when argv is hidden (as ps shows it)."""
    if argv:
        return " ".join(argv)
    return f"[{name}]" if name else units.NA


def why_not_ok(p: GpuProcess) -> str:
    """What is wrong with a process, or what is worth knowing of it, in brackets ("[zombie]"); ""
    for a process that is fine."""
    why = p.note or ("" if p.state == PROCESS_OK else p.state)
    return f"[{why}]" if why else ""


def process_cells(p: GpuProcess, now: float) -> dict[str, str]:
    """The text of each column both views show of a GPU process, sampled at ``now``."""
    why = why_not_ok(p)
    # A process we may not read (another user's, gone) is named bare before the reason, not as ps's "[name]"
    command = command_line(p.command, p.name) if p.command or not why else (p.name or "")
    return {
        "pid": str(p.pid),
        "user": p.user or units.NA,
        "owner": owner_of(p) or units.NA,
        "gpu": p.gpu_name,  # a MIG instance as "0:1" (model.mig_name)
        "type": KIND_LETTERS.get(p.kind, p.kind),
        "gpu_memory": units.size_short(p.gpu_memory),
        "sm": units.percent(p.sm_util),
        "memory_util": units.percent(p.memory_util),
        "cpu": units.percent(p.cpu_percent),
        "host_memory": units.size_short(p.host_memory),
        "elapsed": units.elapsed(None if p.started_at is None else now - p.started_at),
        "command": " ".join(part for part in (command, why) if part),
    }


# ------------------------------------------------------------------------------ letters

# A part of a probed process's memory in a letter: the monitor's probe column names the growing one, and
# the --ascii memory bar fills with them (its legend's key).
PART_LETTERS = {
    "parameters": "P", "gradients": "G", "optimizer_state": "O", "buffers": "B", "activations": "A",
    "gathered": "W",  # all-gathered Weights
    "other": "T",  # other Tensors
    "untracked": "U", "untracked_growth": "H", "cache": "C", "fragmentation": "F", "context": "X",
}
# The parts a leak verdict can find growing (LeakVerdict.category), in the order the help lists them.
GROWING_PARTS = ("parameters", "gradients", "optimizer_state", "buffers", "activations", "other", "cache",
                 "fragmentation")

# ------------------------------------------------------------------------------ throttle reasons

# Why a GPU is slowed (Device.throttle_reasons), as nvidia-smi names it, and whether the hardware
# asked for it (trouble: red) or a setting did (yellow). Idle, application and display clocks are
# normal life: saying "slowed" of them would be a false alarm on every idle card.
THROTTLE_WORDS = {
    "hw_slowdown": ("HW slowdown", True),
    "hw_thermal": ("HW thermal", True),
    "hw_power_brake": ("power brake", True),
    "sw_thermal": ("SW thermal", False),
    "sw_power_cap": ("power cap", False),
    "sync_boost": ("sync boost", False),
}


def slowdown(reasons: tuple[str, ...] | None) -> str:
    """Why the GPU is slowed, in words ("power cap, HW thermal"), or "" at full speed."""
    return ", ".join(THROTTLE_WORDS[r][0] for r in reasons or () if r in THROTTLE_WORDS)


def slowed_by_hardware(reasons: tuple[str, ...] | None) -> bool:
    return any(THROTTLE_WORDS[r][1] for r in reasons or () if r in THROTTLE_WORDS)


# ------------------------------------------------------------------------------ levels


@dataclass(frozen=True, eq=False, repr=False)
class Thresholds(Record):
    """Where a 0..1 fraction turns "mid" (yellow) and "high" (red)."""

    warn: float
    high: float


LOAD = Thresholds(0.7, 0.9)  # utilisation, CPU, fan, power, host memory and swap
# PyTorch's caching allocator keeps a training job's GPU nearly full by design: only the last few
# percent are a sign of trouble.
GPU_MEMORY = Thresholds(0.7, 0.95)
TEMPERATURE_WARN = 10  # degrees below the GPU's own slowdown temperature: "mid"; at or past it: "high"


def level(value: float | None, thresholds: Thresholds = LOAD) -> str:
    """"low", "mid" or "high" for a 0..1 fraction; "none" when unknown."""
    if value is None:
        return "none"
    if value >= thresholds.high:
        return "high"
    if value >= thresholds.warn:
        return "mid"
    return "low"


def temperature_level(temperature: int | None, slowdown_at: int | None) -> str:
    """A temperature's level against the GPU's slowdown temperature; "none" where either is unknown
    (a fixed figure would be a false alarm on cards built to run hot)."""
    if temperature is None or not slowdown_at:
        return "none"
    if temperature >= slowdown_at:
        return "high"
    return "mid" if temperature >= slowdown_at - TEMPERATURE_WARN else "low"


# ------------------------------------------------------------------------------ glyphs and units


@dataclass(frozen=True, eq=False, repr=False)
class Glyphs(Record):
    """The characters a style of output may use."""

    full: str  # a bar's filled cells
    empty: str  # its empty cells: lighter than the fill, so the fill reads first
    unknown: str  # a bar whose fraction is not known
    ellipsis: str
    degree: str
    at_most: str  # before an upper bound: an SM% the GPU's utilisation stood in for


UNICODE = Glyphs(full="█", empty="░", unknown="·", ellipsis="…", degree="°C", at_most="≤")
ASCII = Glyphs(full="#", empty=".", unknown="?", ellipsis="...", degree="C", at_most="<=")


def glyphs(ascii: bool) -> Glyphs:
    return ASCII if ascii else UNICODE


def bar(value: float | None, width: int, shown: Glyphs = UNICODE) -> tuple[str, str]:
    """A bar ``width`` cells wide for a 0..1 fraction, as (filled, empty) parts to colour apart."""
    width = max(0, width)
    if value is None:
        return "", shown.unknown * width
    value = min(1.0, max(0.0, value))
    filled = round(value * width)
    if value > 0 and filled == 0:
        filled = 1  # a busy GPU at 1% should not look idle
    return shown.full * filled, shown.empty * (width - filled)


def temperature(value: int | None, shown: Glyphs = UNICODE) -> str:
    return units.NA if value is None else f"{value}{shown.degree}"


def watts(draw: float | None, limit: float | None = None) -> str:
    """ "402/450W", "402W"; "n/a/450W" where only the limit is known."""
    if draw is None:
        return units.NA if limit is None else f"{units.NA}/{limit:.0f}W"
    return f"{draw:.0f}W" if limit is None else f"{draw:.0f}/{limit:.0f}W"


def megahertz(value: int | None, maximum: int | None = None) -> str:
    if value is None:
        return units.NA
    return f"{value}MHz" if maximum is None else f"{value}/{maximum}MHz"
