"""Deterministic, smooth pseudo-random signals for the simulated machine.

Everything the simulator makes up comes from here: a pure function of (seed, stream name, time), so the
same seed and clock always give the same numbers and no global random state is touched.
"""

from __future__ import annotations

import math
import zlib

_MASK = (1 << 64) - 1


def stream(*parts: object) -> int:
    """A stable integer id for a named noise stream (Python's own str hash changes per process)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def mix(*values: int) -> int:
    """A 64-bit hash of some integers (splitmix64 steps): the same inputs give the same bits."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK)) & _MASK
        h = (h + 0x9E3779B97F4A7C15) & _MASK
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
        h ^= h >> 31
    return h


def uniform(*values: int) -> float:
    """A number in [0, 1) hashed from integers."""
    return mix(*values) / 2.0**64


def noise(seed: int, key: int, t: float, period: float = 4.0) -> float:
    """Smooth value noise in [-1, 1]: random knots every ``period`` seconds, eased in between."""
    x = t / period
    k = math.floor(x)
    f = x - k
    a = uniform(seed, key, k) * 2.0 - 1.0
    b = uniform(seed, key, k + 1) * 2.0 - 1.0
    f = f * f * (3.0 - 2.0 * f)  # smoothstep: no kinks at the knots
    return a + (b - a) * f


def ramp(t: float, start: float, end: float) -> float:
    """0 before ``start``, 1 after ``end``, eased in between."""
    if t <= start:
        return 0.0
    if t >= end:
        return 1.0
    f = (t - start) / (end - start)
    return f * f * (3.0 - 2.0 * f)


def clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value
