"""The monitor's client: discovery, one-shot reports, reasons for failure, and the live watcher."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from gputui.link import client, paths
from gputui.link.server import ProbeServer
from gputui.model import (
    AllocatorStats,
    MemoryCategories,
    ProbeDevice,
    ProbeReport,
    StepRecord,
    to_jsonable,
)

HERE = Path(__file__).parent  # this module, imported by the probe script below


def sample_report(pid: int) -> ProbeReport:
    """A report with every level of nesting filled in, the same in the test and in the probe."""
    return ProbeReport(
        pid=pid, taken_at=1767603600.5, torch_version="2.13.0+cpu",
        command=("python", "train.py", "--lr", "3e-4"),
        devices=(ProbeDevice(
            device="cuda:0", cuda_index=0, uuid="GPU-1234",
            allocator=AllocatorStats(allocated=3 << 30, reserved=4 << 30, inactive_split=12 << 20,
                                     alloc_retries=0, expandable_segments=False),
            categories=MemoryCategories(parameters=1 << 30, gradients=1 << 30,
                                        optimizer_state=2 << 30, activations=0),
        ),),
        steps=(StepRecord(step=41, ended_at=1767603600.0, duration=0.005, allocated=3 << 30,
                          peak_forward=5 << 30, peak_backward=6 << 30),),
        problems=("sampler: CUDA not initialised yet",),
    )


PROBE_SCRIPT = f"""
import os, sys
sys.path.insert(0, {str(HERE)!r})
from test_link_client import sample_report
from gputui.link.server import ProbeServer
from gputui.model import to_jsonable
srv = ProbeServer({{"report": lambda params: to_jsonable(sample_report(os.getpid()))}})
assert srv.start(), srv.error
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def probe_dir(tmp_path, monkeypatch):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    return directory


@pytest.fixture
def spawn_probe(probe_dir):
    """Start training-job stand-ins with a real probe server; they stop when the test ends."""
    procs = []

    def spawn() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", PROBE_SCRIPT], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(10)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def stale_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(os.fspath(path))
    sock.close()  # the file stays and nobody listens: what a killed process leaves


def test_fetch_report_from_a_probe_in_another_process(spawn_probe):
    proc = spawn_probe()
    report = client.fetch_report(proc.pid, timeout=5.0)
    assert report == sample_report(proc.pid)
    assert report.devices[0].categories.optimizer_state == 2 << 30


def test_report_survives_the_wire_unchanged_in_process(probe_dir):
    srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(os.getpid()))})
    assert srv.start()
    try:
        assert client.fetch_report(os.getpid()) == sample_report(os.getpid())
    finally:
        srv.stop()


def test_discover_lists_live_probes_and_removes_stale_sockets(spawn_probe, probe_dir):
    first, second = spawn_probe(), spawn_probe()
    gone = dead_pid()
    stale_socket(probe_dir / f"{gone}.sock")
    (probe_dir / "notes.txt").write_text("not a socket")
    (probe_dir / "abc.sock").write_text("not a pid")
    found = client.discover()
    assert found == {pid: probe_dir / f"{pid}.sock" for pid in sorted((first.pid, second.pid))}
    assert not (probe_dir / f"{gone}.sock").exists()
    assert (probe_dir / "notes.txt").exists() and (probe_dir / "abc.sock").exists()


def test_live_socket_under_a_dead_pid_is_neither_listed_nor_removed(probe_dir):
    # A probe in another pid namespace (a container sharing the directory) has a pid that means
    # nothing here: discovery must not take it for a stale socket.
    path = probe_dir / f"{dead_pid()}.sock"
    srv = ProbeServer({}, path=path)
    assert srv.start(), srv.error
    try:
        assert client.discover() == {}
        assert path.exists()
    finally:
        srv.stop()


def test_killed_probe_leaves_a_socket_that_discovery_cleans(spawn_probe, probe_dir):
    proc = spawn_probe()
    path = probe_dir / f"{proc.pid}.sock"
    proc.kill()  # SIGKILL: no atexit, the socket stays behind
    proc.wait(5)
    assert path.exists()
    assert client.discover() == {}
    assert not path.exists()


def test_probe_exiting_normally_removes_its_socket(spawn_probe, probe_dir):
    proc = spawn_probe()
    proc.stdin.close()
    assert proc.wait(10) == 0
    assert list(probe_dir.iterdir()) == []


