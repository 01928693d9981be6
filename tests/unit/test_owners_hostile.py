"""What a process can set itself never outranks what the kernel, the kubelet or slurmd set (issue 44 item 6).

Real cgroups (v2 at /sys/fs/cgroup/unified, v1's memory controller), real users (uid 4242, nameless
here, runs the real job; uid 65534 "nobody" is the other user) and real processes whose environments
claim the other user's Slurm job, pod and torchrun job; read by the real OwnerReader and JobFinder.
"""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path

import psutil
import pytest
from real_cgroups import MEMORY, UNIFIED, Cgroups, NodeFiles, end, need_cgroups, spawn, tree

from gputui.analysis.jobs import analyse_job
from gputui.analysis.waste import readings
from gputui.collect.jobs import JobFinder
from gputui.collect.owners import OwnerReader, Scontrol, parse_cgroup
from gputui.model import PROCESS_OK, ContainerOwner, Device, GpuProcess, Owner, PodOwner, SlurmOwner, Snapshot
from gputui.serve.metrics import owner_labels

GiB = 1 << 30
OWNER, OTHER = 4242, 65534  # the job's user, and another user who claims it
CID = "c0ffee" + "0" * 58


@pytest.fixture
def cgroups():
    made = Cgroups()
    yield made
    made.close()


def pod_uid() -> str:
    tail = f"{random.getrandbits(48):012x}"
    return f"5b1c7d2e-8f90-4a1b-9c3d-{tail}"


def reader_for(root: Path, scontrol: Scontrol | None = None) -> OwnerReader:
    return OwnerReader(NodeFiles(root), JobFinder(psutil).environ, home="/nonexistent", scontrol=scontrol)


def owners_of(reader: OwnerReader, *children) -> list[Owner]:
    found = reader.owners({c.pid: (1.0, psutil.Process(c.pid).username()) for c in children})
    return [found[c.pid] for c in children]


