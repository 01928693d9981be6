"""How a step's memory rose phase by phase: why it jumps after forward, after backward and at the
first optimizer.step(), and which phase sets the step's peak.

Pure: step records in, plain sentences out, for ``gputui probe`` and the detail screen alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gputui.model import StepRecord
from gputui.model.record import Record
from gputui.units import size

PHASES = (("forward", "peak_forward"), ("backward", "peak_backward"), ("optimizer.step()", "peak_optimizer"))


@dataclass(frozen=True, eq=False, repr=False)
class PhaseAccount(Record):
    """One measured step's phases, in words."""

    step: int
    lines: tuple[str, ...]  # where it started, each phase's peak and rise, what appeared
    peak_phase: str | None  # the phase that sets the step's peak
    peak: int | None


def phase_account(step: StepRecord, before: StepRecord | None = None, *, cpu: bool = False,
                  attached: bool = False) -> PhaseAccount | None:
    """The account of ``step``; ``before`` is the measured step before it (None for the first).

    ``cpu``: the figures are the probe's tracked tensors at phase boundaries and where the forward pass
    returns (CPU has no allocator peak counter), which the last line says. ``attached``: the probe was
    attached to a running job, so what its first step holds may have been there long before it.
    """
    found = peaks(step)
    if not found:
        return None
    start = step.allocated_at_start
    lines = ["the first whole step after the probe attached"] if attached and before is None else []
    if start is not None:
        lines.append(f"started at {size(start)}" + _model_of(step, start))
    for name, peak in found:
        rise = f" ({_signed(peak - start)} over the start)" if start is not None else ""
        lines.append(f"{name} peak {size(peak)}{rise}")
    top_name, top = max(found, key=lambda p: p[1])
    appeared = _appeared(step, before, attached=attached)
    if appeared:
        lines.append(appeared)
    if step.activations_peak:
        lines.append(f"activations saved for backward: {size(step.activations_peak)} at their peak")
    if step.allocated is not None:
        lines.append(f"ended at {size(step.allocated)}")
    if cpu:
        lines.append("CPU: tensors the probe tracks, at phase boundaries and where the forward pass returns "
                     "(temporaries inside a phase are not seen)")
    return PhaseAccount(step.step, tuple(lines), top_name, top)


def accounts(steps: Sequence[StepRecord], *, attached: bool = False) -> tuple[PhaseAccount, ...]:
    """The first measured step and the latest (the job's start, and how it runs now); ``attached``:
    the probe was attached to a running job, whose start it did not see."""
    measured = [s for s in steps if peaks(s)]
    if attached:
        # Step 1 was under way when the probe came: its phases (and, on the CPU, the tensors of an
        # optimizer the probe had not met yet) were seen in part. Accounts start from the first whole step.
        measured = [s for s in measured if s.step > 1]
    picked = sorted({0, len(measured) - 1}) if measured else []
    found = (phase_account(measured[i], measured[i - 1] if i else None, cpu=measured[i].reserved is None,
                           attached=attached)
             for i in picked)
    return tuple(account for account in found if account is not None)  # (all are: measured steps have peaks)


def headline(account: PhaseAccount) -> str:
    """One line: which phase sets the step's peak."""
    return f"Step {account.step} peaks in {account.peak_phase} at {size(account.peak)}"


def peaks(step: StepRecord) -> list[tuple[str, int]]:
    """The step's known phase peaks, (phase, bytes) in PHASES order; [] for a step not measured."""
    return [(name, getattr(step, field)) for name, field in PHASES if getattr(step, field) is not None]


def _model_of(step: StepRecord, start: int) -> str:
    cats = step.categories
    if cats is None or not cats.parameters:
        return ""
    model = cats.parameters + (cats.buffers or 0)
    return f" (the model: {size(model)})" if model <= start else ""


def _appeared(step: StepRecord, before: StepRecord | None, *, attached: bool = False) -> str:
    """What the step left behind that was not there before it: gradients, optimizer state. The first
    step after an attach cannot tell: they may have been there since the job's own first step."""
    cats = step.categories
    if cats is None:
        return ""
    old = before.categories if before is not None else None
    new = []
    for label, field in (("gradients", "gradients"), ("optimizer state", "optimizer_state")):
        now, then = getattr(cats, field) or 0, (getattr(old, field) or 0) if old else 0
        if now > then:
            new.append(f"{label} +{size(now - then)}")
    if not new:
        return ""
    if before is None and attached:
        return "held when the probe attached: " + ", ".join(n.replace("+", "", 1) for n in new)
    where = "created at this step" if before is None else f"since step {before.step}"
    return "left behind: " + ", ".join(new) + f" ({where})"


def _signed(value: int) -> str:
    return ("+" if value >= 0 else "") + size(value)  # (size() gives a negative its sign)
