"""The OOM report's directory and files against other users on a shared box (issue 30): `gputui oom`
and the probe's writer trust only a private directory of the user's, and only the user's own regular
files in it; names are shown with control characters made visible; a huge file is refused unread."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT

from gputui import cli
from gputui.link import oom_file, paths
from gputui.link.endings import OomEndings
from gputui.model import OomRecord, ProbeReport, Snapshot, to_jsonable

AS_ROOT = pytest.mark.skipif(os.getuid() != 0, reason="handing a directory to another uid needs root")
REAL = ROOT / "tests" / "fixtures" / "torch" / "real-h100-oom-report.json"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07"  # a title, a cleared screen, the clipboard
T0 = 1_767_603_600.0
FUTURE = time.time() + 10**6  # dated by a clock set wrong, or by someone who wants theirs chosen
OTHER = 65534


def plant(directory: Path, name: str, mtime: float, owner: int = OTHER) -> Path:
    """A valid-looking report left by another user (the real report's contents)."""
    path = directory / name
    shutil.copyfile(REAL, path)
    os.utime(path, (mtime, mtime))
    os.chown(path, owner, owner)
    return path


@pytest.fixture
def fallback_root(tmp_path, monkeypatch):
    """/tmp of `gputui oom` and the probe, with no $XDG_RUNTIME_DIR and no override: /tmp/gputui-UID."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(paths, "FALLBACK_ROOT", root)
    monkeypatch.setattr(paths, "RUNTIME_ROOT", tmp_path / "run-user")
    for name in ("XDG_RUNTIME_DIR", paths.DIR_ENV, oom_file.DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    return root


@AS_ROOT
def test_gputui_oom_refuses_a_fallback_directory_another_user_made(fallback_root, capsys):
    planted = fallback_root / f"gputui-{os.getuid()}"
    planted.mkdir(mode=0o755)
    plant(planted, f"oom-1-{HOSTILE}.json", T0)
    os.chown(planted, OTHER, OTHER)
    assert cli.main(["oom"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"gputui: the OOM report directory {planted} belongs to uid {OTHER}, not to you (uid 0); "
                   "set GPUTUI_OOM_DIR to a private directory of yours\n")


def test_gputui_oom_refuses_a_directory_others_may_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    shutil.copyfile(REAL, shared / "oom-1-20260101T000000.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT), oom_file.DIR_ENV: str(shared)}
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert (shown.returncode, shown.stdout) == (2, "")
    assert shown.stderr == (f"gputui: the OOM report directory {shared} is open to other users (mode 777); "
                            f"run: chmod 700 {shared}\n")


def test_a_report_names_control_characters_are_shown_not_obeyed(tmp_path):
    path = tmp_path / f"oom-1-{HOSTILE}.json"
    shutil.copyfile(REAL, path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom", str(path)], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    title = shown.stdout.splitlines()[0]
    assert title.startswith(f"OOM report {tmp_path}/oom-1-\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07"
                            ".json, written ")
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout


@AS_ROOT
def test_the_probe_refuses_an_oom_directory_another_user_owns_and_says_why(tmp_path, monkeypatch, capsys):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER, OTHER)
    monkeypatch.setenv(oom_file.DIR_ENV, str(theirs))
    pytest.importorskip("torch")  # the probe's OOM watch runs in a training job, with its torch
    from gputui.probe.board import Board
    from gputui.probe.oom import OomWatch

    watch = OomWatch(Board(), write_report=lambda: str(oom_file.write({}, 7, oom_file.oom_dir())))
    watch._excepthook(RuntimeError, RuntimeError("DefaultCPUAllocator: can't allocate memory"), None)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == (f"gputui: out of memory; no report was written: the OOM report directory {theirs} belongs "
                    f"to uid {OTHER}, not to you (uid 0); set GPUTUI_OOM_DIR to a private directory of yours")
    assert list(theirs.iterdir()) == []
    assert watch.last is not None and watch.last.report_file is None
    (problem,) = watch.problems.lines()
    assert problem.startswith("writing the OOM report: ProbeDirUnsafe: the OOM report directory")


@AS_ROOT
def test_only_the_users_own_reports_are_read_or_pruned(tmp_path):
    """A private directory that still holds other users' files (or links) from before: newer decoys are
    never chosen, never make the job prune its own report, and are left as they are."""
    ours = tmp_path / "oom"
    ours.mkdir(mode=0o700)
    forged = tmp_path / "forged.json"
    plant(tmp_path, "forged.json", FUTURE, owner=0)
    decoys = [plant(ours, f"oom-9-2099010100{i:04d}.json", FUTURE + i) for i in range(oom_file.KEEP + 5)]
    (ours / "oom-9-20990101T999999.json").symlink_to(forged)  # a link to a forged report of root's own
    written = oom_file.write({"pid": 7, "taken_at": T0}, 7, ours, now=T0)
    assert written.exists()
    assert oom_file.latest(ours) == written
    assert oom_file.of_process(ours, 9, since=0.0) is None
    assert all(d.exists() for d in decoys) and forged.exists()
    assert oom_file.read(written) == {"pid": 7, "taken_at": T0}


def test_the_report_just_written_outlives_the_users_own_reports_dated_in_the_future(tmp_path):
    """After the clock is set back, every older report looks newer: the one just written is kept."""
    for i in range(oom_file.KEEP + 3):
        path = oom_file.write({"pid": 8, "taken_at": float(i)}, 8, tmp_path, now=T0 + i)
        os.utime(path, (FUTURE + i, FUTURE + i))
    written = oom_file.write({"pid": 7, "taken_at": T0}, 7, tmp_path, now=T0)
    kept = sorted(tmp_path.iterdir())
    assert written in kept and len(kept) == oom_file.KEEP


def test_the_live_monitor_takes_no_report_from_a_directory_others_may_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    report = ProbeReport(pid=7, taken_at=T0, command=("python", "train.py"))
    ended = dataclasses.replace(report, last_oom=OomRecord(at=T0 + 1, device="cuda:0", requested=1 << 30))
    oom_file.write(to_jsonable(ended), 7, shared, now=T0 + 1)
    shared.chmod(0o777)  # anyone could have put that report there
    endings = OomEndings(lambda: shared)
    endings.add_to(Snapshot(taken_at=T0, probes=(report,)))
    assert endings.add_to(Snapshot(taken_at=T0 + 2)).ended == ()


def test_a_huge_report_is_refused_unread(tmp_path):
    huge = tmp_path / "oom-1-20260101T000000.json"
    with open(huge, "wb") as out:
        out.truncate(2 << 30)  # sparse: 2 GiB that take no disk
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Measured from a small parent: a child's peak RSS on Linux starts from its parent's (pytest's) at fork.
    measure = ("import json, resource, subprocess, sys\n"
               "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
               "print(json.dumps([r.returncode, r.stdout, r.stderr, peak]))")
    shown = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "gputui", "oom", str(huge)],
                           env=env, capture_output=True, text=True, timeout=120)
    returncode, out, err, peak_kib = json.loads(shown.stdout)
    assert peak_kib < 100 << 10  # the interpreter and gputui (about 20 MiB), not the file (2.5 GiB before)
    assert (returncode, out) == (2, "")
    assert err == f"gputui: OOM report {huge} is {2 << 30} bytes; the limit is {oom_file.READ_LIMIT}\n"
    assert oom_file.READ_LIMIT > 1000 * REAL.stat().st_size  # a real report (7.6 KB) is far below it
