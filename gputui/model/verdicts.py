"""What the analysis concludes: memory trends, leak verdicts, growing allocation sites, advice.

Frozen dataclasses produced by ``gputui.analysis`` and rendered by the UI and plain output. Sizes are
bytes, rates bytes per second or per step, times seconds. Pure data: imports only the probe's category names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from gputui.model.probe import TENSOR_CATEGORIES
from gputui.model.record import Record

# ProcessTrend.verdict values
TrendVerdict = Literal["unknown", "steady", "warming_up", "sawtooth", "growing"]
TREND_UNKNOWN: Final = "unknown"  # too little history to judge
TREND_STEADY: Final = "steady"
TREND_WARMING_UP: Final = "warming_up"  # grew, and is flattening or has just flattened
TREND_SAWTOOTH: Final = "sawtooth"  # grows and is released, again and again
TREND_GROWING: Final = "growing"  # keeps growing: a leak, or a job that will not fit
TREND_VERDICTS: tuple[TrendVerdict, ...] = (
    TREND_UNKNOWN, TREND_STEADY, TREND_WARMING_UP, TREND_SAWTOOTH, TREND_GROWING,
)

# LeakVerdict.state values
LeakState = Literal["collecting", "clean", "warming_up", "leak", "cache_growth", "fragmentation"]
LEAK_COLLECTING: Final = "collecting"  # not enough training steps seen yet
LEAK_CLEAN: Final = "clean"
LEAK_WARMING_UP: Final = "warming_up"  # grew over the first steps, has not been flat for long yet
LEAK_LEAK: Final = "leak"  # allocated memory grows step after step
LEAK_CACHE_GROWTH: Final = "cache_growth"  # reserved grows while allocated stays flat
LEAK_FRAGMENTATION: Final = "fragmentation"  # free bytes stuck in split blocks grow, the allocator retries
LEAK_STATES: tuple[LeakState, ...] = (
    LEAK_COLLECTING, LEAK_CLEAN, LEAK_WARMING_UP, LEAK_LEAK, LEAK_CACHE_GROWTH, LEAK_FRAGMENTATION,
)
LEAK_GROWING: tuple[LeakState, ...] = (LEAK_LEAK, LEAK_CACHE_GROWTH, LEAK_FRAGMENTATION)  # memory grows

# CategoryGrowth.name values: the probe's tensor categories, then what the allocator holds beyond them.
CATEGORIES = (*TENSOR_CATEGORIES, "cache", "fragmentation")

# Advice.severity values, most urgent first.
Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

_MIB = 1 << 20


@dataclass(frozen=True, eq=False, repr=False)
class ProcessTrend(Record):
    """How one GPU process's NVML memory moves over the monitor's recent history."""

    verdict: TrendVerdict
    rate: float | None = None  # robust slope over the recent window, bytes/s; None when unknown
    level: int | None = None  # the latest known reading, bytes
    samples: int = 0  # known readings in the history
    span: float = 0.0  # seconds the history covers
    releases: int = 0  # times the memory dropped back noticeably (sawtooth cycles)
    time_to_oom: float | None = None  # seconds until the device is full at this rate (growing only)
    computed_at: float | None = None  # time of the newest reading used

    @property
    def mib_per_min(self) -> float | None:
        """The rate in MiB per minute, the unit people read."""
        return None if self.rate is None else self.rate * 60.0 / _MIB


@dataclass(frozen=True, eq=False, repr=False)
class CategoryGrowth(Record):
    """How one category of a probed process's memory moves per training step."""

    name: str  # one of CATEGORIES
    bytes_per_step: float  # robust slope over the analysed steps
    level: int | None = None  # at the end of the latest step


@dataclass(frozen=True, eq=False, repr=False)
class LeakVerdict(Record):
    """Whether a probed training job leaks, judged per step at the same point of every step."""

    state: LeakState
    reason: str = ""  # the evidence in one sentence, with numbers
    device: str | None = None  # the device judged ("cuda:0", "cpu")
    steps_seen: int = 0  # steps with an allocated figure
    first_step: int | None = None
    last_step: int | None = None
    window_steps: int | None = None  # steps the slopes were fitted over (the readings may skip some)
    allocated: int | None = None  # at the end of the latest step
    reserved: int | None = None
    allocated_per_step: float | None = None  # robust slope over the recent steps
    reserved_per_step: float | None = None
    inactive_split_per_step: float | None = None
    retries_added: int | None = None  # alloc retries during the recent steps
    category: str | None = None  # what grows (leak, cache_growth, fragmentation): one of CATEGORIES
    growth: tuple[CategoryGrowth, ...] = ()  # every category with a known figure, fastest-growing first
    warmup_steps: int | None = None  # steps it took to settle (warming_up, clean after warm-up)
    step_time: float | None = None  # median seconds per step
    oom_step: int | None = None  # the step during which the device runs out at this rate
    oom_in: float | None = None  # seconds from the latest step's end to that step
    oom_at: float | None = None  # the same as seconds since the epoch
    # CPU-only jobs, which have no allocator figures: the process's resident memory at the end of the
    # latest step, and the robust slope per step of what it holds beyond the tracked tensors (the
    # "other" category's growth, with category "other" when that is the leak).
    host_memory: int | None = None
    host_other_per_step: float | None = None
    # CPU-only jobs: how much the host memory beyond the tracked tensors grew from the measured step
    # ``untracked_since`` to the latest (bytes): what the probe cannot attribute. None below noise.
    untracked_growth: int | None = None
    untracked_since: int | None = None
    # While evidence is gathered (collecting, warming_up): how many more steps the verdict needs.
    steps_needed: int | None = None

    @property
    def growth_per_step(self) -> float | None:
        """Bytes per step of what grows in a growing state: allocated memory (leak), reserved memory
        (cache growth), free bytes split in reserved blocks (fragmentation); None in the others."""
        return {LEAK_LEAK: self.allocated_per_step, LEAK_CACHE_GROWTH: self.reserved_per_step,
                LEAK_FRAGMENTATION: self.inactive_split_per_step}.get(self.state)

    def seconds_to_oom(self, now: float | None = None) -> float | None:
        """Seconds until the forecast OOM, counted from ``now`` where given (the views count from the
        snapshot's time, not from the latest step's end); None without a forecast."""
        if self.oom_at is not None and now is not None:
            return max(0.0, self.oom_at - now)
        return self.oom_in


@dataclass(frozen=True, eq=False, repr=False)
class GrowingSite(Record):
    """An allocation site whose live bytes grow across the recorded steps."""

    where: str  # "train.py:42 in train_step"
    bytes_per_step: float  # robust slope over the recorded steps
    growth: int  # live bytes at the last recorded step minus at the first
    live_bytes: int  # at the last recorded step
    steps: int  # recorded steps it was judged on
    stack: tuple[str, ...] = ()  # innermost last


@dataclass(frozen=True, eq=False, repr=False)
class Advice(Record):
    """One concrete suggestion: what was seen, what to change, what it would save."""

    kind: str  # stable id of the rule, e.g. "keep-graph", "expandable-segments"
    title: str
    detail: str  # what the analysis saw, in numbers
    action: str  # what to change; may hold a code snippet
    severity: Severity = "info"  # most urgent first: SEVERITIES
    estimated_saving: int | None = None  # bytes, when it can be estimated
    rank: int = 0  # 1 = the first thing to do
