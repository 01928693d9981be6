"""What the monitor concluded about one sample: per process and per job, made once by the sampling
pipeline (gputui/sample/) and carried to every view and every JSON document.

Frozen dataclasses over verdicts.py's and job_verdicts.py's. Sizes are bytes, rates bytes per second or
per step, times seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.model.estimate import Headroom
from gputui.model.fielddoc import doc
from gputui.model.job_verdicts import JobAnalysis
from gputui.model.probe import LeakKeeper
from gputui.model.record import Record
from gputui.model.verdicts import Advice, GrowingSite, LeakVerdict, ProcessTrend
from gputui.model.waste import Waste


@dataclass(frozen=True, eq=False, repr=False)
class DeviceTrend(Record):
    """A process's NVML memory trend on one GPU."""

    device: int = field(metadata=doc("NVML index of the GPU", minimum=0))
    trend: ProcessTrend = field(metadata=doc("how the process's memory there moves"))


@dataclass(frozen=True, eq=False, repr=False)
class ProcessJudgement(Record):
    """What the monitor concluded about one process: its memory trends, its leak verdict, advice and room."""

    pid: int = field(metadata=doc("PID of the process, as the monitor sees it", minimum=1))
    started_at: float | None = field(default=None, metadata=doc(
        "when the process started (seconds since the epoch): with `pid`, one process life"))
    trends: tuple[DeviceTrend, ...] = field(default=(), metadata=doc(
        "its NVML memory trend on each GPU it uses, from the monitor's history (one sample: `unknown`)"))
    leak: LeakVerdict | None = field(default=None, metadata=doc(
        "the probe's per-step leak verdict; null for a process without a probe or without steps"))
    sites: tuple[GrowingSite, ...] = field(default=(), metadata=doc(
        "allocation sites whose live bytes grow, where the probe records them"))
    keepers: tuple[LeakKeeper, ...] = field(default=(), metadata=doc(
        "names in the user's code that hold more at each step, with the lines that add to them"))
    advice: tuple[Advice, ...] = field(default=(), metadata=doc(
        "what to do, the first thing first, each with its evidence and estimated saving"))
    headroom: tuple[Headroom, ...] = field(default=(), metadata=doc(
        "a probed process's room to grow on each of its GPUs, judged with its leak verdict and memory trend"))


@dataclass(frozen=True, eq=False, repr=False)
class Judgements(Record):
    """Every judgement of one sample: the processes the monitor judged, and its jobs' findings."""

    processes: tuple[ProcessJudgement, ...] = field(default=(), metadata=doc(
        "each probed or trended process, by PID"))
    jobs: tuple[JobAnalysis, ...] = field(default=(), metadata=doc(
        "each training job's findings: imbalance, stragglers, the first OOM, advice"))
    waste: Waste | None = field(default=None, metadata=doc(
        "who holds the GPUs and who holds them idle; null where not judged (a document of an older gputui)"))

    def of(self, pid: int) -> ProcessJudgement | None:
        """The judgement of process ``pid``, or None."""
        return next((p for p in self.processes if p.pid == pid), None)

    def job(self, key: str) -> JobAnalysis | None:
        """The findings of the job with ``key``, or None."""
        return next((j for j in self.jobs if j.job.key == key), None)
