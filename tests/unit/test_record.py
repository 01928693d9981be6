"""Recordings: written and read back equal (generated snapshots, the demo), damaged ends, rotation,
``gputui record`` and ``gputui replay --once|--json --at``."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_data import judged_document
from record_helpers import recorded_demo

from gputui.cli import main, parse
from gputui.errors import UserError
from gputui.model import EndedProcess, LeakVerdict, OomRecord, ProbeReport, Snapshot, StepRecord, to_jsonable
from gputui.options import RecordOptions
from gputui.plain import terminal
from gputui.plain.document import dumps
from gputui.plain.modes import snapshot_text
from gputui.record import delta
from gputui.record.at import moment
from gputui.record.format import HEAD
from gputui.record.reader import Recording
from gputui.record.writer import Recorder
from gputui.sample.pipeline import open_pipeline

T0 = 1767603600.0  # 2026-01-05 09:00:00 UTC

# Finite floats: --json writes NaN and infinity as null, which reads back as None, not as themselves.
FINITE = st.floats(allow_nan=False, allow_infinity=False)
st.register_type_strategy(float, FINITE)
# A process an OOM ended carries a whole probe report: a small one (its OOM and one step), so that a
# snapshot stays within what hypothesis generates well; the reports themselves are generated in full.
st.register_type_strategy(EndedProcess, st.builds(
    EndedProcess, report=st.builds(ProbeReport, last_oom=st.from_type(OomRecord),
                                   steps=st.lists(st.from_type(StepRecord), max_size=1).map(tuple)),
    report_file=st.none() | st.text(max_size=20), user=st.none() | st.text(max_size=8),
    devices=st.lists(st.integers(0, 7), max_size=2).map(tuple), gpu_memory=st.none() | st.integers(0, 1 << 40)))
SNAPSHOTS = st.from_type(Snapshot)
VERDICTS = st.dictionaries(st.integers(1, 1 << 22).map(str), st.from_type(LeakVerdict).map(to_jsonable), max_size=3)


def as_read(document):
    """The document as a reader of ``--json`` sees it."""
    return json.loads(dumps(document))


def write(path, samples, **options):
    recorder = Recorder(path, interval=1.0, host="test", **options)
    for taken_at, document, leaks in samples:
        recorder.add(taken_at, document, leaks)
    recorder.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                HealthCheck.function_scoped_fixture])
@given(snapshots=st.lists(SNAPSHOTS, min_size=1, max_size=6), leaks=VERDICTS,
       key_every=st.integers(1, 4), order=st.randoms(use_true_random=False))
def test_every_field_survives_a_round_trip(tmp_path, snapshots, leaks, key_every, order):
    # Repeats make changes that are small, or none: the patches' cases, not only whole documents.
    snapshots = snapshots + [dataclasses.replace(s, taken_at=s.taken_at + 1) for s in snapshots[:2]]
    documents = [judged_document(s) for s in snapshots]
    path = tmp_path / "generated.rec"
    write(path, [(float(i), d, leaks) for i, d in enumerate(documents)], key_every=key_every)
    recording = Recording(path)
    assert recording.note == "" and len(recording) == len(documents)
    positions = list(range(len(documents)))
    order.shuffle(positions)  # seeking back and forth: from key frames, and on from the last one
    for i in positions:
        sample = recording.sample(i)
        assert sample.document == as_read(documents[i])
        assert sample.snapshot == snapshots[i]  # every field of the model, typed
        assert sample.leaks == leaks


JSON = st.recursive(st.none() | st.booleans() | st.integers() | FINITE | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=4))


@given(old=JSON, new=JSON)
def test_a_patch_turns_one_document_into_the_next(old, new):
    change = json.loads(json.dumps(delta.diff(old, new)))  # as stored
    assert json.dumps(delta.patch(old, change), sort_keys=True) == json.dumps(new, sort_keys=True)
    assert delta.diff(new, new) is None


def demo_samples(count, *, processes=8):
    """``count`` samples of the training-node demo, one second apart, as ``gputui record`` takes them."""
    now = [T0]
    options = parse(["--demo", "training-node", "--demo-processes", str(processes)])
    with open_pipeline(options, clock=lambda: now[0], pause=lambda s: None, environ={}) as pipeline:
        for _ in range(count):
            yield pipeline.sample().snapshot
            now[0] += 1.0


def test_a_demo_recording_reads_back_equal(tmp_path):
    snapshots = list(demo_samples(25))
    path = tmp_path / "demo.rec"
    write(path, [(s.taken_at, judged_document(s), {}) for s in snapshots], key_every=10)
    recording = Recording(path)
    assert recording.times == [s.taken_at for s in snapshots]
    assert [recording.sample(i).document for i in range(25)] == [as_read(judged_document(s)) for s in snapshots]
    assert recording.sample(3).snapshot == snapshots[3]
    figures = recording.sample(3).figures  # what a seek feeds the history
    assert (figures.taken_at, figures.devices, figures.processes) == (
        snapshots[3].taken_at, snapshots[3].devices, snapshots[3].processes)
    assert path.stat().st_size < 25 * 2000  # a sample's change, not its 20 KB document


def test_a_cut_off_or_damaged_end_is_left_out_with_a_note(tmp_path):
    snapshots = list(demo_samples(6))
    path = tmp_path / "cut.rec"
    write(path, [(s.taken_at, judged_document(s), {}) for s in snapshots], key_every=4)
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) - 200, len(data) - HEAD.size - 1):
        path.write_bytes(data[:cut])
        recording = Recording(path)
        assert len(recording) == 5 and "cut off" in recording.note
        assert recording.sample(4).document == as_read(judged_document(snapshots[4]))
    damaged = bytearray(data)
    damaged[-5] ^= 0xFF
    path.write_bytes(bytes(damaged))
    recording = Recording(path)
    assert len(recording) == 5 and "damaged" in recording.note


def test_not_a_recording_or_a_newer_one_is_a_one_line_error(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(UserError, match="not a gputui recording"):
        Recording(other)
    newer = tmp_path / "newer.rec"
    newer.write_text(json.dumps({"schema": "gputui.recording", "version": 99, "gputui": "9.0"}) + "\n")
    with pytest.raises(UserError, match="upgrade gputui"):
        Recording(newer)
    assert main(["replay", str(newer), "--once"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # a recording whose samples are snapshots of a newer version: the same, for --once
    newer_snapshot = tmp_path / "newer-snapshot.rec"
    write(newer_snapshot, [(T0, {"schema": "gputui.snapshot", "version": 99, "snapshot": {}}, {})])
    assert main(["replay", str(newer_snapshot), "--once"]) == 2
    assert "upgrade gputui" in capsys.readouterr().err


def test_a_full_file_rotates_and_three_are_kept(tmp_path):
    snapshots = list(demo_samples(3))
    path = tmp_path / "r.rec"
    samples = [(s.taken_at, judged_document(s), {}) for s in snapshots]
    for _ in range(5):
        write(path, samples, max_size=1)  # a file already there rotates too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.rec", "r.rec.1", "r.rec.2", "r.rec.3"]
    assert len(Recording(path)) == 1  # each sample filled the file: the last one is in it alone
    assert Recording(tmp_path / "r.rec.1").sample(0).document == as_read(samples[1][1])


def test_at_takes_offsets_clock_times_and_iso_times():
    start = datetime(2026, 1, 5, 9, 0, 0).astimezone().timestamp()  # local, as clock times are
    assert moment("90s", start) == start + 90
    assert moment("1h30m", start) == start + 5400
    assert moment("09:01:05", start) == start + 65
    assert moment("08:59", start) == start + 86340  # before the start: the next day
    assert moment("2026-01-05T09:00:00+00:00", start) == datetime(2026, 1, 5, 9, tzinfo=timezone.utc).timestamp()
    with pytest.raises(UserError, match="--at yesterday"):
        moment("yesterday", start)
    for no_time in ("25:00", "09:99", "09:00:60", "0001-01-01T00:00:00"):  # one line, not a traceback
        with pytest.raises(UserError, match=f"--at {no_time}: give an offset"):
            moment(no_time, start)


def once_live(options, start, first, then):
    """--once in a demo begun at ``start``, its readings at ``first`` and ``then``."""
    live = [start]
    with open_pipeline(options, clock=lambda: live[0], pause=lambda s: live.__setitem__(0, then),
                       environ={}) as pipeline:
        live[0] = first
        sample = pipeline.sample()
        return snapshot_text(sample.snapshot, options, sample.judgements)


@pytest.mark.usefixtures("utc")
def test_replay_once_at_a_time_prints_what_once_printed_then(tmp_path, capsys, monkeypatch):
    path = recorded_demo(tmp_path)
    recording = Recording(path)
    assert len(recording) == 5 and recording.times[0] > T0  # --once's first reading came first
    monkeypatch.setattr(terminal, "width", lambda: 120)
    options = parse(["--demo", "training-node", "--once"])
    for at, i in (("2s", 2), ("0s", 0), (datetime.fromtimestamp(recording.times[4], timezone.utc).isoformat(), 4)):
        # --once in a demo begun at the same moment (the simulated machine's time runs from its start),
        # run at the moment of sample i, its first reading (for CPU %) at the recorded one before it
        printed_live = once_live(options, T0, recording.times[i - 1] if i else T0, recording.times[i])
        assert main(["replay", str(path), "--once", "--at", at]) == 0
        # which sample it is, first: --once of 5 seconds ago looks just like --once of now
        heading = f"replay {path}: sample {i + 1} of 5, 2026-01-05 09:00:0{i} UTC, {i}s into the recording\n"
        # but who holds the GPUs idle, which the recorder judged over the i seconds it had watched
        replayed = capsys.readouterr().out
        assert f"watched {i} s of the 10 min" in replayed, at
        assert _without_idle(replayed) == _without_idle(heading + printed_live), at


def _without_idle(text):
    """--once's text up to its "Who holds the GPUs" section (the last but the problems)."""
    head, _, section = text.partition("\nWho holds the GPUs\n")
    return head + "".join(line + "\n" for line in section.splitlines() if line.startswith("! "))


