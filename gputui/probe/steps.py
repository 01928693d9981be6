"""Steps: the record kept of each training step, the peaks of its phases, and when growth asks for a
measured step.

``StepEntry`` is the one record a step leaves on the board: a named tuple, as cheap as a plain tuple
for the training thread to make, that carries a measured step's full ``StepRecord`` and is turned into
one (``to_record``) only where a report is made. This module imports no torch: the board and the
socket thread's desk use ``StepEntry`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gputui.analysis.leaks import growth_floor
from gputui.model import StepRecord

IDLE, FORWARD, BACKWARD, OPTIMIZER = "idle", "forward", "backward", "optimizer"
# The figures an unmeasured step's entry carries after (step, ended_at, duration, device), in order:
# the one a leak verdict is judged on, read at nearly every step.
LIGHT_FIGURES = ("allocated", "host_allocated", "host_memory")
NO_LIGHT = (None, None, None)
# A leak verdict can say what grows only from a measured step taken while it grows: once the per-step
# figure has grown past the verdict's noise floor since the latest measured step, the next step is
# measured whatever the budget, after at least this many steps, a gap that doubles while the growth
# lasts (up to EVIDENCE_MAX), so that a long leak costs a handful of extra steps, not one in sixteen.
EVIDENCE_STEPS = 16
EVIDENCE_MAX = 256  # (half of leaks.KNOWN_WITHIN: a measured step always tells what grows)
# The light figure is read at least every LIGHT_EVERY steps whatever the budget says: a verdict rests on
# it, and a budget overcharged once (a stall timed inside a reading, a busy machine's scatter taken for a
# reading's cost) must not freeze the evidence. On a loaded machine the light readings of a job stopped
# at step 66 and its warm-up, flat from step 100, was still called a leak at step 500 (issue 45). Cheap:
# a light reading is microseconds (mallinfo2, or the CUDA allocator's counters), one in 16 steps.
LIGHT_EVERY = 16


class StepEntry(NamedTuple):
    """One training step as kept on the board. Unmeasured steps carry only the light figures
    (LIGHT_FIGURES, in that order after ``device``); measured ones their full ``record`` as well."""

    step: int
    ended_at: float
    duration: float | None
    device: str | None
    allocated: int | None = None
    host_allocated: int | None = None
    host_memory: int | None = None
    record: StepRecord | None = None  # a measured step's full record

    def to_record(self) -> StepRecord:
        """The step as the report's StepRecord."""
        record = self.record
        if record is not None:
            return record
        return StepRecord(self.step, self.ended_at, self.duration, self.device, allocated=self.allocated,
                          host_allocated=self.host_allocated, host_memory=self.host_memory)

    @classmethod
    def measured(cls, record: StepRecord) -> "StepEntry":
        return cls(record.step, record.ended_at, record.duration, record.device, record.allocated,
                   record.host_allocated, record.host_memory, record)


# An unmeasured step's entry, made the cheapest way (one C call; the field order is StepEntry's):
# light_entry(StepEntry, (step, ended_at, duration, device, *light, None)).
light_entry = tuple.__new__


@dataclass
class PhaseReading:
    """Memory on the step's device at one phase boundary."""

    allocated: int
    peak: int | None = None  # the allocator's all-time peak (CUDA), None on CPU
    stats: dict | None = None  # the full memory_stats (CUDA)
    tally: dict | None = None  # the category tally (CPU)
    host: int | None = None  # the process's resident memory (at step ends)
    heap: int | None = None  # bytes the C allocator has handed out (at step ends)


def phase_peak(start: PhaseReading | None, end: PhaseReading | None) -> int | None:
    """Highest allocation between two readings, without resetting the allocator's peak counter.

    If the all-time peak rose between the readings, it rose inside this phase, so it is the phase's
    exact peak; otherwise the best lower bound is the larger of the two readings.
    """
    if start is None or end is None:
        return None
    if start.peak is not None and end.peak is not None and end.peak > start.peak:
        return end.peak
    return max(start.allocated, end.allocated)