def test_discover_looks_in_the_runtime_dir_and_the_fallback(tmp_path, short_tmp, monkeypatch):
    monkeypatch.delenv(paths.DIR_ENV, raising=False)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    fallback_root = short_tmp
    monkeypatch.setattr(paths, "FALLBACK_ROOT", fallback_root)
    # A job started without XDG_RUNTIME_DIR (cron, a batch system) uses the fallback ...
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(os.getpid()))})
    assert srv.start(), srv.error
    try:
        assert srv.path == fallback_root / f"gputui-{os.getuid()}" / f"{os.getpid()}.sock"
        # ... and a monitor that has one still finds it.
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        assert paths.candidate_dirs()[0] == runtime / "gputui"
        assert client.discover() == {os.getpid(): srv.path}
        assert client.fetch_report(os.getpid()).pid == os.getpid()
    finally:
        srv.stop()


def test_no_probe_in_a_live_process(probe_dir):
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.fetch_report(os.getpid())
    assert caught.value.reason == client.NO_PROBE
    assert "no probe is running in this process" in str(caught.value)
    assert str(caught.value).startswith(f"process {os.getpid()}: ")


def test_no_such_process(probe_dir):
    pid = dead_pid()
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.fetch_report(pid)
    assert (caught.value.reason, caught.value.detail) == (client.NO_PROBE, "no such process")


def test_stale_socket_of_a_live_pid_is_removed_on_contact(probe_dir):
    # The pid was reused by a process without a probe: connecting is refused.
    path = probe_dir / f"{os.getpid()}.sock"
    stale_socket(path)
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "hello")
    assert caught.value.reason == client.NO_PROBE
    assert "stale socket removed" in str(caught.value)
    assert not path.exists()


def test_report_the_monitor_cannot_read_is_a_bad_reply(probe_dir):
    srv = ProbeServer({"report": lambda params: {"pid": "seven", "taken_at": 1.0}})
    assert srv.start()
    try:
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.fetch_report(os.getpid())
        assert caught.value.reason == client.BAD_REPLY
        assert "ProbeReport.pid: expected an integer" in str(caught.value)
    finally:
        srv.stop()


def test_unknown_op_is_reported_as_a_failure(probe_dir):
    srv = ProbeServer({"report": lambda params: {}})
    assert srv.start()
    try:
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.request(os.getpid(), "record_sites", {"steps": 5})
        assert caught.value.reason == client.FAILED
        assert "unknown op 'record_sites'; this probe serves: hello, report" in str(caught.value)
    finally:
        srv.stop()


