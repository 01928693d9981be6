"""The kubelet's directories and checkpoint are read once per change, not per process or sample (issue 44
item 9): a node's /var/log/pods may hold 100,000 entries and its device-plugin checkpoint megabytes, and
--once with a few pod processes took 3-11 s reading them again for each. Real directories under a
HostFiles root; what is listed and read is counted.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from gputui.collect.owners import CHECKPOINT, CONTAINER_LOGS, POD_LOGS, HostFiles, OwnerReader

CID = "ab" * 32
PODS = 300  # pods with a GPU process each
OTHERS = 2000  # other pods' log directories


class Counted(HostFiles):
    """The host's files under ``root``, counting what is listed and read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: Counter[str] = Counter()
        self.read_: Counter[str] = Counter()

    def listdir(self, path: str) -> list[str]:
        self.listed[path] += 1
        return super().listdir(path)

    def read(self, path: str, limit: int) -> bytes:
        self.read_[path] += 1
        return super().read(path, limit)


def uid_of(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def add_pod(root: Path, n: int, with_process: bool = True) -> None:
    (root / f"var/log/pods/ns_pod-{n}_{uid_of(n)}/c").mkdir(parents=True)
    if with_process:
        cgroup = root / f"proc/{10_000 + n}/cgroup"
        cgroup.parent.mkdir(parents=True)
        cgroup.write_text(f"0::/kubepods.slice/kubepods-pod{uid_of(n).replace('-', '_')}.slice/"
                          f"cri-containerd-{CID}.scope\n")


def write_checkpoint(root: Path, pods) -> None:
    entries = [{"PodUID": uid_of(n), "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": {"0": [f"GPU-{n}"]}} for n in pods]
    path = root / CHECKPOINT.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1}))


def settle(root: Path, at: float) -> None:
    """The directories and checkpoint as if last changed at ``at``."""
    for path in (POD_LOGS, CONTAINER_LOGS, CHECKPOINT):
        os.utime(root / path.lstrip("/"), (at, at))


def node(root: Path) -> Path:
    for n in range(PODS):
        add_pod(root, n)
    for n in range(PODS, PODS + OTHERS):
        add_pod(root, n, with_process=False)
    (root / CONTAINER_LOGS.lstrip("/")).mkdir(parents=True)
    write_checkpoint(root, range(PODS))
    settle(root, time.time() - 60)
    return root


def sample(reader: OwnerReader, pids, started: float = 1.0):
    return reader.owners({pid: (started, "u") for pid in pids})


def test_hundreds_of_pod_processes_cost_one_listing_and_one_parse(tmp_path):
    files = Counted(node(tmp_path))
    reader = OwnerReader(files, lambda pid: None)
    pids = [10_000 + n for n in range(PODS)]
    owners = sample(reader, pids)
    assert all(owners[10_000 + n].pod.name == f"pod-{n}" for n in range(PODS))  # type: ignore[union-attr]
    assert all(owners[10_000 + n].pod.gpus == (f"GPU-{n}",) for n in range(PODS))  # type: ignore[union-attr]
    assert (files.listed[POD_LOGS], files.listed[CONTAINER_LOGS], files.read_[CHECKPOINT]) == (1, 1, 1)
    sample(reader, pids, started=2.0)  # as many new processes (pids recycled): the files have not changed
    assert (files.listed[POD_LOGS], files.listed[CONTAINER_LOGS], files.read_[CHECKPOINT]) == (1, 1, 1)
    # a new pod and its GPU: each file read again once
    add_pod(tmp_path, 90_000)
    write_checkpoint(tmp_path, [*range(PODS), 90_000])
    settle(tmp_path, time.time() - 30)
    late = sample(reader, [*pids, 10_000 + 90_000], started=2.0)[10_000 + 90_000]
    assert late.pod is not None and (late.pod.name, late.pod.gpus) == ("pod-90000", ("GPU-90000",))
    assert (files.listed[POD_LOGS], files.read_[CHECKPOINT]) == (2, 2)


def test_a_directory_read_in_the_second_it_changed_is_read_again_at_the_next_sample(tmp_path):
    """Two changes within one tick of the file system's clock leave the same times: what was listed
    right after a change is listed again once, at the next sample (never within one sample)."""
    files = Counted(node(tmp_path))
    changed = time.time() - 60
    now = [changed + 0.2]
    reader = OwnerReader(files, lambda pid: None, wallclock=lambda: now[0])
    settle(tmp_path, changed)
    pids = [10_000 + n for n in range(PODS)]
    sample(reader, pids)
    assert files.listed[POD_LOGS] == 1  # once in the sample, however many processes
    add_pod(tmp_path, 90_000)  # a pod started in the same tick: the directory's times as they were
    settle(tmp_path, changed)
    now[0] = changed + 0.4
    new = sample(reader, [10_000 + 90_000])[10_000 + 90_000]
    assert new.pod is not None and new.pod.name == "pod-90000"
    assert files.listed[POD_LOGS] == 2
    now[0] = changed + 5.0
    sample(reader, [10_000 + n for n in range(5)], started=3.0)  # read again: the last reading was unsettled
    sample(reader, [10_000 + n for n in range(5)], started=4.0)  # settled now
    assert files.listed[POD_LOGS] == 3
