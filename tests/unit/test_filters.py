"""The --only / --only-visible / --user / --pid filters over a hand-made snapshot."""

import pytest

from gputui.collect.filters import select
from gputui.errors import UserError
from gputui.model import Device, GpuProcess, HostProcess, Snapshot

SNAPSHOT = Snapshot(
    taken_at=1000.0,
    devices=(
        Device(index=0, uuid="GPU-aaaa0000-1111", cuda_index=0),
        Device(index=1, uuid="GPU-bbbb0000-2222", cuda_index=None),
        Device(index=2, uuid="GPU-bbbb9999-3333", cuda_index=1),
    ),
    processes=(
        GpuProcess(pid=100, device_index=0, local_pid=100, user="alice", ppid=10),
        GpuProcess(pid=200, device_index=1, local_pid=200, user="bob", ppid=20),
        GpuProcess(pid=201, device_index=2, local_pid=31, user="bob", ppid=20),
        GpuProcess(pid=300, device_index=2, local_pid=None, user=None, state="unmapped"),
    ),
    parents=(
        HostProcess(pid=10, ppid=1, name="bash"),
        HostProcess(pid=20, ppid=5, name="torchrun"),
        HostProcess(pid=5, ppid=1, name="tmux"),
    ),
    problems=("GPU 9: something",),
)


def pids(snapshot):
    return [p.pid for p in snapshot.processes]


def test_no_filter_returns_the_same_snapshot():
    assert select(SNAPSHOT) is SNAPSHOT


def test_only_by_index_and_uuid_prefix():
    chosen = select(SNAPSHOT, only=("2", "GPU-aaaa"))
    assert [d.index for d in chosen.devices] == [0, 2]
    assert pids(chosen) == [100, 201, 300]
    assert [p.pid for p in chosen.parents] == [10, 20, 5]
    assert chosen.problems == SNAPSHOT.problems
    assert chosen.taken_at == 1000.0


def test_only_full_uuid_any_case():
    assert [d.index for d in select(SNAPSHOT, only=("gpu-BBBB0000-2222",)).devices] == [1]


def test_only_unknown_gpu_is_a_user_error():
    with pytest.raises(UserError, match=r"--only 7: no such GPU; the GPUs here are 0 \(GPU-aaaa"):
        select(SNAPSHOT, only=("7",))
    with pytest.raises(UserError, match="more than one GPU"):
        select(SNAPSHOT, only=("GPU-bbbb",))


def test_only_visible_uses_the_collectors_cuda_indices():
    chosen = select(SNAPSHOT, only_visible=True)
    assert [d.index for d in chosen.devices] == [0, 2]
    assert pids(chosen) == [100, 201, 300]


def test_only_visible_with_another_environment():
    chosen = select(SNAPSHOT, only_visible=True, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert [(d.index, d.cuda_index) for d in chosen.devices] == [(1, 0)]
    assert pids(chosen) == [200]


def test_user_filter_keeps_every_gpu():
    chosen = select(SNAPSHOT, users=("bob",))
    assert [d.index for d in chosen.devices] == [0, 1, 2]
    assert pids(chosen) == [200, 201]
    assert [p.pid for p in chosen.parents] == [20, 5]


def test_pid_filter_matches_host_or_local_pid():
    assert pids(select(SNAPSHOT, pids=(31,))) == [201]
    assert pids(select(SNAPSHOT, pids=(100, 300))) == [100, 300]
    assert select(SNAPSHOT, pids=(100,)).parents == (SNAPSHOT.parents[0],)


def test_filters_combine():
    chosen = select(SNAPSHOT, only=("1", "2"), users=("bob",), pids=(201, 100))
    assert pids(chosen) == [201]
    assert [d.index for d in chosen.devices] == [1, 2]


def test_a_user_with_no_gpu_process_is_told_why_nothing_is_shown():
    chosen = select(SNAPSHOT, users=("nosuchuser",))
    assert chosen.processes == ()
    assert chosen.problems == ("GPU 9: something", "--user nosuchuser: no GPU process of that user "
                               "(GPU processes here belong to alice, bob)")


def test_a_pid_that_is_on_no_gpu_is_told():
    chosen = select(SNAPSHOT, pids=(99,))
    assert chosen.problems[-1] == "--pid 99: no such process on the GPUs"


def test_only_visible_hiding_every_gpu_says_what_cuda_visible_devices_holds():
    chosen = select(SNAPSHOT, only_visible=True, environ={"CUDA_VISIBLE_DEVICES": "7"})
    assert chosen.devices == ()
    assert chosen.problems[-1] == ("--only-visible: no GPU here is visible to CUDA "
                                   "(CUDA_VISIBLE_DEVICES is '7'; the GPUs here are 0, 1, 2)")
    empty = select(SNAPSHOT, only_visible=True, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert "CUDA_VISIBLE_DEVICES is empty" in empty.problems[-1]


def test_filters_that_keep_something_add_no_line():
    assert select(SNAPSHOT, users=("bob",)).problems == SNAPSHOT.problems
    assert select(SNAPSHOT, only_visible=True).problems == SNAPSHOT.problems