class FakeProbe:
    """A hand-made listener at our own pid's socket that answers every line with ``reply``."""

    def __init__(self, path: Path, reply: bytes | None, hang_up: bool = True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(os.fspath(path))
        self.sock.listen()
        self.path = path
        self.reply = reply
        self.hang_up = hang_up
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        conn.makefile("rb").readline()
        if self.reply is not None:
            conn.sendall(self.reply)
        if self.hang_up:
            conn.close()
        else:
            self.done.wait(5)
            conn.close()

    def close(self):
        self.done.set()
        self.sock.close()
        self.path.unlink(missing_ok=True)


@pytest.mark.parametrize("reply, reason, words", [
    (b'{"v": 2, "id": 1, "ok": true, "result": {}}\n', client.MISMATCH, "protocol version 2"),
    (b'{"v": 1, "id": null, "ok": false, "code": "wrong_version", "error": "version 0 is not '
     b'supported"}\n', client.MISMATCH, "version 0 is not supported"),
    (b"<html>hello</html>\n", client.BAD_REPLY, "unreadable reply"),
    pytest.param(b'{"v": 1, "id": 1, "ok": true, "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
                 client.BAD_REPLY, "unreadable reply: not valid JSON: JSON nested too deeply",
                 id="nested-too-deeply"),
    (b'{"v": 1, "id": 1}\n', client.BAD_REPLY, "no 'ok' field"),
    (b'{"v": 1, "id": -5, "ok": true, "result": {}}\n', client.BAD_REPLY, "answered request -5"),
    (None, client.NO_PROBE, "closed the connection"),
])
def test_misbehaving_probe_gives_a_clear_reason(probe_dir, reply, reason, words):
    fake = FakeProbe(probe_dir / f"{os.getpid()}.sock", reply)
    try:
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.request(os.getpid(), "hello", timeout=2.0)
        assert caught.value.reason == reason
        assert words in str(caught.value)
    finally:
        fake.close()


def test_silent_probe_times_out(probe_dir):
    fake = FakeProbe(probe_dir / f"{os.getpid()}.sock", None, hang_up=False)
    try:
        started = time.monotonic()
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.request(os.getpid(), "hello", timeout=0.2)
        assert caught.value.reason == client.TIMED_OUT
        assert "did not answer within 0.2 s" in str(caught.value)
        assert time.monotonic() - started < 1.5
    finally:
        fake.close()


def test_reply_over_the_limit_is_refused(probe_dir, monkeypatch):
    from gputui.link import protocol

    monkeypatch.setattr(protocol, "MAX_REPLY", 1000)
    fake = FakeProbe(probe_dir / f"{os.getpid()}.sock", b'{"v": 1, "pad": "' + b"x" * 5000,
                     hang_up=False)
    try:
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.request(os.getpid(), "hello", timeout=2.0)
        assert caught.value.reason == client.BAD_REPLY
        assert "exceeds the 1000-byte limit" in str(caught.value)
    finally:
        fake.close()


def test_probe_unavailable_is_a_user_error():
    from gputui.errors import UserError

    exc = client.ProbeUnavailable(42, client.REFUSED, "refused")
    assert isinstance(exc, UserError) and exc.exit_code == 2 and str(exc) == "process 42: refused"


# --- the watcher ----------------------------------------------------------------------------------


def test_watcher_polls_every_probe_over_one_connection_each(probe_dir, spawn_probe):
    procs = [spawn_probe(), spawn_probe()]
    srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(os.getpid()))})
    assert srv.start()
    watcher = client.ProbeWatcher(timeout=2.0)
    try:
        for _ in range(5):
            reports = watcher.poll()
            expected = {pid: sample_report(pid) for pid in (os.getpid(), *(p.pid for p in procs))}
            assert reports == expected
        assert srv.clients_accepted == 1  # the connection stayed open between polls
        assert srv.requests_answered == 5
        assert watcher.unavailable == {}
    finally:
        watcher.close()
        srv.stop()


def test_watcher_drops_a_probe_that_dies(probe_dir, spawn_probe):
    keep, doomed = spawn_probe(), spawn_probe()
    watcher = client.ProbeWatcher(timeout=2.0)
    try:
        assert set(watcher.poll()) == {keep.pid, doomed.pid}
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(5)
        assert set(watcher.poll()) == {keep.pid}  # noticed at once, not at the next discovery
        assert doomed.pid not in watcher.unavailable
    finally:
        watcher.close()


def test_watcher_forgets_a_probe_that_stops_and_finds_it_again(probe_dir):
    clock = [0.0]
    watcher = client.ProbeWatcher(timeout=1.0, rediscover_every=2.0, clock=lambda: clock[0])
    handlers = {"report": lambda params: to_jsonable(sample_report(os.getpid()))}
    srv = ProbeServer(handlers)
    assert srv.start()
    try:
        assert list(watcher.poll()) == [os.getpid()]
        srv.stop()
        assert watcher.poll() == {}  # the socket is gone: forgotten at once
        srv = ProbeServer(handlers)
        assert srv.start()
        assert watcher.poll() == {}  # not looked for until the next discovery ...
        clock[0] += 2.0
        assert list(watcher.poll()) == [os.getpid()]  # ... which finds it again
    finally:
        watcher.close()
        srv.stop()


def gated_probe(stuck_call: int):
    """A probe server whose ``stuck_call``-th report waits for the returned gate to open; each
    report's taken_at is its call number."""
    gate = threading.Event()
    calls = []

    def report(params):
        calls.append(1)
        if len(calls) == stuck_call:
            gate.wait(5)
        return to_jsonable(ProbeReport(pid=os.getpid(), taken_at=float(len(calls))))

    srv = ProbeServer({"report": report})
    assert srv.start()
    return srv, gate


def test_watcher_keeps_the_last_report_of_a_slow_probe(probe_dir):
    srv, gate = gated_probe(stuck_call=2)
    watcher = client.ProbeWatcher(timeout=5.0)
    try:
        assert watcher.poll()[os.getpid()].taken_at == 1.0
        watcher.timeout = 0.05
        started = time.monotonic()
        assert watcher.poll()[os.getpid()].taken_at == 1.0  # the second is slow: keep the first
        assert time.monotonic() - started < 1.0  # bounded by the timeout, not by the probe
        gate.set()
        watcher.timeout = 5.0
        assert watcher.poll()[os.getpid()].taken_at == 2.0  # the late reply, on the same connection
        assert watcher.poll()[os.getpid()].taken_at == 3.0
        assert srv.clients_accepted == 1
    finally:
        gate.set()
        watcher.close()
        srv.stop()