def test_replay_json_at_a_time_is_the_document_recorded(tmp_path, capsys):
    path = recorded_demo(tmp_path, seconds=3)
    assert main(["replay", str(path), "--json", "--at", "1s"]) == 0
    document = json.loads(capsys.readouterr().out)
    times = Recording(path).times
    # which sample it is, in the one field the recorded document had not
    assert document.pop("replay") == {"sample": 2, "samples": 3, "taken_at": times[1], "start": times[0],
                                      "end": times[2]}
    sample = Recording(path).sample(1)
    assert document["schema"] == "gputui.snapshot" and document == sample.document
    probed = {report["pid"] for report in document["snapshot"]["probes"]}
    assert probed and set(sample.verdicts) == probed  # each probed process's leak verdict with it


def replay_json(path, at, capsys):
    """``gputui replay FILE --json --at AT``'s exit code, its document's ``replay`` field, stderr."""
    code = main(["replay", str(path), "--json", "--at", at])
    out, err = capsys.readouterr()
    return code, json.loads(out)["replay"] if out else None, err


@pytest.mark.usefixtures("utc")
def test_at_outside_the_recording_is_an_error_naming_its_span(tmp_path, capsys):
    path = recorded_demo(tmp_path)  # samples at 09:00:00.3 to 09:00:04.3
    span = "demo.rec holds 2026-01-05 09:00:00 to 09:00:04 UTC (4s, 5 samples)\n"
    for at, where in (
            ("08:59:30", " (the clock time 2026-01-05 08:59:30 UTC) is before the recording's start"),
            ("2026-01-05T08:00:00Z", " is before the recording's start"),
            ("99h", " is after the recording's end"),
            ("6s", " is after the recording's end"),
            ("09:00:30", " (the clock time 2026-01-05 09:00:30 UTC) is after the recording's end"),
            # (the replay's header writes offsets so: a clock time that looks like one says how to write it)
            ("2:20", " (the clock time 2026-01-05 02:20:00 UTC; an offset into the recording is written 2m20s)"
                     " is before the recording's start")):
        assert replay_json(path, at, capsys) == (2, None, f"gputui: --at {at}{where}: {span}"), at
        assert main(["replay", str(path), "--once", "--at", at]) == 2
        assert capsys.readouterr() == ("", f"gputui: --at {at}{where}: {span}")
    # the clock time it was started at is its first sample; one interval past the last, still the last
    assert replay_json(path, "09:00:00", capsys)[:2] == (0, {"sample": 1, "samples": 5, "taken_at": T0 + 0.3,
                                                            "start": T0 + 0.3, "end": T0 + 4.3})
    assert replay_json(path, "5s", capsys)[1]["sample"] == 5
    assert replay_json(path, "5.1s", capsys)[0] == 2
    (tmp_path / "demo.rec.1").write_bytes(b"")  # a rotated file beside it: where the earlier samples went
    assert "before the recording's start (demo.rec.1 holds older samples): demo.rec holds" in replay_json(
        path, "08:59:30", capsys)[2]


