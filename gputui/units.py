"""Numbers as people read them, in one module for every view: sizes, rates, durations, clock times.

Sizes follow one rule everywhere: binary units, three significant figures, in the largest unit the
rounded figure fits (1023.6 MiB reads 1.00 GiB, never 1024 MiB). They come in three widths, for
sentences and legends (``size``: "3.25 GiB"), table cells (``size_compact``: "3.25GiB") and the live
monitor's narrow cells (``size_short``: "3.2G", one figure fewer below 10). ``None`` means "not
reported": every formatter gives ``NA`` for it, never "0".
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone, tzinfo

NA = "n/a"

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _scaled(amount: float) -> tuple[float, int]:
    """``amount`` bytes in the largest unit that keeps it at 1 or more, and that unit's index; a
    figure that would round up to 1024 of a unit is 1.00 of the next."""
    amount = float(amount)
    unit = 0
    while amount >= 1023.5 and unit < len(_UNITS) - 1:
        amount /= 1024
        unit += 1
    return amount, unit


def _figures(value: float) -> tuple[str, str]:
    """(number, unit) of a byte count: "3.25", "GiB"; "512", "B"."""
    sign = "-" if value < 0 else ""
    amount, unit = _scaled(abs(value))
    if unit == 0:
        return f"{sign}{int(amount)}", _UNITS[0]
    if amount < 10:
        return f"{sign}{amount:.2f}", _UNITS[unit]
    if amount < 100:
        return f"{sign}{amount:.1f}", _UNITS[unit]
    return f"{sign}{amount:.0f}", _UNITS[unit]


def size(value: float | None) -> str:
    """For sentences and legends: "3.25 GiB", "512 MiB", "0 B"."""
    if value is None:
        return NA
    number, unit = _figures(value)
    return f"{number} {unit}"


# Sizes people type: binary with "i" or a bare letter (nvidia-smi's "80G", "24000MiB"), decimal with
# "B" after the letter ("16GB", the way cards and the rule of thumb's "13.6 GB" are written).
_TYPED = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str) -> int:
    """Bytes in "16GiB", "80G", "24000MiB", "16GB", "1.5 TiB"; ValueError for anything else."""
    number = text.strip().rstrip("BbIiKkMmGgTt ")
    unit = text.strip()[len(number):].strip().lower()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is no size: write e.g. 16GiB, 80G, 24000MiB or 16GB") from None
    if unit not in _TYPED or not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r} is no size: write e.g. 16GiB, 80G, 24000MiB or 16GB")
    return int(value * _TYPED[unit])


_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?)([hms]))+")


def parse_duration(text: str) -> float | None:
    """Seconds in "90s", "5m", "1h30m", "2.5" (seconds); None for anything else."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d*)?", text):
        return float(text)
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _DURATION_UNITS[unit] for n, unit in re.findall(r"(\d+(?:\.\d*)?)([hms])", text))


def size_compact(value: float | None) -> str:
    """For table cells: "3.25GiB", "512MiB", "0B"."""
    if value is None:
        return NA
    number, unit = _figures(value)
    return number + unit


def size_short(value: float | None) -> str:
    """For the live monitor's narrowest cells, one decimal below 100: "3.2G", "45.1G", "512M", "0"."""
    if value is None:
        return NA
    sign = "-" if value < 0 else ""
    amount, unit = _scaled(abs(value))
    if unit == 0:
        return f"{sign}{int(amount)}"
    return f"{sign}{amount:.1f}{_UNITS[unit][0]}" if amount < 100 else f"{sign}{amount:.0f}{_UNITS[unit][0]}"


def size_pair(used: float | None, total: float | None) -> str:
    """Used of total in the total's unit, ``12.3/80.0GiB``, when both read well in it; else each in
    its own unit (``504MiB/79.6GiB``), so a small figure never shows as 0.0."""
    if total is None:
        return size_compact(used)
    _, unit = _scaled(total)
    if unit == 0:
        return f"{NA if used is None else int(used)}/{int(total)}B"
    divisor = 1024 ** unit
    total_text = f"{total / divisor:.1f}"
    if used is None:
        return f"{NA}/{total_text}{_UNITS[unit]}"
    if _scaled(abs(used))[1] != unit:
        return f"{size_compact(used)}/{size_compact(total)}"
    return f"{used / divisor:.1f}/{total_text}{_UNITS[unit]}"


def size_pair_short(used: float | None, total: float | None) -> str:
    """"12.3G/80.0G"; "n/a" once when neither is known (not "n/a/n/a")."""
    if used is None and total is None:
        return NA
    return f"{size_short(used)}/{size_short(total)}"


def rate(value: float | None) -> str:
    """Bytes per second: "1.21 GiB/s"."""
    return NA if value is None else size(value) + "/s"


def percent(value: float | None, *, digits: int = 0) -> str:
    return NA if value is None else f"{value:.{digits}f}%"


def elapsed(seconds: float | None) -> str:
    """How long a process has run, as ps counts it: "42s", "12:03", "1:02:03", "2d 03h"."""
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
    if minutes:
        return f"{minutes}:{secs:02d}"
    return f"{secs}s"


def step_time(seconds: float | None) -> str:
    """A training step's time, sub-second: "4.8ms", "0.21s", "12.5s"."""
    if seconds is None:
        return NA
    if seconds < 1:
        return f"{seconds * 1000:.1f}ms" if seconds < 0.1 else f"{seconds:.2f}s"
    return f"{seconds:.1f}s"


# A stretch of time in the largest unit it fills: (below this many seconds, the unit's seconds, how).
_SPAN = ((90, 1, "{:.0f} s"), (90 * 60, 60, "{:.0f} min"), (48 * 3600, 3600, "{:.1f} h"),
         (math.inf, 86400, "{:.1f} days"))
_SPAN_SHORT = ((100, 1, "{:.0f}s"), (100 * 60, 60, "{:.0f}m"), (48 * 3600, 3600, "{:.0f}h"),
               (math.inf, 86400, "{:.0f}d"))


def span(seconds: float) -> str:
    """A stretch of time in a sentence, at the precision that matters: "45 s", "12 min", "3.5 h",
    "2.0 days"."""
    return _in_unit(seconds, _SPAN)


def span_short(seconds: float) -> str:
    """A stretch of time in a few cells (a forecast, a chart's width): "85s", "14m", "5h", "3d"."""
    return _in_unit(seconds, _SPAN_SHORT)


def _in_unit(seconds: float, units: tuple[tuple[float, int, str], ...]) -> str:
    for below, unit, text in units:
        if seconds < below:
            return text.format(seconds / unit)
    return units[-1][2].format(seconds / units[-1][1])  # (NaN)


def indices(numbers: tuple[int, ...]) -> str:
    """"0-3,6": sorted numbers with their runs shortened."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def clock_time(epoch: float | None, tz: tzinfo | None = None, *, date: bool = False,
               zone: bool = False) -> str:
    """Wall-clock time of an epoch timestamp in the local (or ``tz``) time zone, optionally with the
    date and the zone's name: "09:02:00", "2026-01-05 09:02:00 UTC"."""
    if epoch is None:
        return NA
    moment = datetime.fromtimestamp(epoch, timezone.utc).astimezone(tz)
    shown = moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{shown} {moment.tzname()}" if zone and moment.tzname() else shown
