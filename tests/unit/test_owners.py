"""Whose is each GPU process: fake /proc and runtime trees for each container runtime, Kubernetes (systemd
and cgroupfs drivers), Slurm (cgroup v1 and v2) and systemd units, read by gputui/collect/owners.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputui.collect.owners import FileStat, HostFiles, OwnerReader, Scontrol, parse_cgroup, user_name
from gputui.model import ContainerOwner, Owner, PodOwner, SlurmOwner

CID = "3f4e9c0d1a2b" + "0" * 52
UID = "5b1c7d2e-8f90-4a1b-9c3d-2e4f6a8b0c1d"
PID = 4242


def tree(root: Path, cgroup: str, files: dict[str, str] | None = None) -> Path:
    """A fake machine: /proc/PID/cgroup and any other files, under ``root``."""
    for path, text in {f"proc/{PID}/cgroup": cgroup, **(files or {})}.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def owner_of(root: Path, environ: dict[str, str] | None = None, user: str | None = "alice",
             files: HostFiles | None = None) -> Owner:
    reader = OwnerReader(files or HostFiles(root), lambda pid: environ, home="/home/alice")
    return reader.owners({PID: (100.0, user)})[PID]


def checkpoint(entries: list[dict]) -> dict[str, str]:
    """The kubelet's device-plugin checkpoint (root's, in /var/lib/kubelet)."""
    return {"var/lib/kubelet/device-plugins/kubelet_internal_checkpoint": json.dumps(
        {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1})}


def kubelet_logs(namespace: str, pod: str, containers: tuple[str, ...], cid: str | None = None) -> dict[str, str]:
    """What the kubelet writes on disk: /var/log/pods/NAMESPACE_POD_UID/CONTAINER/0.log, and the
    /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log link (a file here)."""
    files = {f"var/log/pods/{namespace}_{pod}_{UID}/{c}/0.log": "" for c in containers}
    if cid is not None:
        files[f"var/log/containers/{pod}_{namespace}_{containers[0]}-{cid}.log"] = ""
    return files


@pytest.mark.parametrize("cgroup", [
    f"0::/system.slice/docker-{CID}.scope\n",  # v2, systemd driver
    f"0::/docker/{CID}\n",  # v2, cgroupfs driver
    f"12:memory:/docker/{CID}\n11:cpu,cpuacct:/docker/{CID}\n1:name=systemd:/docker/{CID}\n",  # v1
], ids=["v2-systemd", "v2-cgroupfs", "v1"])
def test_docker_container_named_from_its_config(tmp_path: Path, cgroup: str) -> None:
    config = {f"var/lib/docker/containers/{CID}/config.v2.json": json.dumps({"Name": "/bert-finetune"})}
    owner = owner_of(tree(tmp_path, cgroup, config))
    assert owner.container == ContainerOwner(runtime="docker", id=CID, name="bert-finetune")
    assert owner.unit is None and owner.note is None
    assert owner.most_specific() == "bert-finetune"


class Denied(HostFiles):
    """Docker's and the kubelet's state are root's (their directories mode 0700): gputui run by another user
    can neither open nor look up what is in them."""

    def read(self, path: str, limit: int) -> bytes:
        if path.startswith(("/var/lib/docker", "/var/lib/kubelet")):
            raise PermissionError(13, "Permission denied")
        return super().read(path, limit)

    def lstat(self, path: str) -> FileStat:
        if path.startswith(("/var/lib/docker", "/var/lib/kubelet")):
            raise PermissionError(13, "Permission denied")
        return super().lstat(path)


def test_docker_name_unreadable_says_why_and_shows_the_short_id(tmp_path: Path) -> None:
    root = tree(tmp_path, f"0::/system.slice/docker-{CID}.scope\n")
    owner = owner_of(root, files=Denied(root))
    assert owner.container == ContainerOwner(runtime="docker", id=CID, name=None)
    assert owner.note == ("docker's container names are in /var/lib/docker/containers/ID/config.v2.json, which "
                          "gputui's user cannot read (permission denied; root can)")
    assert owner.most_specific() == CID[:12]


def test_rootless_podman_named_from_the_users_containers_json(tmp_path: Path) -> None:
    """gputui's own user's rootless container: named from that user's own store, marked rootless."""
    me = user_name(os.geteuid())
    cgroup = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n"
    listed = json.dumps([{"id": "9" * 64, "names": ["other"]}, {"id": CID, "names": ["llama-eval"]}])
    root = tree(tmp_path, cgroup, {
        "home/alice/.local/share/containers/storage/overlay-containers/containers.json": listed})
    owner = owner_of(root, user=me)
    assert owner.container == ContainerOwner(runtime="podman", id=CID, name="llama-eval", rootless=True)
    assert owner.unit is None and owner.note is None
    assert owner.key == ("container", f"{CID} ({me}'s)")  # its own id, its user's alone
    # another user's rootless container: its id is its user's choice, so root's state is not asked for a name
    other = owner_of(root, user="nobody")
    assert other.container == ContainerOwner(runtime="podman", id=CID, rootless=True)
    assert other.note == ("a rootless container's name is in its user's own runtime state, which gputui reads for "
                          "its own user only")


