"""Recordings on shared boxes: created 0600 and never through a planted name, a full disk said in one
line with what was written kept."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from gputui.cli import main, parse
from gputui.errors import UserError
from gputui.record import run, writer
from gputui.record.format import HEAD
from gputui.record.reader import Recording
from gputui.record.writer import Recorder
from ui_data import T0


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
