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
    assert located.note == ("runs outside this container: its host PID 5001 has no PID in this "
                            "PID namespace")


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
    assert gone.procfs_pid is None and "host PID 8001" in gone.note


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
