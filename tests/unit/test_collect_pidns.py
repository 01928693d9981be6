"""Mapping NVML's host PIDs into a container's PID namespace, against a fake /proc in tmp_path."""

import os

from gputui.collect.pidns import HOST_PID_NAMESPACE, Located, PidNamespace

CONTAINER_NS = "pid:[4026532999]"
SIBLING_NS = "pid:[4026533111]"


def make_process(root, name, nspid, namespace=None):
    folder = root / str(name)
    (folder / "ns").mkdir(parents=True)
    (folder / "status").write_text(
        "Name:\tpython\nState:\tS (sleeping)\nNSpid:\t" + "\t".join(map(str, nspid)) + "\nUid:\t0\n")
    if namespace is not None:
        os.symlink(namespace, folder / "ns" / "pid")  # a dangling link, as in the real /proc


def test_host_namespace_maps_every_pid_to_itself(tmp_path):
    make_process(tmp_path, "self", [4242], HOST_PID_NAMESPACE)
    ns = PidNamespace(tmp_path)
    assert ns.in_namespace is False
    assert ns.locate(12345) == Located(12345, 12345)


def test_no_procfs_is_treated_as_the_host(tmp_path):
    ns = PidNamespace(tmp_path / "missing")
    assert ns.in_namespace is False
    assert ns.locate(7) == Located(7, 7)


def test_container_with_its_own_procfs_cannot_map(tmp_path):
    make_process(tmp_path, "self", [17], CONTAINER_NS)
    # A local process that happens to have the host PID's number must not be mistaken for it.
    make_process(tmp_path, 5001, [5001], CONTAINER_NS)
    ns = PidNamespace(tmp_path)
    assert ns.in_namespace is True
    assert ns.procfs_is_outer is False
    located = ns.locate(5001)
    assert located.procfs_pid is None and located.local_pid is None
    assert located.note == "host process"


def test_host_procfs_inside_a_container_maps_through_nspid(tmp_path):
    make_process(tmp_path, "self", [9000, 17], CONTAINER_NS)
    make_process(tmp_path, 5001, [5001, 42], CONTAINER_NS)  # a GPU job in our container
    make_process(tmp_path, 6001, [6001, 42], SIBLING_NS)  # another container's job
    make_process(tmp_path, 7001, [7001])  # host process, namespace link unreadable
    ns = PidNamespace(tmp_path)
    assert ns.procfs_is_outer is True
    assert ns.locate(5001) == Located(5001, 42)
    assert ns.locate(6001) == Located(6001, None, "runs outside this container's PID namespace")
    assert ns.locate(7001) == Located(7001, None, "runs outside this container's PID namespace")
    gone = ns.locate(8001)
    assert gone.procfs_pid is None and gone.note == "host process"


def test_unreadable_namespace_link_falls_back_to_nspid_depth(tmp_path):
    make_process(tmp_path, "self", [9000, 17], CONTAINER_NS)
    make_process(tmp_path, 5002, [5002, 43])  # another user's process: ns link not readable
    assert PidNamespace(tmp_path).locate(5002) == Located(5002, 43)


def test_this_machine_is_read_without_error():
    ns = PidNamespace("/proc")
    located = ns.locate(os.getpid())
    if ns.in_namespace:  # e.g. CI in a container: our own PID is not a host PID
        assert located.note
    else:
        assert located == Located(os.getpid(), os.getpid())


# -- through the collector, on simulated GPUs -----------------------------------------------------

def open_in_container(proc_root):
    import pynvml

    from gputui.collect import sim
    from gputui.collect.collector import Collector

    machine = sim.install("workstation", clock=lambda: 0.0)
    return Collector(pynvml, machine.psutil, clock=machine.clock, wallclock=machine.wallclock,
                     hostname=machine.hostname, environ={}, proc_root=proc_root,
                     source="sim:workstation", machine=machine)


def test_collector_in_a_container_lists_host_processes_as_unmapped(tmp_path):
    make_process(tmp_path, "self", [17], CONTAINER_NS)
    make_process(tmp_path, 3120, [3120], CONTAINER_NS)  # same number, different process
    collector = open_in_container(tmp_path)
    try:
        snapshot = collector.sample()
    finally:
        collector.close()
    train = next(p for p in snapshot.processes if p.pid == 3120)
    assert train.state == "unmapped" and train.local_pid is None
    assert train.name == "python"  # the driver still knows its name
    assert train.user is None and train.command == ()  # nothing borrowed from local PID 3120
    assert train.gpu_memory is not None
    assert train.note == "host process"
    assert {p.state for p in snapshot.processes} == {"unmapped"}
    assert snapshot.parents == ()
    # said once for the sample, plainly, with what to do; the devices' figures are whole
    assert snapshot.problems == (
        "NVML's processes are the host's; this container cannot see them (run with --pid=host)",)
    assert [d.memory_used is not None and d.gpu_util is not None for d in snapshot.devices] == [True, True]


def test_in_a_container_once_says_it_once_and_shows_the_containers_probed_process(tmp_path):
    import dataclasses

    from gputui.model import HostProcess, ProbeReport
    from gputui.plain.render import render

    make_process(tmp_path, "self", [17], CONTAINER_NS)
    collector = open_in_container(tmp_path)
    try:
        snapshot = collector.sample()
    finally:
        collector.close()
    # this container's own training process, probed: its probe reports the container's PID 42
    mine = ProbeReport(pid=42, taken_at=snapshot.taken_at, command=("python", "train.py"))
    snapshot = dataclasses.replace(snapshot, probes=(mine,),
                                   probed=(HostProcess(pid=42, command=("python", "train.py"), user="me"),))
    text = render(snapshot, width=160)
    assert text.count("this container cannot see them (run with --pid=host)") == 1
    assert "3120 n/a    0 C      17.1G 98%  n/a      n/a     n/a python [host process]" in text  # the monitor's cell
    assert "Probed processes not listed by NVML\n42 me  python train.py" in text


def test_collector_with_the_host_procfs_maps_local_pids(tmp_path):
    make_process(tmp_path, "self", [9000, 17], CONTAINER_NS)
    make_process(tmp_path, 3120, [3120, 42], CONTAINER_NS)
    make_process(tmp_path, 1455, [1455])  # Xorg, a host process
    collector = open_in_container(tmp_path)
    try:
        processes = {p.pid: p for p in collector.sample().processes}
    finally:
        collector.close()
    train = processes[3120]
    assert (train.state, train.local_pid, train.user, train.note) == ("ok", 42, "alice", None)
    # visible through the host's /proc but not in our namespace: details, no local PID
    xorg = processes[1455]
    assert (xorg.state, xorg.local_pid, xorg.name) == ("ok", None, "Xorg")
    assert xorg.note == "runs outside this container's PID namespace"
    assert processes[2210].state == "unmapped"  # no /proc entry at all
    assert not any("--pid=host" in p for p in collector.sample().problems)  # the host's /proc: it can see
