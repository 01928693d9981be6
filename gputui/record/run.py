"""``gputui record FILE``: sample as the live monitor does and append each sample to a recording;
``gputui replay FILE --once|--json --at TIME``: print what ``--once``/``--json`` printed then, and
which sample that is."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from gputui import units
from gputui.alerts.alerting import alerting_for, to_stderr
from gputui.errors import UserError
from gputui.model import to_jsonable
from gputui.model.judgement import Judgements
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.document import dumps, read_snapshot_document, snapshot_document
from gputui.plain.modes import snapshot_text
from gputui.record import judged
from gputui.record.at import sample_at
from gputui.record.reader import Recording, Sample
from gputui.record.writer import Recorder
from gputui.sample.pipeline import open_pipeline
from gputui.untrusted import visible

MAX_SIZE = 200 * 1000 * 1000  # bytes per file before it rotates (about 10 hours of a busy 8-GPU node)


def record(options: Options, *, clock: Callable[[], float] | None = None,
           pause: Callable[[float], None] = time.sleep, quiet: bool = False) -> int:
    """Record until ``--duration`` is over or Ctrl-C; a sample every ``--interval`` seconds (default 1).

    ``clock`` and ``pause`` replace the real ones (tests: a fake clock that ``pause`` moves on);
    ``quiet`` leaves out the line that says where the recording goes.
    """
    path = options.record.file
    interval = options.interval or 1.0
    duration = options.record.duration
    max_size = options.record.max_size or MAX_SIZE
    # The live monitor's pipeline (OOM endings, judgements): a replay shows what it showed.
    alerting = alerting_for(options, to_stderr)
    with open_pipeline(options, lasting=True, clock=clock, pause=pause) as pipeline:
        sample = pipeline.sample()
        recorder = Recorder(path, interval=interval, host=sample.snapshot.host.hostname if sample.snapshot.host else "",
                            max_size=max_size)
        if not quiet:
            print(f"gputui: recording to {path} every {interval:g} s"
                  f"{'' if duration is None else f' for {duration:g} s'}; Ctrl-C stops", file=sys.stderr)
        now = clock or time.monotonic
        began = deadline = now()
        try:
            while True:
                if alerting is not None:
                    alerting(sample.snapshot, sample.judgements)
                recorder.add(sample.snapshot.taken_at, snapshot_document(sample.snapshot, sample.judgements),
                             {str(pid): to_jsonable(v) for pid, v in sample.leaks.items()})
                deadline += interval
                if duration is not None and deadline - began >= duration:
                    return 0
                pause(max(0.0, deadline - now()))
                sample = pipeline.sample()
        except KeyboardInterrupt:
            return 0
        finally:
            recorder.close()
            if alerting is not None:
                alerting.close()


def print_at(options: Options) -> int:
    """``--once`` or ``--json`` as printed at ``--at`` (the recording's last sample without it), saying
    which sample it is: ``--once`` in a heading, ``--json`` in the document's ``replay`` field."""
    path = options.replay.file
    recording = open_recording(path)
    at = options.replay.at
    index = len(recording) - 1 if at is None else sample_at(at, recording)
    try:  # the CRCs vouch for what was written, not for who wrote it: a crafted sample is refused here
        sample = recording.sample(index)
        judgements = recorded_judgements(sample)
        if options.json:
            text = dumps({**sample.document, "judgements": to_jsonable(judgements),
                          "replay": shown(recording, index)}) + "\n"
        else:
            text = heading(path, recording, index, options) + snapshot_text(sample.snapshot, options, judgements)
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from None
    return terminal.show(text)


def recorded_judgements(sample: Sample) -> Judgements:
    """The judgements the recording monitor made of ``sample`` (judged.recorded_judgements: an older
    recording's are judged now, and stderr says so)."""
    judgements, recorded = judged.recorded_judgements(sample)
    if not recorded:
        print(f"gputui: {judged.OLD}", file=sys.stderr)
    return judgements


def shown(recording: Recording, index: int) -> dict[str, Any]:
    """The ``replay`` field of ``gputui replay --json``: which sample of the recording this is."""
    times = recording.times
    return {"sample": index + 1, "samples": len(times), "taken_at": times[index], "start": times[0],
            "end": times[-1]}


def heading(path: str, recording: Recording, index: int, options: Options) -> str:
    """``--once``'s first line: ``replay r.rec: sample 3 of 141, 2026-01-05 09:00:02 UTC, 2s into the recording``."""
    times = recording.times
    line = (f"replay {visible(path)}: sample {index + 1} of {len(times)}, "
            f"{units.clock_time(times[index], date=True, zone=True)}, {units.elapsed(times[index] - times[0])} "
            f"into the recording\n")
    # (--ascii promises plain ASCII, as render keeps it for the rest)
    return line.encode("ascii", "replace").decode("ascii") if terminal.use_ascii(options) else line


def open_recording(path: str) -> Recording:
    """The recording at ``path``, its damaged end (if any) said on stderr; UserError if it is empty or
    its snapshots are not ones this gputui reads."""
    recording = Recording(path)
    if not len(recording):  # (its note would only say that none is read)
        raise UserError(f"{path}: a recording without {'an intact' if recording.note else 'a'} sample")
    if recording.note:
        print(f"gputui: {recording.note}", file=sys.stderr)
    try:  # one gputui wrote every sample: if the last one reads, they all do
        read_snapshot_document(recording.sample(len(recording) - 1).document)
    except ValueError as exc:
        raise UserError(f"{path}: its samples are not snapshots this gputui reads: {exc}") from None
    return recording
