"""The monitor's memory of the recent past: bounded time series per device and per GPU process.

The monitor feeds every Snapshot in; charts and trend analysis read immutable Series out. Old points
fall off by age (``span`` seconds) and by count, so memory stays bounded however long it runs.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, TypeVar

from gputui.model import Snapshot
from gputui.model.record import Record

DEVICE_METRICS = ("gpu_util", "memory_util", "memory_used", "power_draw", "temperature")
PROCESS_METRICS = ("gpu_memory", "sm_util", "cpu_percent", "host_memory")
FRACTIONAL = frozenset({"power_draw", "cpu_percent"})  # the metrics the model keeps as floats, not ints
# Whole numbers that fit a byte (percentages, °C): one byte a sample, not eight. A reading that does not
# fit (a driver's odd value) widens that column for good, losing nothing.
BYTE_SIZED = frozenset({"gpu_util", "memory_util", "sm_util", "temperature"})


def _column(metric: str) -> array[Any]:
    return array("d" if metric in FRACTIONAL else "B" if metric in BYTE_SIZED else "q")

# A GPU process is one pid on one device; a pid on two GPUs has two histories.
ProcessKey = tuple[int, int]
K = TypeVar("K", int, ProcessKey)  # what a track is kept under: a device index or a ProcessKey


@dataclass(frozen=True, eq=False, repr=False)
class Series(Record):
    """Samples of one metric, oldest first. ``values[i]`` is None where the metric was unknown."""

    times: tuple[float, ...] = ()
    values: tuple[float | None, ...] = ()

    def __len__(self) -> int:
        return len(self.times)

    def known(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The samples whose value is known, as (times, values)."""
        pairs = [(t, v) for t, v in zip(self.times, self.values) if v is not None]
        return tuple(t for t, _ in pairs), tuple(v for _, v in pairs)


class _Track:
    """One entity's samples: shared timestamps and one column per metric.

    The columns are C arrays, 8 bytes a sample (1 for a percentage): a deque of Python numbers took 32-40, and a 64-slot
    block from its first sample on (0.5 MB for 64 processes ten seconds in, 6 MB ten minutes in; issue
    31 item 21). An unknown value is kept as 0, its sample number in ``unknown``."""

    __slots__ = ("times", "columns", "unknown", "dropped", "keep_series", "_series")

    def __init__(self, metrics: tuple[str, ...], keep_series: bool = True) -> None:
        self.times = array("d")
        self.columns: dict[str, array[Any]] = {m: _column(m) for m in metrics}
        self.unknown: dict[str, list[int]] = {}  # metric -> the sample numbers where it was None
        self.dropped = 0  # samples dropped from the front: times[i] is sample number dropped + i
        # Series handed out since the last change: charts ask for the same ones many times per
        # refresh, and copying 600-point tuples for 1000 processes adds up. A history read once per
        # sample (the trends') keeps none: kept, they were a third of its memory ten minutes in.
        self.keep_series = keep_series
        self._series: dict[str, Series] = {}

    def add(self, t: float, row: object) -> None:
        self._series.clear()
        number = self.dropped + len(self.times)
        self.times.append(t)
        for metric, column in self.columns.items():
            value = getattr(row, metric)
            if value is None:
                self.unknown.setdefault(metric, []).append(number)
                value = 0
            try:
                column.append(value)
            except (TypeError, OverflowError):  # a fraction where whole numbers were kept, or too big
                wider = "q" if isinstance(value, int) and column.typecode == "B" and -(1 << 63) <= value < 1 << 63 \
                    else "d"
                self.columns[metric] = array(wider, column)
                self.columns[metric].append(value)

    def trim(self, oldest: float, max_points: int) -> None:
        """Drop the samples past ``max_points``, then those older than ``oldest``, from the front."""
        drop = max(0, len(self.times) - max_points)
        while drop < len(self.times) and self.times[drop] < oldest:
            drop += 1
        if not drop:
            return
        self._series.clear()
        del self.times[:drop]
        for column in self.columns.values():
            del column[:drop]
        self.dropped += drop
        for metric, numbers in list(self.unknown.items()):
            del numbers[:bisect_left(numbers, self.dropped)]
            if not numbers:
                del self.unknown[metric]

    def series(self, metric: str) -> Series:
        series = self._series.get(metric)
        if series is None:
            values: list[float | None] = self.columns[metric].tolist()
            for number in self.unknown.get(metric, ()):
                values[number - self.dropped] = None
            # One tuple of times for all the series handed out since the last change, as with deques.
            times = next(iter(self._series.values())).times if self._series else tuple(self.times)
            series = Series(times, tuple(values))
            if self.keep_series:
                self._series[metric] = series
        return series


class History:
    """Bounded history of every device and GPU process seen in the snapshots added."""

    def __init__(self, span: float = 600.0, max_points: int = 3600, *,
                 device_metrics: tuple[str, ...] = DEVICE_METRICS,
                 process_metrics: tuple[str, ...] = PROCESS_METRICS, keep_series: bool = True) -> None:
        """``device_metrics`` / ``process_metrics``: the metrics kept (a history that one analysis reads
        keeps only what it reads; none: no tracks of that kind at all). ``keep_series``: keep the Series
        handed out until the next sample, for readers that ask for the same one more than once."""
        self.span = span
        self.max_points = max_points
        self.device_metrics = device_metrics
        self.process_metrics = process_metrics
        self.keep_series = keep_series
        self._devices: dict[int, _Track] = {}
        self._processes: dict[ProcessKey, _Track] = {}
        self.latest: float | None = None

    def add(self, snapshot: Snapshot) -> None:
        """Append one snapshot's readings and forget what is older than the span."""
        t = snapshot.taken_at
        self.latest = t
        if self.device_metrics:
            for device in snapshot.devices:
                self._track(self._devices, device.index, self.device_metrics).add(t, device)
        if self.process_metrics:
            for proc in snapshot.processes:
                key = (proc.pid, proc.device_index)
                self._track(self._processes, key, self.process_metrics).add(t, proc)
        oldest = t - self.span
        _trim(self._devices, oldest, self.max_points)
        _trim(self._processes, oldest, self.max_points)

    def device(self, index: int, metric: str) -> Series:
        track = self._devices.get(index)
        return track.series(metric) if track else Series()

    def process(self, key: ProcessKey, metric: str) -> Series:
        track = self._processes.get(key)
        return track.series(metric) if track else Series()

    def process_keys(self) -> tuple[ProcessKey, ...]:
        return tuple(self._processes)

    def _track(self, tracks: dict[K, _Track], key: K, metrics: tuple[str, ...]) -> _Track:
        track = tracks.get(key)
        if track is None:
            track = tracks[key] = _Track(metrics, self.keep_series)
        return track


def _trim(tracks: dict[K, _Track], oldest: float, max_points: int) -> None:
    """Drop the samples older than ``oldest`` or past ``max_points``, and the tracks left with none."""
    for key in list(tracks):
        track = tracks[key]
        track.trim(oldest, max_points)
        if not track.times:
            del tracks[key]
