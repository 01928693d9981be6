"""Turning model values into short text for the screen: sizes, rates, percents, bars, times.

Pure functions of their arguments (no Textual), so every widget words things the same way and the
tests can check the wording exactly. A value of ``None`` (unsupported, unknown) reads "n/a".
"""

from __future__ import annotations

import time

NA = "n/a"

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")

# Reasons that mean the GPU is being held back; idle/app/display clocks are normal life.
SLOWDOWN_WORDS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal": "HW thermal",
    "hw_power_brake": "power brake",
    "sw_thermal": "thermal",
    "sw_power_cap": "power cap",
}


def size_pair(used: float | None, total: float | None) -> str:
    """"12.3G/80.0G" in short units; "n/a" once when neither is known (not "n/a/n/a")."""
    if used is None and total is None:
        return NA
    return f"{size(used, short=True)}/{size(total, short=True)}"


def size(value: float | None, *, short: bool = False) -> str:
    """Bytes in binary units: "45.1 GiB" (or "45.1G" when short)."""
    if value is None:
        return NA
    amount = float(value)
    unit = 0
    # 1023.6 MiB reads 1.0 GiB, not 1024 MiB: the unit is the one the rounded figure fits.
    while abs(amount) >= 1023.5 and unit < len(_UNITS) - 1:
        amount /= 1024
        unit += 1
    if unit == 0:
        text = f"{int(amount)}"
    elif abs(amount) >= 100:
        text = f"{amount:.0f}"
    else:
        text = f"{amount:.1f}"
    if short:
        return text + ("" if unit == 0 else _UNITS[unit][0])
    return f"{text} {_UNITS[unit]}"


def rate(value: float | None) -> str:
    """Bytes per second: "1.2 GiB/s"."""
    return NA if value is None else size(value) + "/s"


def percent(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


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


def elapsed(seconds: float | None) -> str:
    """A duration the way ps shows it: "42:07", "3:04:05", "2d 03h"."""
    if seconds is None:
        return NA
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def monitor_cost(cost) -> str:
    """gputui's own cost (a MonitorCost): "self 0.6% CPU · NVML 1.2ms"; "" when not measured."""
    if cost is None:
        return ""
    cpu = "…" if cost.cpu_percent is None else f"{cost.cpu_percent:.1f}%"
    nvml = "" if cost.nvml_ms is None else f" · NVML {cost.nvml_ms:.1f}ms"
    return f"self {cpu} CPU{nvml}"


def clock(epoch: float | None) -> str:
    """Wall-clock time of day in the local time zone."""
    return NA if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))


def date_time(epoch: float | None) -> str:
    return NA if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


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


def resample(values, width: int) -> list[float]:
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


def span_words(seconds: float) -> str:
    """How long a chart covers: "45s", "4m", "1h 5m"."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"
