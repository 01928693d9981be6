"""What the analysis concludes: memory trends, leak verdicts, growing allocation sites, advice.

Frozen dataclasses produced by ``gputui.analysis`` and rendered by the UI and plain output. Sizes are
bytes, rates bytes per second or per step, times seconds. Pure data: imports only the probe's category names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.fielddoc import doc
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

    verdict: TrendVerdict = field(metadata=doc("how the memory moves", enum=TREND_VERDICTS))
    rate: float | None = field(default=None, metadata=doc(
        "robust slope over the recent window (bytes/s); null when unknown"))
    level: int | None = field(default=None, metadata=doc("the latest known reading (bytes)", minimum=0))
    samples: int = field(default=0, metadata=doc("known readings in the history", minimum=0))
    span: float = field(default=0.0, metadata=doc("seconds the history covers", minimum=0))
    releases: int = field(default=0, metadata=doc(
        "times the memory dropped back noticeably (sawtooth cycles)", minimum=0))
    time_to_oom: float | None = field(default=None, metadata=doc(
        "seconds until the device is full at this rate (`growing` only)", minimum=0))
    computed_at: float | None = field(default=None, metadata=doc(
        "time of the newest reading used (seconds since the epoch)"))

    @property
    def mib_per_min(self) -> float | None:
        """The rate in MiB per minute, the unit people read."""
        return None if self.rate is None else self.rate * 60.0 / _MIB


@dataclass(frozen=True, eq=False, repr=False)
class CategoryGrowth(Record):
    """How one category of a probed process's memory moves per training step."""

    name: str = field(metadata=doc("the category", enum=CATEGORIES))
    bytes_per_step: float = field(metadata=doc("robust slope over the analysed steps (bytes/step)"))
    level: int | None = field(default=None, metadata=doc("at the end of the latest step (bytes)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class LeakVerdict(Record):
    """Whether a probed training job leaks, judged per step at the same point of every step."""

    state: LeakState = field(metadata=doc("what the steps show", enum=LEAK_STATES))
    reason: str = field(default="", metadata=doc("the evidence in one sentence, with numbers"))
    device: str | None = field(default=None, metadata=doc('the device judged (`"cuda:0"`, `"cpu"`)'))
    steps_seen: int = field(default=0, metadata=doc("steps with an allocated figure", minimum=0))
    first_step: int | None = field(default=None, metadata=doc("the first step judged"))
    last_step: int | None = field(default=None, metadata=doc("the latest step judged"))
    window_steps: int | None = field(default=None, metadata=doc(
        "steps the slopes were fitted over (the readings may skip some)", minimum=0))
    period_steps: int | None = field(default=None, metadata=doc(
        "where the judged figure grows in steps (a tensor kept every 20 steps): the steps between its increments, "
        "the leak's own period, over which growth is judged; null where it grows a little every step", minimum=2))
    allocated: int | None = field(default=None, metadata=doc(
        "allocated at the end of the latest step (bytes)", minimum=0))
    reserved: int | None = field(default=None, metadata=doc(
        "reserved at the end of the latest step (bytes)", minimum=0))
    allocated_per_step: float | None = field(default=None, metadata=doc(
        "robust slope of allocated memory over the recent steps (bytes/step)"))
    reserved_per_step: float | None = field(default=None, metadata=doc(
        "robust slope of reserved memory over the recent steps (bytes/step)"))
    inactive_split_per_step: float | None = field(default=None, metadata=doc(
        "robust slope of the free bytes in split blocks (bytes/step)"))
    retries_added: int | None = field(default=None, metadata=doc(
        "allocator retries during the recent steps", minimum=0))
    category: str | None = field(default=None, metadata=doc(
        "what grows, in the growing states; null in the others", enum=CATEGORIES))
    growth: tuple[CategoryGrowth, ...] = field(default=(), metadata=doc(
        "every category with a known figure, fastest-growing first"))
    warmup_steps: int | None = field(default=None, metadata=doc(
        "steps it took to settle (`warming_up`, `clean` after warm-up)", minimum=0))
    step_time: float | None = field(default=None, metadata=doc("median seconds per step", minimum=0))
    oom_step: int | None = field(default=None, metadata=doc("the step during which the device runs out at this rate"))
    oom_in: float | None = field(default=None, metadata=doc(
        "seconds from the latest step's end to that step", minimum=0))
    oom_at: float | None = field(default=None, metadata=doc("the same as seconds since the epoch"))
    # CPU-only jobs, which have no allocator figures: the process's resident memory at the end of the
    # latest step, and the robust slope per step of what it holds beyond the tracked tensors (the
    # "other" category's growth, with category "other" when that is the leak).
    host_memory: int | None = field(default=None, metadata=doc(
        "CPU-only jobs: resident memory at the end of the latest step (bytes)", minimum=0))
    host_other_per_step: float | None = field(default=None, metadata=doc(
        "CPU-only jobs: robust slope of the host memory beyond the tracked tensors (bytes/step)"))
    # CPU-only jobs: how much the host memory beyond the tracked tensors grew from the measured step
    # ``untracked_since`` to the latest (bytes): what the probe cannot attribute. None below noise.
    untracked_growth: int | None = field(default=None, metadata=doc(
        "CPU-only jobs: growth of the host memory beyond the tracked tensors since `untracked_since` "
        "(bytes); null below noise"))
    untracked_since: int | None = field(default=None, metadata=doc("the step that growth is counted from"))
    steps_needed: int | None = field(default=None, metadata=doc(
        "while evidence is gathered (`collecting`, `warming_up`): steps the verdict still needs", minimum=0))

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

    where: str = field(metadata=doc('the allocating line, `"train.py:42 in train_step"`'))
    bytes_per_step: float = field(metadata=doc("robust slope of its live bytes over the recorded steps (bytes/step)"))
    growth: int = field(metadata=doc("live bytes at the last recorded step minus at the first (bytes)"))
    live_bytes: int = field(metadata=doc("live bytes at the last recorded step (bytes)", minimum=0))
    steps: int = field(metadata=doc("recorded steps it was judged on", minimum=0))
    stack: tuple[str, ...] = field(default=(), metadata=doc("the call stack, innermost last"))


@dataclass(frozen=True, eq=False, repr=False)
class Advice(Record):
    """One concrete suggestion: what was seen, what to change, what it would save."""

    kind: str = field(metadata=doc('stable id of the rule, `"keep-graph"`, `"expandable-segments"`'))
    title: str = field(metadata=doc("the advice in a line"))
    detail: str = field(metadata=doc("the evidence: what the analysis saw, in numbers"))
    action: str = field(metadata=doc("what to change; may hold a code snippet"))
    severity: Severity = field(default="info", metadata=doc("how urgent, most urgent first", enum=SEVERITIES))
    estimated_saving: int | None = field(default=None, metadata=doc(
        "memory it would save (bytes); null where it cannot be estimated", minimum=0))
    rank: int = field(default=0, metadata=doc("its place in the list: 1 is the first thing to do", minimum=0))