def test_watcher_gives_up_on_a_stuck_probe_and_tries_again_later(probe_dir):
    srv, gate = gated_probe(stuck_call=2)
    clock = [0.0]
    watcher = client.ProbeWatcher(timeout=5.0, give_up_after=0.1, rediscover_every=2.0,
                                  clock=lambda: clock[0])
    try:
        assert watcher.poll()[os.getpid()].taken_at == 1.0
        watcher.timeout = 0.05
        watcher.poll()
        time.sleep(0.15)
        assert watcher.poll()[os.getpid()].taken_at == 1.0  # the last report stays on show ...
        assert watcher.unavailable == {os.getpid(): "the probe stopped answering"}
        gate.set()
        assert srv.clients_accepted == 1
        clock[0] += 2.0  # ... and the watcher connects afresh at the next retry
        watcher.timeout = 5.0
        assert watcher.poll()[os.getpid()].taken_at == 3.0
        assert srv.clients_accepted == 2 and watcher.unavailable == {}
    finally:
        gate.set()
        watcher.close()
        srv.stop()


def test_watcher_survives_a_reply_with_a_strange_id(probe_dir):
    fake = FakeProbe(probe_dir / f"{os.getpid()}.sock",
                     b'{"v": 1, "id": [1], "ok": true, "result": {"pid": 5, "taken_at": 1.0}}\n',
                     hang_up=False)
    watcher = client.ProbeWatcher(timeout=0.2)  # the reply matches no request: waits it out
    try:
        # Taken as the report of the process serving the socket, whatever pid it names itself by.
        assert watcher.poll() == {os.getpid(): ProbeReport(pid=os.getpid(), taken_at=1.0)}
        assert watcher.error is None
    finally:
        watcher.close()
        fake.close()


def test_watcher_reports_why_a_probe_cannot_answer_and_never_raises(probe_dir):
    srv = ProbeServer({"report": lambda params: {"pid": "not a number"}})
    assert srv.start()
    watcher = client.ProbeWatcher(timeout=1.0)
    try:
        assert watcher.poll() == {}
        assert "cannot read" in watcher.unavailable[os.getpid()]
    finally:
        watcher.close()
        srv.stop()


def test_watcher_survives_an_unsafe_directory(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    monkeypatch.setenv(paths.DIR_ENV, str(open_dir))
    watcher = client.ProbeWatcher()
    assert watcher.poll() == {}
    assert watcher.error is None


@pytest.mark.skipif(os.getuid() != 0, reason="serving as another uid needs root")
def test_root_finds_and_reads_every_users_probes(monkeypatch):
    monkeypatch.delenv(paths.DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    shared_tmp = Path(tempfile.mkdtemp(prefix="gputui-link-test-"))
    shared_tmp.chmod(0o1777)  # like /tmp: anyone may make their own directory here
    monkeypatch.setattr(paths, "FALLBACK_ROOT", shared_tmp)
    monkeypatch.setattr(paths, "RUNTIME_ROOT", shared_tmp / "no-run-user")
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - a probe of user "nobody"
        try:
            os.close(ready_r)
            os.close(done_w)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(os.getpid()))})
            os.write(ready_w, b"1" if srv.start() else (srv.error or "?").encode())
            os.read(done_r, 1)
            srv.stop()
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        assert os.read(ready_r, 4096) == b"1"
        socket_file = shared_tmp / "gputui-65534" / f"{child}.sock"
        assert client.discover(all_users=False) == {}
        assert client.discover(all_users=True) == {child: socket_file}
        assert client.discover() == {child: socket_file}  # root's default
        assert client.fetch_report(child) == sample_report(child)  # the probe lets root in
    finally:
        os.write(done_w, b"x")
        os.waitpid(child, 0)
        shutil.rmtree(shared_tmp)


def _as_user(uid: int, work) -> int:
    """Fork a child that runs ``work()`` as ``uid`` (root only); its pid."""
    child = os.fork()
    if child == 0:  # pragma: no cover - runs as another user
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            work()
        finally:
            os._exit(0)
    return child


