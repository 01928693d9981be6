"""Everything the analysis says about one process, put together once for every view.

The live detail screen, ``--once`` and ``gputui probe`` all show a process's leak verdict, its
growing allocation sites, its advice and its headroom; the sampling pipeline gets them from :func:`analyse`
once, and the detail screen shows its judgement (:func:`judged_analysis`), so they agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputui.analysis.advice import advise
from gputui.analysis.sites import growing_sites
from gputui.analysis.whatif import headrooms
from gputui.model import GpuProcess, Headroom, ProbeReport, Snapshot
from gputui.model.judgement import ProcessJudgement
from gputui.model.record import Record
from gputui.model.verdicts import Advice, GrowingSite, LeakVerdict, ProcessTrend


@dataclass(frozen=True, eq=False, repr=False)
class ProcessAnalysis(Record):
    """What the analysis said about one process."""

    trend: ProcessTrend | None = None  # NVML's memory trend (the live monitor keeps the history)
    leak: LeakVerdict | None = None  # the probe's per-step verdict
    sites: tuple[GrowingSite, ...] = ()
    advice: tuple[Advice, ...] = ()
    report: ProbeReport | None = None
    now: float | None = None  # the snapshot's time, to count forecasts from
    headroom: tuple[Headroom, ...] = ()  # room to grow on each GPU of a probed job


def analyse(snapshot: Snapshot, process: GpuProcess | None, report: ProbeReport | None = None, *,
            trend: ProcessTrend | None = None, leak: LeakVerdict | None = None) -> ProcessAnalysis:
    """The verdicts, growing sites and advice for one process.

    ``leak`` is the probe's verdict when the caller already has it (the live monitor judges each
    report once); without it, a probed process is judged here against the snapshot's devices.
    """
    if leak is None and report is not None and report.steps:
        from gputui.analysis.leaks import snapshot_leak_verdict  # loaded with the first probe report

        leak = snapshot_leak_verdict(report, snapshot)
    sites = growing_sites(report) if report is not None else ()
    advice = advise(snapshot=snapshot, process=process, report=report, trend=trend, verdict=leak,
                    sites=sites)
    return ProcessAnalysis(trend=trend, leak=leak, sites=sites, advice=advice, report=report,
                           now=snapshot.taken_at,
                           headroom=headrooms(report, snapshot, leak=leak, trend=trend) if report else ())


def judged_analysis(snapshot: Snapshot, report: ProbeReport | None, judged: ProcessJudgement, *,
                    trend: ProcessTrend | None) -> ProcessAnalysis:
    """A process's analysis as the sampling pipeline judged it (leak verdict, sites, advice, headroom),
    with NVML's memory ``trend`` on the GPU shown."""
    return ProcessAnalysis(trend=trend, leak=judged.leak, sites=judged.sites, advice=judged.advice, report=report,
                           now=snapshot.taken_at, headroom=judged.headroom)
