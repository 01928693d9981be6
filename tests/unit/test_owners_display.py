"""Owners where people look: the shared Kubernetes node of --demo through the real collector, --once's
OWNER column and notes, --json, the live monitor's column and detail line, serve's labels."""

from __future__ import annotations

import json

from test_plain_golden import sample_at

from gputui.model import ContainerOwner, Device, GpuProcess, Owner, PodOwner, Snapshot
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.ui.table import rows as table_rows
from gputui.ui.table.columns import DEFAULT, columns_for

CID = "ab" * 32


def k8s():
    return sample_at("shared-k8s", 60)


def test_demo_shared_k8s_reads_pods_through_the_same_owner_code():
    snap = k8s().snapshot
    by_gpu = {p.device_index: p.owner for p in snap.processes}
    assert {i: o.most_specific() for i, o in by_gpu.items() if o is not None} == {
        0: "ml-research/llama-ft-0", 1: "ml-research/llama-ft-0", 2: "ml-research/llama-ft-0",
        3: "ml-research/llama-ft-0", 4: "inference/vllm-mistral-7d9f", 5: "team-vision/notebook-sam",
        6: "team-vision/notebook-sam", 7: "batch/embed-nightly-x2k4p"}
    notebook = by_gpu[5]
    uuids = {d.index: d.uuid for d in snap.devices}
    assert notebook is not None and notebook.pod == PodOwner(
        uid="9d3e5f30-7a1b-4c2d-8e9f-0a1b2c3d4e30", namespace="team-vision", name="notebook-sam", container="notebook",
        gpus=tuple(sorted((uuids[5], uuids[6]))))  # the kubelet gave it GPUs 5 and 6
    assert notebook.note is None
    assert notebook.container is not None and notebook.container.runtime == "containerd"
    # the idle pod: memory held on two GPUs, nothing running there (the who-is-wasting summary's case)
    idle = {d.index: d for d in snap.devices if d.index in (5, 6)}
    assert all(d.gpu_util == 0 and (d.memory_used or 0) > 18 * 2**30 for d in idle.values())


def test_once_shows_the_owner_column_where_it_says_more_than_the_user():
    sample = k8s()
    text = render(sample.snapshot, sample.judgements, width=100)
    assert "  PID USER OWNER " in text
    assert "81001 1000 ml-research/llama-ft-0     0   31.5G" in text  # TYPE gives way first, as in the monitor
    workstation = sample_at("workstation", 60)
    assert "PID USER OWNER" not in render(workstation.snapshot, workstation.judgements, width=100)


def test_once_says_each_owner_note_once():
    note = "docker's container names are in /var/lib/docker/containers/ID/config.v2.json, which gputui's user " \
           "cannot read (permission denied; root can)"
    owner = Owner(user="ann", container=ContainerOwner(id=CID, runtime="docker"), note=note)
    snap = Snapshot(taken_at=0.0, devices=(Device(index=0),), processes=tuple(
        GpuProcess(pid=pid, device_index=0, user="ann", owner=owner) for pid in (10, 11)))
    text = render(snap, width=200)
    assert text.count("Owners: docker's container names") == 1
    assert "10 ann  abababababab" in text


def test_json_carries_the_owner():
    sample = k8s()
    doc = json.loads(dumps(snapshot_document(sample.snapshot, sample.judgements)))
    owner = doc["snapshot"]["processes"][0]["owner"]
    uuids = [d["uuid"] for d in doc["snapshot"]["devices"]]
    assert owner["pod"] == {"uid": "0c6a2f10-5b7e-4c1d-9a3e-7f2b8d4e6a10", "namespace": "ml-research",
                            "name": "llama-ft-0", "container": "trainer", "gpus": sorted(uuids[:4])}
    assert owner["user"] == "1000" and owner["container"]["runtime"] == "containerd"


