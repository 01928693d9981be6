"""Where an owner comes from a process's own word, every output says so (issue 44 item 6): a Slurm job its
environment alone names beside the same job as slurmd's cgroup holds it, and a rootless container, in
--once, --json (and its schema), serve's labels, the live monitor's OWNER column, detail line and w view.
"""

from __future__ import annotations

import json

from test_plain_json import assert_valid
from test_serve_metrics import series, value

from gputui.model import ContainerOwner, Device, GpuProcess, Owner, SlurmOwner, Snapshot
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.plain.waste import table
from gputui.sample.judge import Judge
from gputui.ui.screens.detail import info_text
from gputui.ui.table import rows as table_rows

GiB = 1 << 30
CID = "ab" * 32
ENV_ONLY = "its Slurm job is its environment's word only (SLURM_JOB_ID; no cgroup of slurmd's holds it)"


def judged():
    """Alice's job 81234 as slurmd's cgroup holds it; nobody's process whose environment says 81234; a
    rootless container of bob's."""
    alice = Owner(user="alice", slurm=SlurmOwner(job="81234", step="0", user="alice", name="pretrain"))
    claim = Owner(user="nobody", slurm=SlurmOwner(job="81234", step="0", source="environment"), note=ENV_ONLY)
    mine = Owner(user="bob", container=ContainerOwner(id=CID, runtime="podman", rootless=True))
    snap = Snapshot(taken_at=100.0, devices=(Device(index=0, uuid="GPU-a", memory_total=80 * GiB, gpu_util=50),),
                    processes=(
                        GpuProcess(pid=11, device_index=0, gpu_memory=4 * GiB, user="alice", owner=alice,
                                   command=("python", "train.py")),
                        GpuProcess(pid=12, device_index=0, gpu_memory=8 * GiB, user="nobody", owner=claim,
                                   command=("python", "mine.py")),
                        GpuProcess(pid=13, device_index=0, gpu_memory=2 * GiB, user="bob", owner=mine,
                                   command=("python", "eval.py"))))
    return Judge()(snap)


def test_once_marks_the_environments_word_and_says_why():
    sample = judged()
    text = render(sample.snapshot, sample.judgements, width=160)
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()[:2] in ("11", "12", "13")}
    assert "slurm 81234.0 (env)" in rows["12"] and "(env)" not in rows["11"]
    assert "slurm 81234.0 " in rows["11"]
    assert text.count(f"Owners: {ENV_ONLY}") == 1
    who = text[text.index("Who holds the GPUs"):]
    assert "slurm 81234 (nobody's environment)" in who and "slurm 81234 " in who


def test_json_says_where_the_job_and_the_container_come_from():
    sample = judged()
    document = snapshot_document(sample.snapshot, sample.judgements)
    assert_valid(document)
    owners = {p["pid"]: p["owner"] for p in json.loads(dumps(document))["snapshot"]["processes"]}
    assert owners[11]["slurm"]["source"] == "cgroup" and owners[12]["slurm"]["source"] == "environment"
    assert owners[12]["note"] == ENV_ONLY
    assert owners[13]["container"]["rootless"] is True and owners[11]["container"] is None
    kept = {(o["kind"], o["name"]): o["memory"] for o in json.loads(dumps(document))["judgements"]["waste"]["owners"]}
    assert kept == {("slurm", "81234"): 4 * GiB, ("slurm", "81234 (nobody's environment)"): 8 * GiB,
                    ("container", CID[:12]): 2 * GiB}


def test_serve_labels_the_environments_word_apart():
    found = series(judged())
    assert value(found, "gputui_process_memory_bytes", pid="11", slurm_job="81234", claimed_slurm_job="") == 4 * GiB
    assert value(found, "gputui_process_memory_bytes", pid="12", slurm_job="", claimed_slurm_job="81234") == 8 * GiB
    # a sum by slurm_job is alice's job alone; each owner's series apart
    assert sum(v for (n, labels), v in found.items() if n == "gputui_process_memory_bytes"
               and ("slurm_job", "81234") in labels) == 4 * GiB
    assert value(found, "gputui_owner_memory_bytes", kind="slurm", owner="81234") == 4 * GiB
    assert value(found, "gputui_owner_memory_bytes", kind="slurm", owner="81234 (nobody's environment)") == 8 * GiB


def test_the_monitor_marks_it_in_the_owner_column_the_detail_line_and_the_w_view():
    sample = judged()
    snap = sample.snapshot
    built = table_rows.build_rows(snap, sort="pid", reverse=False)
    assert [r.cells["owner"] for r in built if r.process is not None] == [
        "slurm 81234.0", "slurm 81234.0 (env)", CID[:12]]
    claimer = next(p for p in snap.processes if p.pid == 12)
    shown = info_text(claimer, [claimer], snap).plain
    assert "Slurm job 81234 step 0 (from its environment only)" in shown and ENV_ONLY in shown
    bobs = next(p for p in snap.processes if p.pid == 13)
    assert f"rootless podman container {CID[:12]}" in info_text(bobs, [bobs], snap).plain
    assert sample.judgements.waste is not None
    _, rows, _ = table(sample.judgements.waste, 100)
    assert any(row.startswith("slurm 81234 (nobody's environment)") for row, _ in rows)
