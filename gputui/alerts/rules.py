"""What is wrong now: a pure function from the last alert state and a judged sample to the alerts active
and the events that started or ended them. The sample's own time is the clock, so the same samples give
the same alerts, and idle or free GPUs are timed over samples in the state value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from gputui import units
from gputui.model import Device, Snapshot
from gputui.model.alert import ENDED, STARTED, Alert, AlertEvent, Thresholds
from gputui.model.judgement import Judgements, ProcessJudgement
from gputui.model.record import Record
from gputui.model.verdicts import LEAK_GROWING, TREND_GROWING
from gputui.untrusted import visible

DEFAULTS = Thresholds()  # README's


@dataclass(frozen=True, eq=False, repr=False)
class AlertState(Record):
    """What the rules carry from one sample to the next."""

    active: Mapping[tuple[str, str], Alert] = field(default_factory=dict)  # by (kind, key)
    idle_since: Mapping[str, float] = field(default_factory=dict)  # GPU -> since when it holds memory idle
    free_since: Mapping[str, float] = field(default_factory=dict)  # once-busy GPU -> since when it is free
    busy: frozenset[str] = frozenset()  # GPUs seen in use: only those can "become" free
    errors_seen: Mapping[str, int] = field(default_factory=dict)  # GPU -> ECC errors at the first look


def evaluate(state: AlertState, snapshot: Snapshot, judgements: Judgements,
             thresholds: Thresholds = DEFAULTS) -> tuple[AlertState, tuple[AlertEvent, ...]]:
    """The new state and the alerts that started or ended with this sample."""
    now = snapshot.taken_at
    state = _timed(state, snapshot, thresholds)
    found = [a for a in _alerts(state, snapshot, judgements, thresholds) if a.kind in thresholds.kinds]
    active: dict[tuple[str, str], Alert] = {(a.kind, a.key): a for a in found}
    events = [AlertEvent(ENDED, old, now) for k, old in state.active.items() if k not in active]
    events += [AlertEvent(STARTED, a, now) for k, a in active.items() if k not in state.active]
    return dataclasses.replace(state, active=active), tuple(events)


def _gpu_name(device: Device) -> str:
    return device.uuid or str(device.index)


def _timed(state: AlertState, snapshot: Snapshot, thresholds: Thresholds) -> AlertState:
    """The state's timings brought up to this sample: idle and free GPUs, error counts first seen."""
    now = snapshot.taken_at
    idle, free, busy, errors = {}, {}, set(state.busy), dict(state.errors_seen)
    holders = {p.device_index for p in snapshot.processes}
    for device in snapshot.devices:
        gpu = _gpu_name(device)
        if device.lost is not None:
            continue
        errors.setdefault(gpu, _errors(device))
        used = device.index in holders
        if used and device.gpu_util is not None and device.gpu_util <= thresholds.idle_util:
            idle[gpu] = state.idle_since.get(gpu, now)
        if used:
            busy.add(gpu)
        elif gpu in busy:
            free[gpu] = state.free_since.get(gpu, now)
    return dataclasses.replace(state, idle_since=idle, free_since=free, busy=frozenset(busy), errors_seen=errors)


def _errors(device: Device) -> int:
    return (device.ecc_corrected or 0) + (device.ecc_uncorrected or 0)


def _alerts(state: AlertState, snapshot: Snapshot, judgements: Judgements, thresholds: Thresholds) -> Iterator[Alert]:
    yield from _device_alerts(state, snapshot, thresholds)
    for judged in judgements.processes:
        yield from _process_alerts(judged, snapshot.taken_at, thresholds)
    for ended in snapshot.ended:
        oom = ended.report.last_oom
        yield Alert("oom_ended", f"pid {ended.pid}@{ended.ended_at}", "critical",
                    f"process {ended.pid} ended by an out-of-memory error",
                    visible(oom.message) if oom is not None and oom.message else "", pid=ended.pid,
                    report_file=ended.report_file)
    for analysis in judgements.jobs:
        job = analysis.job
        for lag in analysis.stragglers:
            yield Alert("straggler", f"job {job.key} pid {lag.pid}", "warning",
                        f"rank {lag.rank if lag.rank is not None else '?'} of {visible(job.name)} lags the others",
                        f"{lag.measure} {lag.value:g} against {lag.others:g}", pid=lag.pid, job=job.key)
        if analysis.imbalance is not None:
            most = analysis.imbalance
            yield Alert("imbalance", f"job {job.key}", "warning",
                        f"rank {most.rank if most.rank is not None else '?'} of {visible(job.name)} holds "
                        f"{most.ratio:.1f}x the others' memory",
                        f"{units.size(most.memory)} against {units.size(most.others)}", pid=most.pid, job=job.key)


def _device_alerts(state: AlertState, snapshot: Snapshot, thresholds: Thresholds) -> Iterator[Alert]:
    now = snapshot.taken_at
    for device in snapshot.devices:
        gpu = _gpu_name(device)
        where = f"GPU {device.index}"
        if device.lost is not None:
            yield Alert("gpu_lost", f"gpu {gpu}", "critical", f"{where} is lost", visible(device.lost), gpu=gpu)
            continue
        new = _errors(device) - state.errors_seen.get(gpu, _errors(device))
        if new > 0:
            yield Alert("gpu_errors", f"gpu {gpu}", "critical", f"{where} has {new} new ECC errors",
                        f"corrected {device.ecc_corrected or 0}, uncorrected {device.ecc_uncorrected or 0}", gpu=gpu)
        since = state.idle_since.get(gpu)
        if since is not None and now - since >= thresholds.idle_after:
            yield Alert("gpu_idle", f"gpu {gpu}", "info", f"{where} holds memory while idle",
                        f"{units.size(device.memory_used)} held, idle for {units.span(now - since)}", gpu=gpu)
        since = state.free_since.get(gpu)
        if since is not None and now - since >= thresholds.free_after:
            yield Alert("gpu_free", f"gpu {gpu}", "info", f"{where} is free",
                        f"{units.size(device.memory_free)} free, no process on it", gpu=gpu)


def _process_alerts(judged: ProcessJudgement, now: float, thresholds: Thresholds) -> Iterator[Alert]:
    leak = judged.leak
    leaking = leak is not None and leak.state in LEAK_GROWING
    if not leaking and all(d.trend.verdict != TREND_GROWING for d in judged.trends):
        return  # most processes, every sample: nothing here can alert
    key = f"pid {judged.pid}@{judged.started_at}"
    if leaking:
        assert leak is not None
        line = next((where for keeper in judged.keepers for where in keeper.where), None)
        grows = units.size(leak.growth_per_step) if leak.growth_per_step is not None else "?"
        yield Alert("leak", key, "warning", f"process {judged.pid} leaks {leak.category or 'memory'}",
                    f"{leak.state}: {grows} a step" + (f", kept at {visible(line)}" if line else ""), pid=judged.pid)
    seconds = [t for t in (leak.seconds_to_oom(now) if leaking and leak is not None else None,
                           *(d.trend.time_to_oom for d in judged.trends if d.trend.verdict == TREND_GROWING))
               if t is not None]
    if seconds and min(seconds) < thresholds.oom_within:
        soonest = min(seconds)
        yield Alert("oom_soon", key, "critical", f"process {judged.pid} runs out of GPU memory in "
                    f"{units.span(soonest)}", f"under the {units.span(thresholds.oom_within)} threshold",
                    pid=judged.pid, seconds_to_oom=soonest)