class PhasePeaks:
    """In a measured step: the reading at each phase's first boundary and each phase's peak, the highest of
    its boundaries' readings (on CUDA, the allocator's peak counter where it rose in between) and, for
    forward, of what was held where the forward pass returned (``forward_returned``)."""

    __slots__ = ("_marks", "_peaks", "_start", "forward_base")

    def __init__(self):
        self._marks: dict[str, PhaseReading] = {}
        self._peaks: dict[str, int] = {}
        self._start: PhaseReading | None = None  # the reading that opened the running phase
        # What the reading that opened the running forward phase held beside the activations; None
        # outside one, and once its forward pass returned.
        self.forward_base: int | None = None

    def close(self, previous: str, phase: str, reading: PhaseReading, saved: int = 0) -> None:
        """A measured boundary: ``previous`` closes at ``reading``, which opens ``phase``; ``saved``: the
        activations ``reading`` holds."""
        if previous != IDLE and self._start is not None:
            peak = phase_peak(self._start, reading)
            if peak is not None:
                self._peaks[previous] = max(self._peaks.get(previous, 0), peak)
        self._start = reading
        self._marks.setdefault(phase, reading)  # a phase's first boundary: where the step started
        self.forward_base = reading.allocated - saved if phase == FORWARD else None

    def forward_returned(self, saved: int) -> None:
        """The forward pass that opened the forward phase returned, ``saved`` bytes of activations held now:
        the phase held what its opening reading held beside the activations, and these. The loop may free
        part of it before backward starts (the last step's gradients, zeroed after the forward pass, as
        Lightning's closure does), which the next boundary's reading would miss. No reading is needed: a
        forward pass leaves parameters, gradients and optimizer state as they were, and the activations
        are counted as they are saved."""
        base, self.forward_base = self.forward_base, None
        if base is not None and base + saved > self._peaks.get(FORWARD, 0):
            self._peaks[FORWARD] = base + saved

    def reset(self, measuring: bool) -> None:
        """A step starts: forget the last one's marks and peaks (if it had any, or this one will)."""
        if measuring or self._peaks:
            self._peaks = {}
            self._marks = {}
            self.forward_base = None

    def mark(self, phase: str) -> PhaseReading | None:
        """The reading at ``phase``'s first boundary in the running step."""
        return self._marks.get(phase)

    def peak(self, phase: str) -> int | None:
        return self._peaks.get(phase)


class Evidence:
    """When the judged figure grew past noise since the latest measured step: measure the next one."""

    __slots__ = ("steps", "now", "last", "_base", "_gap", "_wanted")  # (touched at every step end: compact)

    def __init__(self):
        self.steps = 0  # steps measured because the judged figure grew, so far
        self.now = False  # the running step is measured because the judged figure grew
        self.last = False  # ... and the latest step that ended was
        # (which light figure, its value, step, the growth past it that is more than noise) at the latest
        # measured step
        self._base: tuple | None = None
        self._gap = EVIDENCE_STEPS  # steps to wait before growth past it asks for a measured step
        self._wanted = False

    def set_base(self, figure: int, value: int, step: int) -> None:
        """A measured step's figure (an index into LIGHT_FIGURES), the base growth is judged from."""
        # (The floor once here, not at each step end that reads the figure.)
        self._base = (figure, value, step, growth_floor(LIGHT_FIGURES[figure], value))

    @property
    def watching(self) -> bool:
        return self._base is not None

    def start_step(self) -> bool:
        """A step starts: whether growth asks for it to be measured."""
        wanted = self.now = self._wanted
        self._wanted = False
        return wanted

    def next_step(self, step: int, light: tuple | None) -> bool:
        """At a step end: the step that ended (number ``step``, its light figures, None if it was
        measured) checked, and whether the next one is to be measured (as start_step()).

        The next is measured if the judged figure grew past noise since the latest measured step.
        """
        self.last = self.now
        if light is not None and self._base is not None:
            figure, base, at, floor = self._base
            now = light[figure]
            if now is not None and step - at >= self._gap:
                if now - base >= floor:
                    self._wanted = True
                    self.steps += 1
                    self._gap = min(2 * self._gap, EVIDENCE_MAX)
                elif abs(now - base) < floor:
                    self._gap = EVIDENCE_STEPS  # flat again: a new growth is news
        wanted = self.now = self._wanted
        self._wanted = False
        return wanted
