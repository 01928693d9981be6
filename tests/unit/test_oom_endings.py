"""The live monitor keeps a probed process that an OOM ended (gputui/link/endings.py), found by the
report file its probe wrote or by the OOM its last report carried; data layer only, no Textual."""

from __future__ import annotations

import os

from gputui.link import oom_file
from gputui.link.endings import KEEP, OomEndings
from gputui.model import (
    EndedProcess,
    GpuProcess,
    OomRecord,
    ProbeReport,
    Snapshot,
    to_jsonable,
)

T0 = 1_767_603_600.0
GiB = 1 << 30


def report(pid: int, at: float, oom_at: float | None = None) -> ProbeReport:
    oom = None if oom_at is None else OomRecord(at=oom_at, device="cuda:1", requested=GiB,
                                                line="train.py:42 in forward", phase="forward", step=99)
    return ProbeReport(pid=pid, taken_at=at, command=("python", "train.py"), last_oom=oom)


def snapshot(at: float, *probes: ProbeReport) -> Snapshot:
    rows = tuple(GpuProcess(pid=r.pid, device_index=1, gpu_memory=30 * GiB, user="lena") for r in probes)
    return Snapshot(taken_at=at, processes=rows, probes=probes)


def write_report(directory, pid: int, at: float, oom_at: float) -> str:
    path = oom_file.write(to_jsonable(report(pid, at, oom_at)), pid, directory, now=at)
    os.utime(path, (at, at))
    return str(path)


def test_a_probed_process_that_left_a_report_is_kept_with_it(tmp_path):
    endings = OomEndings(lambda: tmp_path)
    assert endings.add_to(snapshot(T0, report(7, T0))).ended == ()
    endings.add_to(snapshot(T0 + 1, report(7, T0 + 1)))
    path = write_report(tmp_path, 7, T0 + 1.5, oom_at=T0 + 1.4)
    (ended,) = endings.add_to(snapshot(T0 + 2)).ended
    assert ended == EndedProcess(pid=7, ended_at=T0 + 1.4, report=report(7, T0 + 1.5, T0 + 1.4), report_file=path,
                                 user="lena", devices=(1,), gpu_memory=30 * GiB)
    # and it stays, sample after sample
    assert endings.add_to(snapshot(T0 + 60)).ended == (ended,)


def test_a_process_that_simply_exits_is_let_go(tmp_path):
    endings = OomEndings(lambda: tmp_path)
    endings.add_to(snapshot(T0, report(7, T0)))
    for second in range(1, 15):
        assert endings.add_to(snapshot(T0 + second)).ended == ()


def test_a_report_older_than_the_process_is_a_former_processes(tmp_path):
    write_report(tmp_path, 7, T0 - 3600, oom_at=T0 - 3600)  # the same pid, an hour ago
    endings = OomEndings(lambda: tmp_path)
    endings.add_to(snapshot(T0, report(7, T0)))
    assert endings.add_to(snapshot(T0 + 1)).ended == ()


def test_an_oom_in_the_last_report_counts_only_if_it_came_just_before(tmp_path):
    endings = OomEndings(lambda: tmp_path)
    endings.add_to(snapshot(T0, report(7, T0 + 10, oom_at=T0 + 9), report(8, T0 + 600, oom_at=T0)))
    (ended,) = endings.add_to(snapshot(T0 + 11)).ended
    assert ended.pid == 7 and ended.report_file is None  # no file: the probe's last report it is
    # 8 survived its OOM (caught, a smaller batch) ten minutes before it exited: not ended by it


def test_a_pid_in_use_again_drops_the_ended_row(tmp_path):
    endings = OomEndings(lambda: tmp_path)
    endings.add_to(snapshot(T0, report(7, T0, oom_at=T0)))
    assert [e.pid for e in endings.add_to(snapshot(T0 + 1)).ended] == [7]
    assert endings.add_to(snapshot(T0 + 2, report(7, T0 + 2))).ended == ()


def test_the_latest_few_are_kept_oldest_first(tmp_path):
    endings = OomEndings(lambda: tmp_path)
    for i in range(KEEP + 3):
        pid = 100 + i
        endings.add_to(snapshot(T0 + 2 * i, report(pid, T0 + 2 * i, oom_at=T0 + 2 * i)))
        last = endings.add_to(snapshot(T0 + 2 * i + 1))
    assert [e.pid for e in last.ended] == list(range(100 + 3, 100 + KEEP + 3))


def test_a_sources_own_ended_processes_are_kept(tmp_path):
    """A replay's snapshots carry the processes that had ended when they were recorded."""
    earlier = EndedProcess(pid=5, ended_at=T0 - 10, report=report(5, T0 - 10, oom_at=T0 - 10))
    endings = OomEndings(lambda: tmp_path)
    endings.add_to(snapshot(T0, report(7, T0, oom_at=T0)))
    shown = endings.add_to(Snapshot(taken_at=T0 + 1, ended=(earlier,))).ended
    assert [e.pid for e in shown] == [5, 7]
    assert endings.add_to(Snapshot(taken_at=T0 + 2)).ended[0].pid == 7