@pytest.mark.skipif(os.getuid() != 0, reason="serving as another uid needs root")
def test_another_users_probe_is_named_as_theirs_not_as_missing(monkeypatch):
    monkeypatch.delenv(paths.DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    shared_tmp = Path(tempfile.mkdtemp(prefix="gputui-link-test-"))
    shared_tmp.chmod(0o1777)
    monkeypatch.setattr(paths, "FALLBACK_ROOT", shared_tmp)
    monkeypatch.setattr(paths, "RUNTIME_ROOT", shared_tmp / "no-run-user")
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    said_r, said_w = os.pipe()

    def serve():  # a probe of user "nobody"
        srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(os.getpid()))})
        os.write(ready_w, b"1" if srv.start() else (srv.error or "?").encode())
        os.read(done_r, 1)
        srv.stop()

    def ask(pid):  # gputui probe PID, as uid 65533
        try:
            client.fetch_report(pid)
            os.write(said_w, b"answered")
        except client.ProbeUnavailable as exc:
            os.write(said_w, f"{exc.reason}: {exc}".encode())

    probed = _as_user(65534, serve)
    try:
        assert os.read(ready_r, 4096) == b"1"
        asker = _as_user(65533, lambda: ask(probed))
        said = os.read(said_r, 4096).decode()
        os.waitpid(asker, 0)
        assert said == (f"not_yours: process {probed}: its probe belongs to nobody (uid 65534), in "
                        f"{shared_tmp}/gputui-65534, which other users cannot enter; run gputui probe as that "
                        "user or as root")
        me = os.getpid()  # root's test process: no probe at all
        asker = _as_user(65533, lambda: ask(me))
        assert os.read(said_r, 4096).decode().startswith(f"no_probe: process {me}: no probe is running")
        os.waitpid(asker, 0)
        assert client.fetch_report(probed) == sample_report(probed)  # root may still read it
    finally:
        os.write(done_w, b"x")
        os.waitpid(probed, 0)
        shutil.rmtree(shared_tmp)


# ------------------------------------------------------------------------------ PID namespaces

def _in_new_pid_namespace(probe_dir) -> tuple[subprocess.Popen, int]:
    """A probe in a PID namespace of its own (as in a container sharing the probe directory): the
    unshare process, and the probe's pid as seen from here."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                             PROBE_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        pytest.skip(f"cannot make a PID namespace here: {proc.stderr.read().strip()}")
    import psutil

    inner = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(inner) == 1
    return proc, inner[0]


def test_two_jobs_with_the_same_pid_in_two_containers_both_keep_their_probe(probe_dir):
    first, first_pid = _in_new_pid_namespace(probe_dir)
    second, second_pid = _in_new_pid_namespace(probe_dir)
    try:
        names = sorted(p.name for p in probe_dir.iterdir())
        # Each is pid 1 in its own namespace; the namespace in the name keeps them apart.
        assert len(names) == 2 and all(n.startswith("1@") for n in names)
        found = client.discover()
        assert sorted(found) == sorted((first_pid, second_pid))
        for pid in (first_pid, second_pid):
            report = client.fetch_report(pid, timeout=5.0)
            # Attached to the process as this monitor numbers it, not to this machine's pid 1.
            assert report == dataclasses.replace(sample_report(1), pid=pid)
        with pytest.raises(client.ProbeUnavailable):
            client.fetch_report(1)
    finally:
        for proc in (first, second):
            proc.stdin.close()
            proc.wait(10)


def test_a_socket_under_another_processs_pid_is_refused(probe_dir):
    # A probe socket named after someone else's process (a reused pid, or planted): the kernel
    # says who serves it, and that is not the process it names.
    bystander = subprocess.Popen(["sleep", "60"])
    srv = ProbeServer({"report": lambda params: to_jsonable(sample_report(bystander.pid))},
                      path=probe_dir / f"{bystander.pid}.sock")
    assert srv.start(), srv.error
    try:
        with pytest.raises(client.ProbeUnavailable) as caught:
            client.fetch_report(bystander.pid)
        assert caught.value.reason == client.REFUSED
        assert f"served by process {os.getpid()}, not by process {bystander.pid}" in str(caught.value)
        watcher = client.ProbeWatcher(timeout=2.0)
        assert watcher.poll() == {}
        assert "served by process" in watcher.unavailable[bystander.pid]
        watcher.close()
    finally:
        srv.stop()
        bystander.kill()
        bystander.wait()