def test_podman_v1_unlisted_says_why(tmp_path: Path) -> None:
    owner = owner_of(tree(tmp_path, f"5:pids:/machine.slice/libpod-{CID}.scope\n1:name=systemd:/machine.slice/"
                                    f"libpod-{CID}.scope\n"))
    assert owner.container == ContainerOwner(runtime="podman", id=CID)
    assert "podman's containers.json" in (owner.note or "")


def test_kubernetes_systemd_driver_containerd_names_pod_and_container(tmp_path: Path) -> None:
    slice_uid = UID.replace("-", "_")
    cgroup = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/"
              f"cri-containerd-{CID}.scope\n")
    # Kubernetes 1.20 on: DeviceIDs by NUMA node
    assigned = checkpoint([
        {"PodUID": UID, "ContainerName": "trainer", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"0": ["GPU-aaaa"], "1": ["GPU-bbbb"]}, "AllocResp": "CgA="},
        {"PodUID": UID, "ContainerName": "sidecar", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-cccc"]}},
        {"PodUID": UID, "ContainerName": "trainer", "ResourceName": "rdma/hca", "DeviceIDs": {"0": ["mlx5_0"]}},
        {"PodUID": "x", "ContainerName": "trainer", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-d"]}},
    ])
    root = tree(tmp_path, cgroup, kubelet_logs("ml-research", "train-7f9c", ("trainer", "sidecar"), CID) | assigned)
    owner = owner_of(root)
    assert owner.pod == PodOwner(uid=UID, namespace="ml-research", name="train-7f9c", container="trainer",
                                 gpus=("GPU-aaaa", "GPU-bbbb"))
    assert owner.note is None
    assert owner.container == ContainerOwner(runtime="containerd", id=CID)
    assert owner.most_specific() == "ml-research/train-7f9c"
    assert owner.key == ("pod", "ml-research/train-7f9c")


def test_kubernetes_cri_o_besteffort_v2(tmp_path: Path) -> None:
    cgroup = (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
              f"crio-{CID}.scope\n")
    root = tree(tmp_path, cgroup, kubelet_logs("inference", "vllm-0", ("server",)))
    owner = owner_of(root, files=Denied(root))
    assert owner.container is not None and owner.container.runtime == "cri-o"
    assert owner.pod == PodOwner(uid=UID, namespace="inference", name="vllm-0", container="server")
    assert owner.note == ("the pod's assigned GPUs: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint "
                          "cannot be read (permission denied)")


def test_kubernetes_cgroupfs_driver_v1_does_not_guess_the_runtime(tmp_path: Path) -> None:
    path = f"/kubepods/burstable/pod{UID}/{CID}"
    cgroup = f"11:memory:{path}\n4:devices:{path}\n1:name=systemd:{path}\n"
    assigned = checkpoint([{"PodUID": UID, "ContainerName": "jupyter", "ResourceName": "nvidia.com/mig-1g.10gb",
                            "DeviceIDs": ["MIG-1234"]}])  # before 1.20: a plain list
    owner = owner_of(tree(tmp_path, cgroup, kubelet_logs("team-a", "notebook", ("jupyter",)) | assigned))
    assert owner.container == ContainerOwner(runtime=None, id=CID)
    assert owner.pod == PodOwner(uid=UID, namespace="team-a", name="notebook", container="jupyter", gpus=("MIG-1234",))


def test_kubernetes_pod_logs_unreadable_say_why_once(tmp_path: Path) -> None:
    owner = owner_of(tree(tmp_path, f"0::/kubepods/pod{UID}/{CID}\n"))
    assert owner.pod == PodOwner(uid=UID)
    assert owner.note == "the pod's name: /var/log/pods cannot be read (No such file or directory)"
    assert owner.most_specific() == f"pod {UID[:8]}"


def test_slurm_v1_job_and_step_from_the_cgroup_with_the_jobs_environment(tmp_path: Path) -> None:
    cgroup = ("10:memory:/slurm/uid_65534/job_81234/step_0\n7:devices:/slurm/uid_65534/job_81234/step_0\n"
              "1:name=systemd:/system.slice/slurmd.service\n")
    environ = {"SLURM_JOB_ID": "81234", "SLURM_STEP_ID": "0", "SLURM_JOB_USER": "bob", "SLURM_JOB_NAME": "pretrain"}
    owner = owner_of(tree(tmp_path, cgroup), environ, user="nobody")
    # the job's user from slurmd's uid_65534, not the environment's SLURM_JOB_USER
    assert owner.slurm == SlurmOwner(job="81234", step="0", user="nobody", name="pretrain")
    assert owner.unit is None  # slurmd's unit is not the job's owner
    assert owner.most_specific() == "slurm 81234.0"


def test_slurm_v2_another_users_job_from_the_cgroup_alone(tmp_path: Path) -> None:
    cgroup = "0::/system.slice/slurmstepd.scope/job_81235/step_batch/user/task_0\n"
    owner = owner_of(tree(tmp_path, cgroup), environ=None, user="carol")
    assert owner.slurm == SlurmOwner(job="81235", step="batch")
    assert owner.key == ("slurm", "81235")


def test_slurm_from_the_environment_alone_is_marked_and_kept_to_its_user(tmp_path: Path) -> None:
    owner = owner_of(tree(tmp_path, "0::/user.slice/user-1000.slice/session-3.scope\n"),
                     {"SLURM_JOB_ID": "9", "SLURM_JOB_NAME": "x"})
    assert owner.slurm == SlurmOwner(job="9", name="x", source="environment")
    assert owner.note == "its Slurm job is its environment's word only (SLURM_JOB_ID; no cgroup of slurmd's holds it)"
    assert owner.most_specific() == "slurm 9 (env)"
    assert owner.key == ("slurm", "9 (alice's environment)")  # never the key of job 9 as slurmd made it
    assert "Slurm job 9 (from its environment only, name x)" in owner.describe()


@pytest.mark.parametrize("path, unit", [
    ("/system.slice/finetune.service", "finetune.service"),  # systemd-run --unit=finetune python train.py
    ("/system.slice/run-r8c0d2e4f6a8b4c1d9e3f5a7b9c1d3e5f.service", "run-r8c0d2e4f6a8b4c1d9e3f5a7b9c1d3e5f.service"),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/run-p1234-i1235.scope", "run-p1234-i1235.scope"),
    ("/user.slice/user-1000.slice/session-4.scope", None),  # a login shell: its user is the owner
    ("/user.slice/user-1000.slice/user@1000.service/init.scope", None),
])
def test_systemd_units(tmp_path: Path, path: str, unit: str | None) -> None:
    owner = owner_of(tree(tmp_path, f"0::{path}\n"))
    assert owner.unit == unit
    assert owner.most_specific() == (unit or "alice")


def test_unreadable_cgroup_says_why(tmp_path: Path) -> None:
    owner = owner_of(tmp_path)
    assert owner == Owner(user="alice", note="its cgroup could not be read (No such file or directory)")


def test_read_once_per_process_life(tmp_path: Path) -> None:
    root = tree(tmp_path, "0::/system.slice/a.service\n")
    reader = OwnerReader(HostFiles(root), lambda pid: None)
    assert reader.owners({PID: (1.0, "u")})[PID].unit == "a.service"
    (root / f"proc/{PID}/cgroup").write_text("0::/system.slice/b.service\n")
    assert reader.owners({PID: (1.0, "u")})[PID].unit == "a.service"  # the same process: not read again
    assert reader.owners({PID: (2.0, "u")})[PID].unit == "b.service"  # a new process with a recycled PID


def test_parse_cgroup_ignores_garbage() -> None:
    assert parse_cgroup("not a cgroup line\n\x1b[31m::\n") == parse_cgroup("")


def test_slurm_another_users_job_named_by_scontrol_once(tmp_path: Path) -> None:
    asked: list[str] = []

    def scontrol(job: str) -> str:
        asked.append(job)
        return f"JobId={job} JobName=pretrain-70b UserId=dana(1004) GroupId=ml(300) Partition=gpu JobState=RUNNING\n"

    root = tree(tmp_path, "0::/system.slice/slurmstepd.scope/job_81236/step_0/user/task_0\n", {
        "proc/4243/cgroup": "0::/system.slice/slurmstepd.scope/job_81236/step_0/user/task_1\n"})
    reader = OwnerReader(HostFiles(root), lambda pid: None, scontrol=Scontrol(scontrol))
    # no passwd entry for uid 1004 here: psutil calls its processes' user "1004", as scontrol's (1004) reads
    owners = reader.owners({PID: (1.0, "1004"), 4243: (1.0, "1004")})
    assert owners[PID].slurm == owners[4243].slurm == SlurmOwner(job="81236", step="0", user="dana",
                                                                   name="pretrain-70b")
    assert owners[PID].note is None
    assert asked == ["81236"]  # one question per job, not per process


def test_slurm_without_scontrol_says_why(tmp_path: Path) -> None:
    owner = owner_of(tree(tmp_path, "0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n"), environ=None)
    assert owner.slurm == SlurmOwner(job="7", step="batch")
    assert owner.note == ("the Slurm job's user and name: its environment is another user's and scontrol is not "
                          "here")


def test_scontrol_that_fails_is_asked_once_and_said(tmp_path: Path) -> None:
    calls = []
    root = tree(tmp_path, "0::/system.slice/slurmstepd.scope/job_5/step_0\n")
    reader = OwnerReader(HostFiles(root), lambda pid: None, scontrol=Scontrol(lambda job: calls.append(job)))
    owner = reader.read(PID, "x")
    reader.read(PID, "x")
    assert owner.note == "the Slurm job's user and name: its environment is another user's and scontrol does not " \
                         "know the job"
    assert calls == ["5"]
