"""Recordings on shared boxes: created 0600 and never through a planted name, a full disk said in one
line with what was written kept, damage read past at the next key frame, and crafted files refused in
one line within bounded memory."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_data import judged_document
from record_helpers import DOCUMENT, KEY_BODY, change, crafted
from ui_data import T0, training_snapshot

from gputui.cli import main, parse
from gputui.errors import UserError
from gputui.record import run, writer
from gputui.record.format import HEAD
from gputui.record.reader import Recording
from gputui.record.writer import Recorder


def write(path, documents, **options):
    recorder = Recorder(path, interval=1.0, host="test", **options)
    for i, document in enumerate(documents):
        recorder.add(T0 + i, document, {})
    recorder.close()


def counting(count):
    """``count`` small documents, each a change from the one before (what a figure does)."""
    return [{"snapshot": {"taken_at": T0 + i, "devices": [{"memory_used": i * 1000}]}} for i in range(count)]


def frame_offsets(data):
    """Where each frame's head starts."""
    offset, offsets = data.index(b"\n") + 1, []
    while offset < len(data):
        offsets.append(offset)
        offset += HEAD.size + HEAD.unpack_from(data, offset)[1]
    return offsets


def fails(argv, capsys):
    """``main(argv)``'s exit code and its stderr, which must be one line."""
    code = main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return code, err


# -- item 7: created anew, 0600, never through a planted name ------------------------------------------

def test_a_recording_is_readable_by_its_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        write(tmp_path / "r.rec", counting(2))
    finally:
        os.umask(old)
    assert oct((tmp_path / "r.rec").stat().st_mode & 0o777) == "0o600"


def test_a_planted_dangling_symlink_is_refused_not_followed(tmp_path, capsys):
    target = tmp_path / "root-creates-this"
    (tmp_path / "r.rec").symlink_to(target)
    code, err = fails(["--demo", "training-node", "record", str(tmp_path / "r.rec"), "--duration", "1s"], capsys)
    assert code == 2 and "r.rec is a symbolic link: gputui record neither follows nor moves one" in err
    assert not target.exists() and (tmp_path / "r.rec").is_symlink()


