"""Small robust statistics shared by the trend, leak and site analyses.

Theil–Sen slopes on a bounded number of points, and detection of the drops that make a sawtooth.
Pure Python over short sequences: cheap enough to run for a thousand processes per refresh.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Theil–Sen looks at every pair, so cost grows with the square of the points: thin beyond this.
MAX_FIT_POINTS = 24


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count), as statistics.median gives it.

    Our own because the statistics module (and the fractions and decimals it loads) costs the live monitor
    about 0.1 MB of resident memory for these two lines (issue 31 item 21).
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean, summed without rounding error (statistics.mean without its module)."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def thin_indices(n: int, k: int) -> list[int]:
    """At most ``k`` indices spread evenly over ``range(n)``, always the first and the last."""
    if n <= k:
        return list(range(n))
    step = (n - 1) / (k - 1)
    return [round(i * step) for i in range(k)]


def theil_sen(xs: Sequence[float], ys: Sequence[float], max_points: int = MAX_FIT_POINTS) -> float | None:
    """The median of pairwise slopes (robust to outliers and steps); None with fewer than 2 x values."""
    n = len(xs)
    if n > max_points:
        idx = thin_indices(n, max_points)
        xs = [xs[i] for i in idx]
        ys = [ys[i] for i in idx]
        n = len(xs)
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(n - 1)
        for j in range(i + 1, n)
        if xs[j] != xs[i]
    ]
    return median(slopes) if slopes else None


def trend_z(ys: Sequence[float], max_points: int = MAX_FIT_POINTS) -> float:
    """How surely the values rise, as a z-score of Mann and Kendall's test: the pairs that rise less those
    that fall, over what chance alone gives (ties counted as neither, and left out of the variance too:
    that only makes the test stricter). Values in order of time; thinned as theil_sen thins them."""
    n = len(ys)
    if n > max_points:
        ys = [ys[i] for i in thin_indices(n, max_points)]
        n = max_points
    if n < 3:
        return 0.0
    score = sum((ys[j] > ys[i]) - (ys[j] < ys[i]) for i in range(n - 1) for j in range(i + 1, n))
    spread_ = math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    return (score - (score > 0) + (score < 0)) / spread_


def releases(values: Sequence[float], threshold: float) -> list[tuple[int, int]]:
    """Where the values fell by at least ``threshold`` from a peak: (peak index, trough index) pairs.

    Hysteresis: after a drop, the values must climb ``threshold`` above the trough before another
    drop counts, so noise around one level never counts as many releases.
    """
    found: list[tuple[int, int]] = []
    if not values or threshold <= 0:
        return found
    peak_i, trough_i = 0, 0
    falling = False
    for i, v in enumerate(values):
        if not falling:
            if v > values[peak_i]:
                peak_i = i
            elif values[peak_i] - v >= threshold:
                falling, trough_i = True, i
        elif v < values[trough_i]:
            trough_i = i
        elif v - values[trough_i] >= threshold:
            found.append((peak_i, trough_i))
            falling, peak_i = False, i
    if falling:
        found.append((peak_i, trough_i))
    return found


def settled_count(values: Sequence[float], level: float, tolerance: float) -> int:
    """How many of the latest values stay within ``tolerance`` of ``level``, counting back."""
    count = 0
    for v in reversed(values):
        if abs(v - level) > tolerance:
            break
        count += 1
    return count


def spread(values: Sequence[float]) -> float:
    """Median absolute deviation from the median: how noisy values are, ignoring outliers."""
    if not values:
        return 0.0
    mid = median(values)
    return float(median(abs(v - mid) for v in values))
