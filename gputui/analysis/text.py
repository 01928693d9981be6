"""Words about a probe report shared by every view (the numbers themselves: gputui.units)."""

from __future__ import annotations

from gputui.analysis.whatif import effect
from gputui.model import Headroom
from gputui.units import size, span


def figures_age(read_at: float | None, read_at_step: int | None, taken_at: float) -> str:
    """How old a probe report's device figures are: the probe reads them on the training thread, at
    the steps it measures and at its next hook after a monitor asks, so they can lag the report."""
    if read_at is None:
        return "no figures read yet (the probe reads at the training loop's next step)"
    step = f"at step {read_at_step}" if read_at_step else "before the first step"
    age = max(0.0, taken_at - read_at)
    return f"figures read {step}, {'just now' if age < 1.5 else span(age) + ' before the report'}"


def headroom_lines(room: Headroom) -> list[str]:
    """A live job's room on one GPU in words: the headroom and the largest batch, then one line per
    what-if; ``gputui probe PID`` and the detail screen show these."""
    head = f"headroom {size(room.headroom)} (free {size(room.free)} + cache {size(room.cache)})"
    if room.batch_factor is not None:
        head += (f"; largest batch that would fit: about {room.batch_factor:.1f}x the current one "
                 f"(step peak {size(room.step_peak)}, activations {size(room.activations)})")
    elif room.withheld:
        head += f"; no larger batch fits: {room.withheld}"
    return [head] + [f"what if {w.change}: {effect(w.saving)} (peak {size(w.peak)}, computed)"
                     for w in room.what_ifs]