def kubelet_logs(root: Path, uid: str) -> None:
    """The kubelet's files for pod team-a/train-0: its log directories, its GPU in the device-plugin checkpoint."""
    entry = {"PodUID": uid, "ContainerName": "trainer", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-a"]}}
    tree(root, {f"var/log/pods/team-a_train-0_{uid}/trainer/0.log": "",
                f"var/log/containers/train-0_team-a_trainer-{CID}.log": "",
                "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint": json.dumps(
                    {"Data": {"PodDeviceEntries": [entry], "RegisteredDevices": {}}, "Checksum": 1})})


def kubelet_pod(cgroups: Cgroups, uid: str):
    """A pod's container cgroup as the kubelet's systemd driver makes it (root's, at the top), with a real
    process of uid OWNER in it."""
    where = cgroups.make(UNIFIED, f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                                  f"{uid.replace('-', '_')}.slice/cri-containerd-{CID}.scope")
    child = spawn(OWNER, {"HOME": "/"})
    cgroups.move(child.pid, where)
    return child


@need_cgroups
def test_a_pod_named_in_a_users_own_cgroup_subtree_is_not_the_kubelets(tmp_path, cgroups):
    """systemd hands user@UID.service's cgroup to its user, who makes "kubepods-...-podUID.slice" in it
    and moves a process there: the pod is not its, its labels are not exported, its container is its own."""
    uid = pod_uid()
    kubelet_logs(tmp_path, uid)
    manager = cgroups.make(UNIFIED, f"user.slice/user-{OTHER}.slice/user@{OTHER}.service", owner=OTHER)
    real = kubelet_pod(cgroups, uid)
    claimer = spawn(OTHER, {"HOME": "/"}, start_in=manager, move_self_to=manager / (
        f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri-containerd-{CID}.scope"))
    try:
        assert f"user@{OTHER}.service/kubepods-besteffort-pod" in Path(f"/proc/{claimer.pid}/cgroup").read_text()
        owner, claimed = owners_of(reader_for(tmp_path), real, claimer)
    finally:
        end([real, claimer])
    assert owner.pod == PodOwner(uid=uid, namespace="team-a", name="train-0", container="trainer", gpus=("GPU-a",))
    assert owner.key == ("pod", "team-a/train-0") and owner.note is None
    assert claimed.pod is None
    assert claimed.container == ContainerOwner(runtime="containerd", id=CID, rootless=True)
    assert claimed.key == ("container", f"{CID} (nobody's)") != ("container", CID)
    assert claimed.note is not None and claimed.note.startswith(
        "its cgroup is named like a pod's, but not one the kubelet made (its user made it, or it is out of place)")
    assert owner_labels(claimed) == ("", "", CID[:12], "", "")  # no namespace, no pod: not team-a's
    assert owner_labels(owner)[:2] == ("team-a", "train-0")


@need_cgroups
def test_a_pod_cgroup_in_a_directory_its_user_owns_is_not_the_kubelets(tmp_path, cgroups):
    """In the kubelet's very place, a level handed to a user (its directory the user's): what the user makes
    beneath is the user's, whatever it is named. The cgroup directory's owner says who made it."""
    uid = pod_uid()
    kubelet_logs(tmp_path, uid)
    handed = cgroups.make(UNIFIED, "kubepods.slice/kubepods-burstable.slice", owner=OTHER)
    pod = handed / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    claimer = spawn(OTHER, {"HOME": "/"}, start_in=handed, move_self_to=pod)  # root put it there; it goes on
    try:
        assert pod.stat().st_uid == OTHER
        (claimed,) = owners_of(reader_for(tmp_path), claimer)
    finally:
        end([claimer])
    assert claimed.pod is None and claimed.key == ("user", "nobody")
    assert "its cgroup is named like a pod's, but not one the kubelet made" in (claimed.note or "")


@need_cgroups
def test_another_users_slurm_job_is_not_joined_by_the_environment(tmp_path, cgroups):
    """Job J runs in slurmd's v1 cgroup /slurm/uid_4242/job_J; user nobody's process says SLURM_JOB_ID=J:
    it stays nobody's (marked: its environment's word), its 8 GiB never added to the job's 4 GiB."""
    job = str(random.randint(10_000, 99_999))
    step = cgroups.make(MEMORY, f"slurm/uid_{OWNER}/job_{job}/step_0")
    ranked = spawn(OWNER, {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "pretrain"})
    cgroups.move(ranked.pid, step)
    claimer = spawn(OTHER, {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "pretrain",
                            "SLURM_JOB_USER": str(OWNER)})
    try:
        owner, claimed = owners_of(reader_for(tmp_path), ranked, claimer)
    finally:
        end([ranked, claimer])
    assert owner.slurm == SlurmOwner(job=job, step="0", user=str(OWNER), name="pretrain", source="cgroup")
    assert owner.key == ("slurm", job) and owner.note is None
    # its own word, kept apart and said so: not the job's user (SLURM_JOB_USER is not its own)
    assert claimed.slurm == SlurmOwner(job=job, step="0", name="pretrain", source="environment")
    assert claimed.key == ("slurm", f"{job} (nobody's environment)")
    assert claimed.most_specific() == f"slurm {job}.0 (env)"
    assert claimed.note == ("its Slurm job is its environment's word only (SLURM_JOB_ID; no cgroup of slurmd's "
                            "holds it)")
    assert owner_labels(owner)[3:] == (job, "") and owner_labels(claimed)[3:] == ("", job)
    snap = Snapshot(taken_at=0.0, devices=(Device(index=0),), processes=(
        GpuProcess(pid=ranked.pid, device_index=0, gpu_memory=4 * GiB, user=str(OWNER), owner=owner),
        GpuProcess(pid=claimer.pid, device_index=0, gpu_memory=8 * GiB, user="nobody", owner=claimed)))
    held = {(kind, who): r.memory for (kind, who, _), r in readings(snap).items()}
    assert held == {("slurm", job): 4 * GiB, ("slurm", f"{job} (nobody's environment)"): 8 * GiB}


@need_cgroups
def test_scontrol_saying_the_job_is_another_users_refuses_the_claim(tmp_path, cgroups, monkeypatch):
    """Where scontrol is installed (a real program on PATH here), a job's user it names must be the
    process's own: the claim of another user's job is not taken at all."""
    job = str(random.randint(10_000, 99_999))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"  # `scontrol show job -o JOB`, as slurmctld answers for job J
    scontrol.write_text(f'#!/bin/sh\necho "JobId=$4 JobName=pretrain UserId={OWNER}({OWNER}) GroupId=1(1) '
                        'JobState=RUNNING"\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    where = cgroups.make(UNIFIED, f"system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0")
    ranked = spawn(OWNER, {})
    cgroups.move(ranked.pid, where)
    claimer = spawn(OTHER, {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0"})
    try:
        owner, claimed = owners_of(reader_for(tmp_path, Scontrol.installed()), ranked, claimer)
    finally:
        end([ranked, claimer])
    assert owner.slurm == SlurmOwner(job=job, step="0", user=str(OWNER), name="pretrain")
    assert claimed.slurm is None and claimed.key == ("user", "nobody")
    assert claimed.note == f"its environment names Slurm job {job}, which is another user's: not taken"


@need_cgroups
def test_slurmds_cgroup_wins_over_the_environment_and_must_be_the_processs_users(tmp_path, cgroups):
    """The environment says job 1, slurmd's cgroup job J: J it is. A process of another user in job J's
    cgroup (root put it there) is not taken into J: /slurm/uid_4242 says whose J is."""
    job = str(random.randint(10_000, 99_999))
    step = cgroups.make(MEMORY, f"slurm/uid_{OWNER}/job_{job}/step_0")
    ranked = spawn(OWNER, {"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "7", "SLURM_JOB_NAME": "other"})
    stranger = spawn(OTHER, {})
    for child in (ranked, stranger):
        cgroups.move(child.pid, step)
    try:
        owner, strange = owners_of(reader_for(tmp_path), ranked, stranger)
    finally:
        end([ranked, stranger])
    assert owner.slurm == SlurmOwner(job=job, step="0", user=str(OWNER))  # not job 1's step 7, nor its name
    assert strange.slurm is None and strange.key == ("user", "nobody")
    assert strange.note == f"its cgroup names Slurm job {job}, which is another user's: not taken"


@need_cgroups
def test_a_slurm_job_named_in_a_users_own_cgroup_subtree_is_not_slurmds(tmp_path, cgroups):
    job = str(random.randint(10_000, 99_999))
    manager = cgroups.make(UNIFIED, f"user.slice/user-{OTHER}.slice/user@{OTHER}.service", owner=OTHER)
    claimer = spawn(OTHER, {}, start_in=manager,
                    move_self_to=manager / f"system.slice/slurmstepd.scope/job_{job}/step_0")
    try:
        (claimed,) = owners_of(reader_for(tmp_path), claimer)
    finally:
        end([claimer])
    assert claimed.slurm is None and claimed.key == ("user", "nobody")
    assert "named like a Slurm job's, but not one slurmd made" in (claimed.note or "")


@pytest.mark.parametrize("path, pod", [
    # the kubelet's places: at the top, or (gputui in a pod of its own cgroup namespace) below the ".."s
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{c}.scope", True),
    ("/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{c}.scope", True),  # guaranteed
    ("/kubepods/besteffort/pod{d}/{c}", True),  # cgroupfs driver
    ("/../../kubepods-burstable-pod{u}.slice/cri-containerd-{c}.scope", True),  # the DaemonSet's view
    # anywhere else, a name anyone with a cgroup of their own could give
    ("/user.slice/user-1000.slice/user@1000.service/kubepods-burstable-pod{u}.slice/cri-containerd-{c}.scope", False),
    ("/system.slice/build.service/kubepods.slice/kubepods-pod{u}.slice", False),
    ("/user.slice/user-1000.slice/user@1000.service/kubepods/besteffort/pod{d}/{c}", False),
])
def test_a_pod_counts_only_where_the_kubelet_makes_pods(path, pod):
    uid = "5b1c7d2e-8f90-4a1b-9c3d-2e4f6a8b0c1d"
    facts = parse_cgroup("0::" + path.format(u=uid.replace("-", "_"), d=uid, c=CID) + "\n")
    assert (facts.pod_uid == uid) is pod
    assert (facts.refused == "pod") is not pod


@pytest.mark.parametrize("path, job, uid", [
    ("4:memory:/slurm/uid_1000/job_77/step_0", "77", 1000),  # v1
    ("4:memory:/slurm_node3/uid_1000/job_77/step_batch", "77", 1000),  # several slurmd on a node
    ("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0", "77", None),  # v2
    ("0::/system.slice/node3_slurmstepd.scope/job_77/step_0/user/task_0", "77", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/slurm/uid_0/job_77", None, None),
    ("0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_77", None, None),
    ("0::/system.slice/build.service/job_77/step_0", None, None),
    ("4:memory:/mine/slurm/uid_1000/job_77", None, None),
])
def test_a_slurm_job_counts_only_where_slurmd_makes_jobs(path, job, uid):
    facts = parse_cgroup(path + "\n")
    assert (facts.slurm_job, facts.slurm_uid) == (job, uid)
    assert (facts.refused == "Slurm job") is (job is None)


@need_cgroups
def test_another_users_process_never_joins_a_torchrun_job_by_its_environment():
    """Two ranks of uid 4242 share TORCHELASTIC_RUN_ID run-7; nobody's process says it is rank 2 of run-7
    with 8 GiB: it is a job of its own, and the real job (1 GiB a rank) shows no imbalance."""
    run = {"TORCHELASTIC_RUN_ID": "run-7", "WORLD_SIZE": "2"}
    ranks = [spawn(OWNER, {**run, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    claimer = spawn(OTHER, {**run, "RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "3"})
    children = [*ranks, claimer]
    try:
        processes = tuple(
            GpuProcess(pid=c.pid, device_index=i, gpu_memory=(8 if c is claimer else 1) * GiB, ppid=1,
                       command=("python", "train.py"), user=psutil.Process(c.pid).username(), state=PROCESS_OK,
                       started_at=psutil.Process(c.pid).create_time())
            for i, c in enumerate(children))
        snap = JobFinder(psutil).add_to(Snapshot(taken_at=0.0, devices=tuple(Device(index=i) for i in range(3)),
                                                 processes=processes))
    finally:
        end(children)
    by_key = {job.key: job for job in snap.jobs}
    assert set(by_key) == {"torchelastic run-7 (4242)", "torchelastic run-7 (nobody)"}
    real = by_key["torchelastic run-7 (4242)"]
    assert [(r.pid, r.rank) for r in real.ranks] == [(ranks[0].pid, 0), (ranks[1].pid, 1)]
    assert real.gpu_memory == 2 * GiB and real.world_size == 2
    assert analyse_job(real, snap).imbalance is None
    assert [r.pid for r in by_key["torchelastic run-7 (nobody)"].ranks] == [claimer.pid]
