"""Every judgement of a sample, made once: each GPU process's memory trend (from the history), each
probed process's leak verdict, growing sites, keepers and advice, each job's findings, and who holds the
GPUs idle.

Kept between samples (the history, the trends' cache, the latest leak verdicts), so it belongs to one sampling
thread. A judgement that fails is contained: the sample says why and goes on without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputui.analysis.history import History, ProcessKey
from gputui.analysis.waste import WasteJudge
from gputui.model import GpuProcess, Job, ProbeReport, Snapshot
from gputui.model.judgement import DeviceTrend, Judgements, ProcessJudgement
from gputui.model.record import Record
from gputui.model.verdicts import LEAK_GROWING, TREND_GROWING, LeakVerdict, ProcessTrend
from gputui.model.waste import WasteRules

if TYPE_CHECKING:
    from gputui.analysis.leaks import JudgedLeaks
    from gputui.analysis.trends import TrendCache


@dataclass(frozen=True, eq=False, repr=False)
class Sample(Record):
    """A snapshot and what was judged of it: the document form, and the lookups the views use."""

    snapshot: Snapshot
    judgements: Judgements = Judgements()
    leaks: Mapping[int, LeakVerdict] = field(default_factory=dict)  # probed processes' verdicts by pid
    trends: Mapping[ProcessKey, ProcessTrend] = field(default_factory=dict)  # by (NVML pid, device index)


class Judge:
    """Judges the samples of one machine, in order."""

    def __init__(self, history: History | None = None, waste: WasteRules | WasteJudge | None = None) -> None:
        """``history``: one already recorded (a still picture); the judge adds each new sample to it.
        ``waste``: when a held GPU counts as idle (the config's [waste] and the --idle-* flags), or an idle
        judge that watched the recorded samples (a still picture's)."""
        self.history = history  # made at the first call when None: only what the trends read
        self._waste = waste if isinstance(waste, WasteJudge) else WasteJudge(waste)
        self._leaks: JudgedLeaks | None = None  # the latest verdicts, with the reports they judged
        self._trend_cache: TrendCache | None = None  # made at the first call: the first frame does without
        self._trends: dict[ProcessKey, ProcessTrend] = {}
        self._quiet = QuietJudgements()

    def __call__(self, snapshot: Snapshot) -> Sample:
        if self._trend_cache is None:
            from gputui.analysis.trends import TrendCache

            self._trend_cache = TrendCache()
        history = self.history
        if history is None:
            from gputui.analysis.trends import trend_history

            history = self.history = trend_history()
        snapshot, leaks = self._leak_verdicts(snapshot)
        trends = self._memory_trends(snapshot, history)
        try:
            judgements = judgements_of(snapshot, leaks, trends, quiet=self._quiet)
        except Exception as exc:  # noqa: BLE001 - a report the analysis chokes on must not stop sampling
            judgements = Judgements()
            snapshot = _with_problem(snapshot, f"analysis failed: {type(exc).__name__}: {exc}")
        try:
            judgements = dataclasses.replace(judgements, waste=self._waste(snapshot))
        except Exception as exc:  # noqa: BLE001 - as above
            snapshot = _with_problem(snapshot, f"idle analysis failed: {type(exc).__name__}: {exc}")
        return Sample(snapshot, judgements, leaks, trends)

    def _leak_verdicts(self, snapshot: Snapshot) -> tuple[Snapshot, dict[int, LeakVerdict]]:
        if not snapshot.probes:  # nothing to judge; a monitor with no probe never loads the leak analysis
            self._leaks = None
            return snapshot, {}
        from gputui.analysis.leaks import judge_leaks

        try:
            self._leaks = judge_leaks(snapshot, self._leaks)
            return snapshot, dict(self._leaks.verdicts)
        except Exception as exc:  # noqa: BLE001 - as above
            return _with_problem(snapshot, f"leak analysis failed: {type(exc).__name__}: {exc}"), {}

    def _memory_trends(self, snapshot: Snapshot, history: History) -> dict[ProcessKey, ProcessTrend]:
        from gputui.analysis.trends import trends

        latest = history.latest
        if latest is not None and snapshot.taken_at <= latest and self._trends:
            return self._trends  # the same instant twice (or a clock stepping back) must not skew the history
        if latest is None or snapshot.taken_at > latest:
            history.add(snapshot)
        self._trends = trends(history, snapshot, cache=self._trend_cache)
        return self._trends


def sample_of(snapshot: Snapshot, judgements: Judgements, leaks: Mapping[int, LeakVerdict] | None = None) -> Sample:
    """A Sample of judgements a Judge made elsewhere (a host's own gputui, a recording's), with the lookups
    the views use worked out from them: ``leaks`` where given (a recording's verdicts), else each judged
    process's verdict; the memory trends by (NVML pid, device index) for each of the snapshot's rows."""
    if leaks is None:
        leaks = {p.pid: p.leak for p in judgements.processes if p.leak is not None}
    trends: dict[ProcessKey, ProcessTrend] = {}
    for process in snapshot.processes:
        judged = judgements.of(process.own_pid)
        trend = next((t.trend for t in judged.trends if t.device == process.device_index), None) \
            if judged is not None else None
        if trend is not None:
            trends[(process.pid, process.device_index)] = trend
    return Sample(snapshot, judgements, dict(leaks), trends)


def _with_problem(snapshot: Snapshot, problem: str) -> Snapshot:
    return dataclasses.replace(snapshot, problems=snapshot.problems + (problem,))


class QuietJudgements:
    """The judgements of processes with neither a probe nor a growing trend, kept from the sample before: one
    made of the same trends (the trends' cache hands back the very same ones until it judges a process
    again, every few seconds) is the same judgement, and most processes are quiet most of the time."""

    def __init__(self) -> None:
        self._kept: dict[int, ProcessJudgement] = {}
        self._now: dict[int, ProcessJudgement] = {}

    def get(self, pid: int, started_at: float | None, trends: tuple[tuple[int, ProcessTrend], ...]
            ) -> ProcessJudgement | None:
        judged = self._kept.get(pid)
        if judged is None or judged.started_at != started_at or len(judged.trends) != len(trends) or not all(
                kept.device == device and kept.trend is trend for kept, (device, trend) in zip(judged.trends, trends)):
            return None
        self._now[pid] = judged
        return judged

    def keep(self, judged: ProcessJudgement) -> ProcessJudgement:
        self._now[judged.pid] = judged
        return judged

    def next_sample(self) -> None:
        """Keep only what this sample judged quiet (a process gone or grown is forgotten)."""
        self._kept, self._now = self._now, {}


def judgements_of(snapshot: Snapshot, leaks: Mapping[int, LeakVerdict],
                  trends: Mapping[ProcessKey, ProcessTrend], *, quiet: QuietJudgements | None = None) -> Judgements:
    """The judgements of every probed process and every GPU process with a trend, and of every job.

    Advice is worked out for probed processes and for processes whose memory grows: the others' advice
    (a probe to attach) is for the live monitor's detail screen to ask for. ``quiet``: the quiet processes'
    judgements of the sample before, reused where they are made of the same trends (a Judge's samples).
    """
    from gputui.analysis.jobs import analyse_job

    rows: dict[int, list[GpuProcess]] = {}
    for process in snapshot.processes:
        rows.setdefault(process.own_pid, []).append(process)
    reports = {r.pid: r for r in snapshot.probes}
    processes = tuple(_process(pid, rows.get(pid, []), reports.get(pid), snapshot, leaks, trends, quiet)
                      for pid in sorted(rows.keys() | reports.keys()))
    if quiet is not None:
        quiet.next_sample()
    jobs = tuple(analyse_job(job, snapshot, trends=trends) for job in snapshot.jobs)
    return Judgements(processes=processes, jobs=jobs)


def _process(pid: int, rows: list[GpuProcess], report: ProbeReport | None, snapshot: Snapshot,
             leaks: Mapping[int, LeakVerdict], trends: Mapping[ProcessKey, ProcessTrend],
             quiet: QuietJudgements | None = None) -> ProcessJudgement:
    from gputui.analysis.process import analyse

    found = tuple((p.device_index, trend) for p in rows if (trend := trends.get((p.pid, p.device_index))) is not None)
    started_at = rows[0].started_at if rows else (report.started_at if report is not None else None)
    still = report is None and quiet is not None and all(t.verdict != TREND_GROWING for _, t in found)
    if still:
        assert quiet is not None
        judged = quiet.get(pid, started_at, found)
        if judged is not None:
            return judged
    leak = leaks.get(pid) if report is not None else None
    judged = ProcessJudgement(pid=pid, started_at=started_at,
                              trends=tuple(DeviceTrend(device, trend) for device, trend in found), leak=leak)
    if still:
        assert quiet is not None
        return quiet.keep(judged)
    basis = advice_basis(rows, report, trends)
    if basis is None:
        return judged
    row, trend = basis
    analysis = analyse(snapshot, row, report, trend=trend, leak=leak)
    keepers = report.keepers if report is not None and leak is not None and leak.state in LEAK_GROWING else ()
    return dataclasses.replace(judged, leak=analysis.leak, sites=analysis.sites, keepers=keepers,
                               advice=analysis.advice, headroom=analysis.headroom)


def advice_basis(rows: Sequence[GpuProcess], report: ProbeReport | None,
                 trends: Mapping[ProcessKey, ProcessTrend]) -> tuple[GpuProcess | None, ProcessTrend | None] | None:
    """The NVML row and memory trend a process's advice is worked out from: its first row, as --once has
    always judged it, and its growing trend where one grows. None where the pipeline gives it no advice
    (neither probed nor growing): the live monitor's detail screen asks for that itself."""
    growing = (trend for p in rows if (trend := trends.get((p.pid, p.device_index))) is not None
               and trend.verdict == TREND_GROWING)
    trend = next(growing, None)
    if report is None and trend is None:
        return None
    return (rows[0] if rows else None), trend


def judge_reports(reports: Sequence[ProbeReport], snapshot: Snapshot | None = None,
                  jobs: Sequence[Job] | None = None) -> Judgements:
    """The judgements of probed processes from their reports alone (``gputui probes``, ``gputui probe PID``,
    ``gputui oom``), with the GPUs' figures from ``snapshot`` where NVML can be read, and the findings of
    ``jobs`` (None: the snapshot's). Only the probed processes' judgements: the other GPU processes are
    the GPUs' figures here, and who holds them idle needs a history one look does not have."""
    if not reports:
        return Judgements()  # (jobs are made of probed processes)
    base = snapshot if snapshot is not None else Snapshot(taken_at=max(r.taken_at for r in reports))
    sample = dataclasses.replace(base, probes=tuple(reports), jobs=base.jobs if jobs is None else tuple(jobs))
    judged = Judge()(sample).judgements
    probed = {r.pid for r in reports}
    return Judgements(processes=tuple(p for p in judged.processes if p.pid in probed), jobs=judged.jobs)


def judge_report(report: ProbeReport, snapshot: Snapshot | None = None) -> ProcessJudgement | None:
    """The judgement of one probed process from its report alone: :func:`judge_reports`' of it."""
    return judge_reports((report,), snapshot).of(report.pid)
