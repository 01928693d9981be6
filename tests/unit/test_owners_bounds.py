"""Strings a process sets itself are bounded where the collector takes them in (issue 44 item 7).

Real processes of user nobody whose environments carry 131,000-byte values (the kernel's limit for one
string is 128 KiB): the collector's environment reader cuts each value, marked, so the owners, the jobs
and every output made from them (--once, --json, serve's /metrics) stay small.
"""

from __future__ import annotations

import json

import psutil
import pytest
from real_cgroups import NodeFiles, end, spawn
from test_serve_metrics import exposition

from gputui.collect.jobs import JobFinder
from gputui.collect.owners import OwnerReader
from gputui.model import PROCESS_OK, Device, GpuProcess, SlurmOwner, Snapshot
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.serve.sampling import Sample
from gputui.untrusted import TEXT_LIMIT, bounded

HUGE = 131_000
NOBODY = 65534
CUT = f"...(cut {HUGE - TEXT_LIMIT} characters)"
pytestmark = pytest.mark.skipif(psutil.Process().uids().effective != 0, reason="runs processes as user nobody")


def test_bounded_cuts_and_marks_only_what_is_too_long():
    short = "x" * TEXT_LIMIT
    assert bounded(short) is short
    assert bounded("y" * (TEXT_LIMIT + 5)) == "y" * TEXT_LIMIT + "...(cut 5 characters)"
    assert bounded("abcdef", 3) == "abc...(cut 3 characters)"


@pytest.fixture
def hostile():
    """Processes of nobody: one whose SLURM_JOB_ID is 131,000 digits, others naming a real-looking job with a
    131,000-byte job name, torchrun run id and master address."""
    huge = {"SLURM_JOB_NAME": "n" * HUGE, "TORCHELASTIC_RUN_ID": "r" * HUGE, "MASTER_ADDR": "m" * HUGE,
            "MASTER_PORT": "29500", "WORLD_SIZE": "2"}
    children = [spawn(NOBODY, {"SLURM_JOB_ID": "4" * HUGE, "SLURM_STEP_ID": "0", **huge})]
    children += [spawn(NOBODY, {"SLURM_JOB_ID": "81234", **huge, "RANK": str(r)}) for r in range(2)]
    yield children
    end(children)


def test_environment_values_are_cut_where_they_come_in(hostile):
    environ = JobFinder(psutil).environ(hostile[0].pid)
    assert environ is not None
    assert environ["SLURM_JOB_NAME"] == "n" * TEXT_LIMIT + CUT
    assert environ["SLURM_JOB_ID"] == "4" * TEXT_LIMIT + CUT
    assert environ["SLURM_STEP_ID"] == "0"  # short values are as they were


def collected(children, tmp_path) -> Snapshot:
    """The children as the collector makes them: owners read through the environment reader, jobs found."""
    finder = JobFinder(psutil)
    users = {c.pid: psutil.Process(c.pid).username() for c in children}
    owners = OwnerReader(NodeFiles(tmp_path), finder.environ, home="/nonexistent").owners(
        {pid: (1.0, user) for pid, user in users.items()})
    processes = tuple(GpuProcess(pid=c.pid, device_index=i, gpu_memory=1 << 30, ppid=1, user=users[c.pid],
                                 command=("python", "train.py"), state=PROCESS_OK, owner=owners[c.pid],
                                 started_at=psutil.Process(c.pid).create_time())
                      for i, c in enumerate(children))
    return finder.add_to(Snapshot(taken_at=0.0, devices=tuple(Device(index=i, uuid=f"GPU-{i}") for i in range(3)),
                                  processes=processes))


def test_owners_jobs_and_outputs_stay_small(hostile, tmp_path):
    snap = collected(hostile, tmp_path)
    first, *ranks = snap.processes
    assert first.owner is not None and first.owner.slurm is None  # 131,000 digits are no job id
    assert "its environment's SLURM_JOB_ID is no job id: not taken" in (first.owner.note or "")
    for rank in ranks:
        assert rank.owner is not None
        assert rank.owner.slurm == SlurmOwner(job="81234", name="n" * TEXT_LIMIT + CUT, source="environment")
    # the first's Slurm step (its cut id), the others' one (cut) run id: each key as cut as its values
    slurm, torchrun = snap.jobs
    assert slurm.key == "slurm " + "4" * TEXT_LIMIT + CUT + ".0" and [r.pid for r in slurm.ranks] == [first.pid]
    assert torchrun.key == "torchelastic " + "r" * TEXT_LIMIT + CUT
    assert [r.rank for r in torchrun.ranks] == [0, 1]
    # every output: the terminal, --json, serve's exposition
    text = render(snap, width=200)
    sample = Sample(snap)
    document = dumps(snapshot_document(snap, sample.judgements))
    metrics = exposition(sample)
    assert "n" * TEXT_LIMIT + CUT in json.loads(document)["snapshot"]["processes"][1]["owner"]["slurm"]["name"]
    assert len(text) < 10_000 and len(document) < 20_000 and len(metrics) < 100_000
    assert max(len(line) for line in metrics.splitlines()) < 2 * TEXT_LIMIT + 400
