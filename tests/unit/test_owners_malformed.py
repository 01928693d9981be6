"""Hostile or malformed runtime state costs one owner's name, never the sample (issue 44 item 8).

A pod log directory without the NAMESPACE_POD_UID shape, a rootless podman store whose names are not a
list, a probe's report naming a rendezvous gputui does not know: each used to raise out of the reader
(--once and --json exit 1 with a traceback, serve dies, the monitor says only "sampling failed").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputui.collect import open_collector
from gputui.collect.jobs import find_jobs
from gputui.collect.owners import HostFiles, OwnerReader, user_name
from gputui.model import ContainerOwner, HostProcess, Placement, PodOwner, ProbeReport

UID = "5b1c7d2e-8f90-4a1b-9c3d-2e4f6a8b0c1d"
CID = "ab" * 32
PID = 4242
POD_CGROUP = f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"


def tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def owner_of(root: Path, user: str = "1000"):
    return OwnerReader(HostFiles(root), lambda pid: None, home="/home/me").owners({PID: (1.0, user)})[PID]


@pytest.mark.parametrize("directory", [f"notebook_{UID}", f"_{UID}", f"a__{UID}", f"ns_x_y_{UID}"])
def test_a_pod_log_directory_of_another_shape_costs_the_pods_name_only(tmp_path, directory):
    root = tree(tmp_path, {f"proc/{PID}/cgroup": POD_CGROUP, f"var/log/pods/{directory}/c/0.log": ""})
    owner = owner_of(root)
    assert owner.pod == PodOwner(uid=UID)
    assert owner.note == "the pod's name: /var/log/pods has no NAMESPACE_POD_UID directory for its UID"
    assert owner.most_specific() == f"pod {UID[:8]}"


def test_beside_a_malformed_directory_the_well_formed_one_names_the_pod(tmp_path):
    root = tree(tmp_path, {f"proc/{PID}/cgroup": POD_CGROUP, f"var/log/pods/junk_{UID}/c/0.log": "",
                           f"var/log/pods/team-a_train-0_{UID}/trainer/0.log": ""})
    assert owner_of(root).pod == PodOwner(uid=UID, namespace="team-a", name="train-0", container="trainer")


def test_the_demo_node_samples_through_a_malformed_pod_directory():
    """The shared Kubernetes node of --demo, its notebook pod's log directory renamed without a namespace:
    the sample is taken, the notebook loses its name (said why), the other pods keep theirs."""
    collector = open_collector("shared-k8s", clock=lambda: 1000.0, environ={})
    try:
        texts = collector.machine.files.texts
        for path in [p for p in texts if "/team-vision_notebook-sam_" in p]:
            texts[path.replace("/team-vision_notebook-sam_", "/notebook-sam_")] = texts.pop(path)
        snap = collector.sample()
    finally:
        collector.close()
    owners = {p.device_index: p.owner for p in snap.processes if p.owner is not None}
    assert owners[5].pod is not None and owners[5].pod.name is None
    assert owners[5].note == "the pod's name: /var/log/pods has no NAMESPACE_POD_UID directory for its UID"
    assert owners[0].most_specific() == "ml-research/llama-ft-0" and owners[0].note is None


def test_a_rootless_podman_store_its_user_wrote_askew_costs_the_name_only(tmp_path):
    """gputui's own user's containers.json is that user's to write: names not a list of strings."""
    me = user_name(os.geteuid())
    cgroup = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n"
    listed = json.dumps([{"id": CID, "names": {"0": "x"}}, {"id": 7, "names": ["y"]}, {"id": CID, "names": [3]}])
    root = tree(tmp_path, {f"proc/{PID}/cgroup": cgroup,
                           "home/me/.local/share/containers/storage/overlay-containers/containers.json": listed})
    owner = owner_of(root, user=me)
    assert owner.container == ContainerOwner(runtime="podman", id=CID, rootless=True)
    assert owner.note == ("the container's name: podman's containers.json (root's, or its user's) is not readable "
                          "here or does not list it")


class Broken(HostFiles):
    """A file system that fails in a way no reader expects (a driver's bug, a surprise from a FUSE mount)."""

    def listdir(self, path: str) -> list[str]:
        raise RuntimeError("the file system gave up")


def test_whatever_a_reader_did_not_expect_costs_one_owner_with_a_note(tmp_path):
    root = tree(tmp_path, {f"proc/{PID}/cgroup": POD_CGROUP, f"proc/{PID + 1}/cgroup": "0::/system.slice/a.service\n",
                           f"var/log/pods/team-a_train-0_{UID}/trainer/0.log": ""})
    found = OwnerReader(Broken(root), lambda pid: None).owners({PID: (1.0, "ann"), PID + 1: (1.0, "bo")})
    assert found[PID].user == "ann" and found[PID].pod is None
    assert found[PID].note == "its owner could not be read (RuntimeError: the file system gave up)"
    assert found[PID + 1].unit == "a.service" and found[PID + 1].note is None


def test_a_probes_report_naming_an_unknown_rendezvous_groups_nothing():
    """A probe's report is whatever its process sends: a rendezvous of no known kind is no evidence."""
    probed = [HostProcess(pid=700, ppid=70, command=("python", "t.py"), user="u"),
              HostProcess(pid=701, ppid=71, command=("python", "t.py"), user="u")]
    reports = [ProbeReport(pid=p.pid, taken_at=0.0, placement=Placement(rank=i, rendezvous="evil 1"))
               for i, p in enumerate(probed)]
    assert find_jobs((), probed=probed, probes=reports) == ()
    reports[1] = ProbeReport(pid=701, taken_at=0.0, placement=Placement(rank=1, rendezvous="master a:1"))
    (job,) = find_jobs((), probed=probed, probes=reports)
    assert [r.pid for r in job.ranks] == [701]  # the other rank is in no job with it
