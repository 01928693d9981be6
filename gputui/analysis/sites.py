"""Where a leak comes from: allocation sites whose live bytes grow across the recorded steps.

Reads the per-step live bytes the probe records on demand (``ProbeReport.sites``) and keeps the
sites that grow steadily, fastest first; flat sites and sites that rise and fall are left out.
"""

from __future__ import annotations

from gputui.analysis.robust import theil_sen
from gputui.model import LeakKeeper, ProbeReport
from gputui.model.probe import KEEPER_GRAPH
from gputui.model.verdicts import GrowingSite

MIN_RECORDED_STEPS = 3  # fewer recorded steps than this cannot show a trend
MIN_SITE_GROWTH = 512  # bytes: below the allocator's rounding, nothing grew
MAX_GIVEBACK = 0.25  # a site that gives back more than this share of what it gained oscillates


def growing_sites(report: ProbeReport) -> tuple[GrowingSite, ...]:
    """The sites that grow step after step, fastest first (ties by place in the code)."""
    found = []
    for site in report.sites:
        # Sites recorded for fewer steps than the report hold the latest ones.
        live = site.live_bytes[-len(report.recorded_steps):] if report.recorded_steps else ()
        steps = report.recorded_steps[-len(live):] if live else ()
        if len(live) < MIN_RECORDED_STEPS:
            continue
        slope = theil_sen(steps, live)
        if slope is None or slope <= 0:
            continue
        growth = live[-1] - live[0]
        gained = sum(b - a for a, b in zip(live, live[1:]) if b > a)
        given_back = gained - growth
        if growth < MIN_SITE_GROWTH or given_back > MAX_GIVEBACK * gained:
            continue
        half = len(live) // 2
        if (theil_sen(steps[half:], live[half:]) or 0.0) < 0.5 * slope:
            continue  # grew at first, flat now: a warm-up, not a leak
        found.append(GrowingSite(
            where=site.where, bytes_per_step=slope, growth=growth, live_bytes=live[-1],
            steps=len(live), stack=site.stack,
        ))
    return tuple(sorted(found, key=lambda g: (-g.bytes_per_step, g.where)))


def keeper_text(keeper: LeakKeeper) -> str:
    """What keeps a leak, in one phrase: "total_loss, a tensor whose autograd graph grows by 11 nodes a
    step", for the line that adds to it."""
    if keeper.what == KEEPER_GRAPH:
        unit = "nodes"
    elif keeper.what.startswith(("a list", "a dict", "a set", "a deque", "a tuple")):
        unit = "items"
    else:
        unit = "elements"
    count = f"{keeper.per_step:.3g}"
    return f"{keeper.name}, {keeper.what} grows by {count} {unit[:-1] if count == '1' else unit} a step"
