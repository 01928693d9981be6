"""Turning model values into short text for the monitor's screen: PCIe links, GPU names, charts.

Sizes, rates, percents and times come from gputui.units; temperatures, watts, clocks, bars, levels and
throttle words from gputui.analysis.vocabulary, as in --once.

Pure functions of their arguments (no Textual), so every widget words things the same way and the
tests can check the wording exactly. A value of ``None`` (unsupported, unknown) reads "n/a".
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.model import GpuProcess, MonitorCost
from gputui.units import NA


def gpu_words(p: GpuProcess) -> str:
    """Where a process runs, for a sentence: "GPU 1", or "MIG 0:1" in a MIG instance (model.mig_name)."""
    return f"GPU {p.device_index}" if p.gpu_instance_id is None else f"MIG {p.gpu_name}"


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


def pcie_link(generation: int | None, width: int | None) -> str:
    if generation is None and width is None:
        return NA
    gen = "?" if generation is None else str(generation)
    lanes = "?" if width is None else str(width)
    return f"Gen{gen} x{lanes}"


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