def test_the_replay_field_is_in_the_schema(tmp_path, capsys):
    from plain_data import errors

    from gputui.plain.schema import SCHEMA

    path = recorded_demo(tmp_path, seconds=2)
    assert main(["replay", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["replay"]["sample"] == 2 and errors(document, SCHEMA) == []
    document["replay"]["sample"] = 0
    assert errors(document, SCHEMA) != []


def test_a_clock_time_is_read_on_the_day_that_puts_it_in_the_recording():
    start = datetime(2026, 1, 5, 23, 59, 58).astimezone().timestamp()  # a recording across midnight
    assert moment("00:00:01", start, start + 6) == start + 3  # the next day's
    assert moment("23:59:59", start, start + 6) == start + 1
    assert moment("23:00", start, start + 6) == start - 3598  # in neither: the first day's, before it


def leaky_run():
    """The leaky demo's first run, in scenario seconds: its OOM (189.4) and its exit (192.4)."""
    from gputui.collect.sim.scenarios import build

    (job,) = [p.job for p in build("leaky").programs if p.job is not None]
    return job.run_at(0.0)


def test_a_recording_keeps_the_process_an_oom_ended(tmp_path, capsys, monkeypatch):
    """As the live monitor does (gputui/link/endings.py): the leaky demo's job, gone after its OOM, stays on
    every later sample with the report it left."""
    monkeypatch.setenv("GPUTUI_OOM_DIR", str(tmp_path / "oom"))  # no report file: its last report it is
    path = recorded_demo(tmp_path, 198, scenario="leaky", interval=3)  # a sample every 3 s to 195.3
    recording, run_ = Recording(path), leaky_run()
    dying = recording.sample(recording.index_at(T0 + run_.exit_at)).snapshot  # the last sample it was in
    (report,) = dying.probes
    assert report.pid == 51200 and report.last_oom.at == pytest.approx(T0 + run_.oom_at)
    held = sum(p.gpu_memory for p in dying.processes if p.pid == 51200)
    last = recording.sample(len(recording) - 1).snapshot
    assert last.taken_at > T0 + run_.exit_at and last.probes == ()
    assert last.ended == (EndedProcess(pid=51200, ended_at=report.last_oom.at, report=report, report_file=None,
                                       user="dev", devices=(0,), gpu_memory=held),)
    assert main(["replay", str(path), "--json"]) == 0  # and so --json prints it
    assert [e["pid"] for e in json.loads(capsys.readouterr().out)["snapshot"]["ended"]] == [51200]


def test_at_needs_once_or_json():
    with pytest.raises(SystemExit):
        parse(["replay", "x.rec", "--at", "5m"])


def test_record_takes_interval_duration_and_size():
    options = parse(["--demo", "training-node", "record", "r.rec", "--interval", "2", "--duration", "1h30m",
                     "--max-size", "50M"])
    assert (options.mode, options.interval) == ("record", 2.0)
    assert options.record == RecordOptions(file="r.rec", duration=5400.0, max_size=50 << 20)  # M: MiB, as everywhere
    for wrong in (["--duration", "soon"], ["--max-size", "0"], ["--max-size", "lots"]):
        with pytest.raises(SystemExit):
            parse(["record", "r.rec", *wrong])
