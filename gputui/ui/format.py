"""Turning model values into short text for the screen: temperatures, watts, clocks, bars, levels.

Sizes, rates, percents and times come from gputui.units, as in every view.

Pure functions of their arguments (no Textual), so every widget words things the same way and the
tests can check the wording exactly. A value of ``None`` (unsupported, unknown) reads "n/a".
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.model import GpuProcess, MonitorCost
from gputui.units import NA

# Reasons that mean the GPU is being held back; idle/app/display clocks are normal life.
SLOWDOWN_WORDS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal": "HW thermal",
    "hw_power_brake": "power brake",
    "sw_thermal": "thermal",
    "sw_power_cap": "power cap",
}


def gpu_words(p: GpuProcess) -> str:
    """Where a process runs, for a sentence: "GPU 1", or "MIG 0:1" in a MIG instance (model.mig_name)."""
    return f"GPU {p.device_index}" if p.gpu_instance_id is None else f"MIG {p.gpu_name}"


def temperature(value: int | None) -> str:
    return NA if value is None else f"{value}C"


def watts(draw: float | None, limit: float | None = None) -> str:
    if draw is None:
        return NA
    if limit is None:
        return f"{draw:.0f}W"
    return f"{draw:.0f}/{limit:.0f}W"


def megahertz(value: int | None, maximum: int | None = None) -> str:
    if value is None:
        return NA
    return f"{value}MHz" if maximum is None else f"{value}/{maximum}MHz"


def monitor_cost(cost: MonitorCost | None) -> str:
    """gputui's own cost (a MonitorCost): "self 0.6% CPU · NVML 1.2ms"; "" when not measured."""
    if cost is None:
        return ""
    cpu = "…" if cost.cpu_percent is None else f"{cost.cpu_percent:.1f}%"
    nvml = "" if cost.nvml_ms is None else f" · NVML {cost.nvml_ms:.1f}ms"
    return f"self {cpu} CPU{nvml}"


def fraction(used: float | None, total: float | None) -> float | None:
    """used/total clamped to 0..1, None when either is unknown or total is zero."""
    if used is None or not total:
        return None
    return min(1.0, max(0.0, used / total))


def level(value: float | None, *, warn: float = 0.7, high: float = 0.9) -> str:
    """"low", "mid" or "high" for a 0..1 fraction; the colour a bar gets ("none" if unknown)."""
    if value is None:
        return "none"
    if value >= high:
        return "high"
    if value >= warn:
        return "mid"
    return "low"


def bar(value: float | None, width: int, *, ascii: bool = False) -> tuple[str, str]:
    """A bar ``width`` cells wide for a 0..1 fraction, as (filled, empty) parts to colour apart."""
    width = max(0, width)
    if value is None:
        return "", ("?" if ascii else "·") * width
    filled = round(value * width)
    if value > 0 and filled == 0:
        filled = 1  # a busy GPU at 1% should not look idle
    full, empty = ("#", ".") if ascii else ("█", "░")
    return full * filled, empty * (width - filled)


def slowdown(reasons: tuple[str, ...] | None) -> str:
    """Why the GPU is being slowed, in words ("power cap, thermal"), or "" at full speed."""
    if not reasons:
        return ""
    return ", ".join(SLOWDOWN_WORDS[r] for r in reasons if r in SLOWDOWN_WORDS)


def pcie_link(generation: int | None, width: int | None) -> str:
    if generation is None and width is None:
        return NA
    gen = "?" if generation is None else str(generation)
    lanes = "?" if width is None else str(width)
    return f"Gen{gen} x{lanes}"


def command_line(argv: tuple[str, ...], name: str | None = None) -> str:
    """The command as one line; falls back to the process name when argv is hidden."""
    if argv:
        return " ".join(argv)
    return f"[{name}]" if name else NA


def short_gpu_name(name: str | None) -> str:
    """Drop the vendor words that every NVIDIA name repeats ("NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3")."""
    if not name:
        return NA
    for prefix in ("NVIDIA ", "GeForce ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def resample(values: Iterable[float | None], width: int) -> list[float]:
    """At most ``width`` points, each the largest of its bucket, so a spike is never averaged away.

    Unknown values (None) are left out; an empty list means nothing known yet.
    """
    known = [v for v in values if v is not None]
    if width <= 0 or not known:
        return []
    if len(known) <= width:
        return [float(v) for v in known]
    step = len(known) / width
    return [float(max(known[int(i * step):max(int(i * step) + 1, int((i + 1) * step))]))
            for i in range(width)]


ASCII_LEVELS = " .:-=+*#%@"


def ascii_spark(values: list[float], width: int) -> str:
    """A one-line chart in plain ASCII for terminals without block characters (--ascii)."""
    if not values:
        return "." * width
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    top = len(ASCII_LEVELS) - 1
    text = "".join(ASCII_LEVELS[max(1, round((v - low) / span * top))] for v in values)
    return text.rjust(width, " ")

