"""Words about a probe report shared by every view (the numbers themselves: gputui.units)."""

from __future__ import annotations

from datetime import tzinfo

from gputui.analysis.leaks import WINDOW_STEPS
from gputui.analysis.whatif import effect
from gputui.model import Headroom, ProbeReport
from gputui.units import clock_time, size, span

# How each way of starting the probe is named to people (ProbeReport.via).
STARTED_BY = {"run": "gputui run", "env": "GPUTUI_PROBE=1", "api": "gputui.probe.start()",
              "attach": "gputui attach", "demo": "demo"}


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


def probe_history(report: ProbeReport, tz: tzinfo | None = None) -> str:
    """When and how the probe came into the job, and how much history its figures have: after a late
    attach the parameters, gradients and optimizer state are all there, but steps, phase peaks,
    activations and leak verdicts start from the attach."""
    how = STARTED_BY.get(report.via or "", report.via or "")
    by = f" ({how})" if how else ""
    steps = report.steps[-1].step if report.steps else 0
    if report.via != "attach":
        return f"probe started at {clock_time(report.started_at, tz)}{by}; {steps} steps since"
    words = (f"probe attached at {clock_time(report.started_at, tz)}{by} to a running job: steps, phase peaks "
             f"and activations count from its first step after that; {steps} steps so far")
    if steps < WINDOW_STEPS:
        words += f", leak verdicts fit {steps} of their {WINDOW_STEPS}"
    return words
