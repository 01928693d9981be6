"""A recorded sample as the pipeline's Sample: the snapshot with what the recording monitor judged of it,
so a replay shows the judgements the live monitor showed then, and judges nothing again.
"""

from __future__ import annotations

from gputui.model.judgement import Judgements
from gputui.record.reader import Sample as Recorded
from gputui.sample.judge import Sample, judgements_of, sample_of

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
    return sample_of(snapshot, judgements, sample.verdicts)
