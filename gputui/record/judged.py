"""A recorded sample as the pipeline's Sample: the snapshot with what the recording monitor judged of it,
so a replay shows the judgements the live monitor showed then, and judges nothing again.
"""

from __future__ import annotations

from gputui.analysis.history import ProcessKey
from gputui.model import Snapshot
from gputui.model.judgement import Judgements
from gputui.model.verdicts import ProcessTrend
from gputui.record.reader import Sample as Recorded
from gputui.sample.judge import Sample, judgements_of

OLD = ("a recording from before samples carried their judgements: judged now from its leak verdicts, "
       "without memory trends")


def recorded_judgements(sample: Recorded) -> tuple[Judgements, bool]:
    """The judgements the recording monitor made of ``sample``, and whether it made them: a recording made
    before samples carried them is judged now from its leak verdicts, without memory trends (OLD says so)."""
    judgements = sample.judgements
    if judgements is not None:
        return judgements, True
    return judgements_of(sample.snapshot, sample.verdicts, {}), False


def judged(sample: Recorded) -> Sample:
    """``sample`` as the pipeline's Sample. Judgements that are not judgements (a crafted file whose
    CRC is right) are left aside as an older recording's are: the snapshot is still worth showing."""
    snapshot = sample.snapshot
    try:
        judgements, _ = recorded_judgements(sample)
    except ValueError:
        judgements = judgements_of(snapshot, sample.verdicts, {})
    return Sample(snapshot, judgements, sample.verdicts, trends_of(snapshot, judgements))


def trends_of(snapshot: Snapshot, judgements: Judgements) -> dict[ProcessKey, ProcessTrend]:
    """The memory trends by (NVML pid, device index) that ``judgements`` hold for each GPU process row."""
    found: dict[ProcessKey, ProcessTrend] = {}
    for process in snapshot.processes:
        judged_process = judgements.of(process.own_pid)
        trend = next((t.trend for t in judged_process.trends if t.device == process.device_index), None) \
            if judged_process is not None else None
        if trend is not None:
            found[(process.pid, process.device_index)] = trend
    return found