@pytest.mark.parametrize("planted", ["r.rec.1", "r.rec.3"])
def test_rotation_refuses_a_planted_name_and_moves_nothing(tmp_path, planted):
    write(tmp_path / "r.rec", counting(1))
    target = tmp_path / "elsewhere"
    (tmp_path / planted).symlink_to(target)
    with pytest.raises(UserError, match=f"{planted} is a symbolic link"):
        write(tmp_path / "r.rec", counting(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.rec", planted])
    assert not target.exists()


def test_rotation_refuses_another_users_file(tmp_path):
    other = tmp_path / "r.rec"
    other.write_bytes(b"theirs")
    try:
        os.chown(other, 54321, 54321)
    except PermissionError:
        pytest.skip("needs root to give a file away")
    with pytest.raises(UserError, match="recording .*r.rec belongs to uid 54321, not to you"):
        write(other, counting(1))
    assert other.read_bytes() == b"theirs" and not (tmp_path / "r.rec.1").exists()


def test_a_name_planted_after_rotation_is_not_opened(tmp_path):
    (tmp_path / "r.rec").symlink_to(tmp_path / "target")  # planted between rotate() and create()
    with pytest.raises(UserError, match="appeared as it was moved aside"):
        writer.create(tmp_path / "r.rec")
    assert not (tmp_path / "target").exists()


# -- item 12: a full disk ----------------------------------------------------------------------------

def test_a_full_disk_keeps_every_whole_sample(tmp_path, monkeypatch):
    real_write, calls = os.write, [0]

    def filling(fd, data):  # the 6th write takes half its bytes, then the disk is full
        calls[0] += 1
        if calls[0] == 6:
            return real_write(fd, bytes(data[:len(data) // 2]))
        if calls[0] > 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(writer.os, "write", filling)
    documents = counting(10)
    with pytest.raises(UserError) as raised:
        write(tmp_path / "r.rec", documents, key_every=3)
    assert str(raised.value) == (f"{tmp_path}/r.rec: the disk is full (No space left on device): recording "
                                 "stopped, the 4 samples before kept in it")  # the header, then 4 samples
    recording = Recording(tmp_path / "r.rec")
    assert recording.note == "" and len(recording) == 4
    assert [recording.sample(i).document for i in range(4)] == documents[:4]


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs with 48 KiB left free."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (disk / "filler").write_bytes(b"\0" * (208 << 10))
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_record_on_a_full_disk_says_so_and_its_samples_read_back(small_disk):
    now = [T0]

    def pause(seconds):
        now[0] += seconds

    path = small_disk / "r.rec"
    options = parse(["--demo", "training-node", "record", str(path), "--duration", "1h"])
    with pytest.raises(UserError, match=r"r\.rec: the disk is full \(No space left on device\): recording "
                                        r"stopped, the (\d+) samples before kept in it") as raised:
        run.record(options, clock=lambda: now[0], pause=pause, quiet=True)
    kept = int(str(raised.value).split("the ")[-1].split()[0])
    recording = Recording(path)
    assert kept > 1 and len(recording) == kept and recording.note == ""
    assert recording.sample(kept - 1).snapshot.devices  # the last one reads, a snapshot like any


# -- item 10: damage read past at the next key frame ------------------------------------------------

@pytest.mark.parametrize("where", ["payload", "head"])
def test_a_flipped_bit_loses_only_up_to_the_next_key_frame(tmp_path, where, capsys):
    documents = counting(660)
    path = tmp_path / "r.rec"
    write(path, documents)  # key frames at 0, 300 and 600
    data = bytearray(path.read_bytes())
    tenth = frame_offsets(data)[10]
    data[tenth + (HEAD.size + 3 if where == "payload" else 2)] ^= 0x10  # its payload, or its length
    path.write_bytes(bytes(data))
    recording = Recording(path)
    assert len(recording) == 370
    assert recording.note == (f"{path}: damaged after sample 10 (at 9s): 290 samples lost, read on from the "
                              "next key frame: the 370 samples left are read")
    assert recording.sample(9).document == documents[9]
    assert recording.sample(10).document == documents[300] and recording.times[10] == T0 + 300
    assert recording.sample(369).document == documents[659]
    assert recording.sample(5).document == documents[5]  # and back, from the first key frame


def test_damage_at_the_start_and_at_the_end_are_both_said(tmp_path):
    documents = counting(30)
    path = tmp_path / "r.rec"
    write(path, documents, key_every=10)
    data = bytearray(path.read_bytes())
    offsets = frame_offsets(data)
    data[offsets[0] + HEAD.size + 1] ^= 1
    data[offsets[25] + HEAD.size + 1] ^= 1
    path.write_bytes(bytes(data))
    recording = Recording(path)
    assert recording.note == (f"{path}: damaged at its start: 10 samples lost, read on from the next key frame; "
                              "its end is damaged: the 15 samples left are read")
    assert [recording.sample(i).document for i in range(15)] == documents[10:25]


# -- item 11: crafted recordings ---------------------------------------------------------------------

@pytest.mark.parametrize("body, why", [
    (change({"devices": {"n": 10 ** 9, "i": {}}}), "a change to an array of 4 items that asks for 1000000000"),
    (change({"devices": {"n": 4, "i": {"7": {"=": 1}}}}), "a change to item '7' of an array of 4"),  # IndexError
    (change({"devices": {"k": {"a": {"=": 1}}}}), "a change to an object that is not one"),  # a list as a dict
    (change({"taken_at": {"k": {}}}), "a change to an object that is not one"),  # TypeError, a number
    ({"change": [1], "leaks": {}}, "a change that is not an object"),
    ({"change": None, "leaks": [1]}, "not a sample's object"),
    (b"[" * 100_000, "JSON nested too deeply"),  # RecursionError
    (b"\xff\xfe not JSON", "does not decode"),
], ids=["billion", "index", "list-as-object", "number-as-object", "not-a-change", "leaks", "deep", "not-utf8"])
def test_a_crafted_sample_is_one_line(tmp_path, capsys, body, why):
    path = crafted(tmp_path / "c.rec", KEY_BODY, {"change": None, "leaks": {}}, body, KEY_BODY)
    code, err = fails(["replay", str(path), "--json", "--at", "2s"], capsys)
    assert code == 2 and err.startswith(f"gputui: {path}: sample 2 does not decode: ") and why in err
    recording = Recording(crafted(tmp_path / "end.rec", KEY_BODY, body))  # the last: left out at once
    assert len(recording) == 1 and recording.note.endswith("its end is damaged: the 1 samples before it are read")


def test_a_deeply_nested_header_is_one_line(tmp_path, capsys):
    (tmp_path / "deep.rec").write_bytes(b"[" * 60_000 + b"\n")  # a RecursionError before
    code, err = fails(["replay", str(tmp_path / "deep.rec"), "--once"], capsys)
    assert code == 2 and "deep.rec is not a gputui recording" in err


@pytest.mark.parametrize("when", [float("nan"), -1e12, 1e300])
def test_a_frame_time_no_clock_has_is_damage(tmp_path, capsys, when):
    path = crafted(tmp_path / "time.rec", KEY_BODY, times=[when])  # datetime took these, with a traceback
    code, err = fails(["replay", str(path), "--once", "--at", "09:00:05"], capsys)
    assert code == 2 and err.endswith("time.rec: a recording without an intact sample\n")


# gputui in a grandchild held to 1.5 GiB of address space (the old reader fails, not the machine), its
# peak measured by its parent: a child of pytest itself would inherit pytest's resident memory as its peak.
PEAK = """
import resource, subprocess, sys
GPUTUI = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29)); "
          "from gputui.cli import main; sys.exit(main(sys.argv[1:]))")
code = subprocess.run([sys.executable, "-c", GPUTUI, *sys.argv[2:]]).returncode
with open(sys.argv[1], "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def peak_rss(tmp_path, argv):
    """``gputui argv``: its peak resident memory in MiB, its exit code and its stderr."""
    peak = tmp_path / "peak"
    done = subprocess.run([sys.executable, "-c", PEAK, str(peak), *argv], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return int(peak.read_text()) / 1024, done.returncode, done.stderr


def bomb(size):
    """A key frame body whose JSON inflates to ``size`` bytes: a list of zeros, 1000 to 1 compressed
    (in chunks of one MiB: the test itself does not hold it)."""
    return [b'{"document": {"x": ['] + [b"0," * (1 << 19)] * (size >> 20) + [b'0]}, "leaks": {}}']


def test_a_deflate_bomb_is_refused_within_bounded_memory(tmp_path):
    path = crafted(tmp_path / "bomb.rec", bomb(512 << 20))
    assert path.stat().st_size < 1 << 20
    rss, code, err = peak_rss(tmp_path, ["replay", str(path), "--json"])
    assert code == 2 and err == f"gputui: {path}: a recording without an intact sample\n"
    assert rss < 150, rss  # the old reader: 512 MiB of text and a list of 268 million items


def test_a_stream_that_inflates_too_far_is_refused(tmp_path):
    filler = b" " * (15 << 20) + b'{"change": null, "leaks": {}}'  # JSON: within a frame's bound, 5 of them not
    recording = Recording(crafted(tmp_path / "end.rec", KEY_BODY, *[filler] * 5))
    assert len(recording) == 5 and recording.note.endswith("its end is damaged: the 5 samples before it are read")
    recording = Recording(crafted(tmp_path / "middle.rec", KEY_BODY, *[filler] * 5, KEY_BODY))
    assert len(recording) == 7 and recording.sample(4).document == DOCUMENT  # 60 MiB and a bit: within
    with pytest.raises(ValueError, match="sample 5 does not decode: its stream inflates past 64 MiB since its key"):
        recording.sample(5)


def test_a_stream_of_too_many_values_is_refused_within_bounded_memory(tmp_path):
    # Small in bytes, large in memory: "[]," is 3 bytes and a 64-byte list. Each change adds 1.2M lists
    # to the document; the fourth takes the stream past 4M values.
    lists = [[b'{"change": {"k": {"a%d": {"=": [' % i, b"[]," * 1_200_000, b'[]]}}}, "leaks": {}}'] for i in range(4)]
    path = crafted(tmp_path / "values.rec", KEY_BODY, *lists)
    rss, code, err = peak_rss(tmp_path, ["replay", str(path), "--json"])
    assert code == 0 and err == f"gputui: {path}: its end is damaged: the 4 samples before it are read\n"
    assert rss < 350, rss  # 3.6M lists held: the most a stream may hold is about 300 MB of them
    with pytest.raises(ValueError, match="sample 4 does not decode: its stream holds over 4194304 JSON values"):
        Recording(crafted(path, KEY_BODY, *lists, KEY_BODY)).sample(4)


def test_a_billion_items_asked_for_is_refused_within_bounded_memory(tmp_path):
    path = crafted(tmp_path / "list.rec", KEY_BODY, change({"devices": {"n": 10 ** 9, "i": {}}}), KEY_BODY)
    rss, code, err = peak_rss(tmp_path, ["replay", str(path), "--json", "--at", "1s"])
    assert code == 2 and "a change to an array of 4 items that asks for 1000000000" in err
    assert rss < 150, rss


# -- all of it: whatever the bytes, a partial read with a note or one line ---------------------------

@pytest.fixture(scope="module")
def real_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "real.rec"
    snapshots = [training_snapshot(T0 + i) for i in range(8)]
    write(path, [judged_document(s) for s in snapshots], key_every=3)
    return path.read_bytes()


def replay_reads_in_part_or_is_one_line(path, at, capsys):
    code = main(["replay", str(path), "--json", "--at", f"{at}s"])
    err = capsys.readouterr().err
    assert code in (0, 2) and err.count("\n") <= 2  # the note, and the error or nothing
    assert all(line.startswith("gputui: ") for line in err.splitlines())
    assert code == 2 or not err or "read" in err


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), max_size=4),
       cut=st.none() | st.integers(0, 1 << 20), junk=st.binary(max_size=64), at=st.integers(0, 9),
       first_time=st.none() | st.floats())
def test_any_damage_reads_in_part_or_is_one_line(tmp_path, capsys, real_recording, flips, cut, junk, at,
                                                 first_time):
    data = bytearray(real_recording)
    if first_time is not None:  # the times are outside the CRC
        head = data.index(b"\n") + 1
        data[head:head + HEAD.size] = HEAD.pack(*HEAD.unpack_from(data, head)[:3], first_time)
    for where, bits in flips:
        data[where % len(data)] ^= bits
    if cut is not None:
        data = data[:cut % len(data)] + junk
    path = tmp_path / "fuzzed.rec"
    path.write_bytes(bytes(data))
    replay_reads_in_part_or_is_one_line(path, at, capsys)


# Patches as a crafted file may hold them: the patch words and small values, nested.
WORDS = st.sampled_from(["=", "k", "x", "n", "i", "0", "1", "3", "-1", "devices", "snapshot", "taken_at"])
PATCHES = st.recursive(st.none() | st.booleans() | st.integers(-2, 6) | st.floats() | WORDS,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORDS, inner, max_size=3),
                       max_leaves=12)


@FUZZ
@given(patch=PATCHES, leaks=PATCHES, at=st.integers(0, 3))
def test_any_crafted_change_reads_in_part_or_is_one_line(tmp_path, capsys, patch, leaks, at):
    body = {"change": {"k": {"snapshot": patch}}, "leaks": leaks}
    path = crafted(tmp_path / "crafted.rec", KEY_BODY, body, {"change": None, "leaks": {}}, KEY_BODY)
    replay_reads_in_part_or_is_one_line(path, at, capsys)


def test_a_header_interval_that_is_not_a_period_reads_as_one_second(tmp_path):
    path = crafted(tmp_path / "i.rec", KEY_BODY)
    data = path.read_bytes().replace(b'"interval": 1.0', b'"interval": Infinity', 1)
    path.write_bytes(data)
    assert Recording(path).interval == 1.0
