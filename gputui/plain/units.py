"""Numbers as people read them: binary byte sizes, percentages, durations, clock times.

Every formatter takes ``None`` for "not reported" and gives back ``None`` so the caller decides how
to show n/a.
"""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(value: int | float | None) -> str | None:
    """``12.3GiB``, ``512MiB``, ``0B``: three significant figures at most, binary units."""
    if value is None:
        return None
    sign = "-" if value < 0 else ""
    amount, unit = _scaled(abs(value))
    if unit == 0:
        return f"{sign}{int(amount)}B"
    return f"{sign}{_three_figures(amount)}{_BYTE_UNITS[unit]}"


def size_pair(used: int | None, total: int | None) -> str | None:
    """``12.3/80.0GiB`` when both read well in the total's unit, else each in its own unit
    (``504MiB/79.6GiB``, ``137GiB/2.00TiB``), so a small figure never shows as 0.0."""
    if total is None:
        return size(used)
    _, unit = _scaled(total)
    if unit == 0:
        return f"{'n/a' if used is None else used}/{total}B"
    divisor = 1024 ** unit
    total_text = f"{total / divisor:.1f}"
    if used is None:
        return f"n/a/{total_text}{_BYTE_UNITS[unit]}"
    if _scaled(abs(used))[1] != unit:
        return f"{size(used)}/{size(total)}"
    return f"{used / divisor:.1f}/{total_text}{_BYTE_UNITS[unit]}"


def _scaled(amount: float) -> tuple[float, int]:
    """``amount`` bytes in the largest unit that keeps it at 1 or more, and that unit's index.

    A figure that would round up to 1024 of a unit (1023.96 MiB) is shown as 1.00 of the next.
    """
    amount = float(amount)
    unit = 0
    while amount >= 1023.5 and unit < len(_BYTE_UNITS) - 1:
        amount /= 1024
        unit += 1
    return amount, unit


def _three_figures(amount: float) -> str:
    if amount < 10:
        return f"{amount:.2f}"
    if amount < 100:
        return f"{amount:.1f}"
    return f"{amount:.0f}"


def percent(value: float | None, *, digits: int = 0) -> str | None:
    if value is None:
        return None
    return f"{value:.{digits}f}%"


def duration(seconds: float | None) -> str | None:
    """Elapsed time the way ps shows it: ``42s`` ``12:03`` ``1:02:03`` ``2-03:04:05``."""
    if seconds is None:
        return None
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    if minutes:
        return f"{minutes}:{secs:02d}"
    return f"{secs}s"


def step_time(seconds: float | None) -> str | None:
    """A short duration with sub-second precision: ``4.8ms``, ``0.21s``, ``12.5s``."""
    if seconds is None:
        return None
    if seconds < 1:
        return f"{seconds * 1000:.1f}ms" if seconds < 0.1 else f"{seconds:.2f}s"
    return f"{seconds:.1f}s"


def clock_time(epoch: float | None, tz: tzinfo | None = None, *, date: bool = False,
               zone: bool = False) -> str | None:
    """Local (or ``tz``) wall-clock time of an epoch timestamp, optionally with date and zone."""
    if epoch is None:
        return None
    moment = datetime.fromtimestamp(epoch, timezone.utc).astimezone(tz)
    shown = moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{shown} {moment.tzname()}" if zone and moment.tzname() else shown
