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


def figures_age(read_at: float | None, read_at_step: int | None, taken_at: float) -> str:
    """How old a probe report's device figures are: the probe reads them on the training thread, at
    the steps it measures and at its next hook after a monitor asks, so they can lag the report."""
    if read_at is None:
        return "no figures read yet (the probe reads at the training loop's next step)"
    step = f"at step {read_at_step}" if read_at_step else "before the first step"
    age = max(0.0, taken_at - read_at)
    return f"figures read {step}, {'just now' if age < 1.5 else duration(age) + ' before the report'}"
