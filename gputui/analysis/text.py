"""Numbers as people read them, for the evidence sentences in verdicts and advice."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(n: float) -> str:
    """Bytes in binary units: 512 B, 1.5 KiB, 24.0 MiB, 3.25 GiB."""
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{value:.0f} B"
            return f"{sign}{value:.2f} {unit}" if unit in ("GiB", "TiB") else f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    """A duration at the precision that matters: 45 s, 12 min, 3.5 h, 2.0 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