def test_monitor_owner_cell_filter_and_column_only_with_owners():
    snap = k8s().snapshot
    built = table_rows.build_rows(snap, sort="pid", reverse=False, filter_text="team-vision")
    assert [r.process.device_index for r in built if r.process is not None] == [5, 6]
    assert built[0].cells["owner"] == "team-vision/notebook-sam"
    assert table_rows.owners_beyond_users(built)
    plain = table_rows.build_rows(sample_at("workstation", 60).snapshot, sort="pid", reverse=False)
    assert not table_rows.owners_beyond_users(plain)
    assert "owner" not in columns_for("normal", DEFAULT, 160)  # no owners: it repeats USER
    assert "owner" in columns_for("normal", DEFAULT, 160, owners=True)
    # on a shared node whose a process is outlasts CPU% (a 100-column tmux split keeps it) ...
    at_100 = columns_for("normal", DEFAULT, 100, owners=True)
    assert "owner" in at_100 and "cpu" not in at_100
    assert "owner" in columns_for("compact", DEFAULT, 100, owners=True)
    # ... and gives way before the figures in a narrower pane
    assert "owner" not in columns_for("normal", DEFAULT, 80, owners=True)


def test_owner_describe_for_the_detail_screen():
    owner = k8s().snapshot.processes[0].owner
    assert owner is not None
    assert owner.describe() == ("pod ml-research/llama-ft-0 (container trainer, 4 GPUs assigned); containerd container "
                                f"{owner.container.id[:12]}; user 1000")


# ------------------------------------------------------------------------------------------------ serve

def test_serve_labels_processes_with_their_owners():
    from test_serve_metrics import series, value

    from gputui.serve.sampling import Sample

    found = series(Sample(k8s().snapshot))
    assert value(found, "gputui_process_memory_bytes", index="5", namespace="team-vision", pod="notebook-sam",
                 container="notebook", slurm_job="", user="1002") == 21 * 2**30
    assert value(found, "gputui_owner_labels_left_out") == 0


def test_serve_bounds_the_owner_label_sets(monkeypatch):
    from test_serve_metrics import series, value

    from gputui.model import SlurmOwner
    from gputui.serve import metrics
    from gputui.serve.sampling import Sample

    monkeypatch.setattr(metrics, "OWNER_LABEL_SETS", 2)
    snap = Snapshot(taken_at=0.0, devices=(Device(index=0, uuid="GPU-a"),), processes=tuple(
        GpuProcess(pid=100 + job, device_index=0, gpu_memory=job, user="u",
                   owner=Owner(user="u", slurm=SlurmOwner(job=str(job)))) for job in range(1, 5)))
    found = series(Sample(snap))
    assert value(found, "gputui_process_memory_bytes", pid="102", slurm_job="2") == 2
    assert value(found, "gputui_process_memory_bytes", pid="103", slurm_job="") == 3  # past the bound: no label
    assert value(found, "gputui_owner_labels_left_out") == 2


def test_detail_screen_says_whose_it_is_only_beyond_the_user():
    from gputui.ui.screens.detail import info_text

    snap = k8s().snapshot
    notebook = next(p for p in snap.processes if p.device_index == 5)
    shown = info_text(notebook, [notebook], snap).plain
    assert "pod team-vision/notebook-sam (container notebook, 2 GPUs assigned); containerd container" in shown
    plain = sample_at("workstation", 60).snapshot
    assert "owner" not in info_text(plain.processes[0], [plain.processes[0]], plain).plain


def test_many_host_view_shows_owners_from_the_hosts_documents():
    from gputui.model import Snapshot as Snap
    from gputui.model.codec import from_jsonable, to_jsonable

    arrived = from_jsonable(Snap, json.loads(json.dumps(to_jsonable(k8s().snapshot))))  # as a host sends it
    built = table_rows.build_host_rows([table_rows.HostRows("node-07", arrived, {}, {})], sort="pid",
                                       reverse=False, filter_text="inference")
    assert [(r.host, r.cells["owner"]) for r in built] == [("node-07", "inference/vllm-mistral-7d9f")]


def test_hostile_owner_names_are_shown_visible():
    from gputui.serve.metrics import owner_labels

    evil = "\x1b[2J\x1b]0;pwned\x07team"
    owner = Owner(user="u", pod=PodOwner(uid="u1", namespace=evil, name="p", container=evil))
    snap = Snapshot(taken_at=0.0, devices=(Device(index=0),), processes=(
        GpuProcess(pid=5, device_index=0, user="u", owner=owner),))
    text = render(snap, width=200)
    assert "\x1b[2J" not in text and "\x07" not in text and "\\x1b[2J" in text  # shown, not obeyed
    assert all("\x1b" not in label for label in owner_labels(owner))
