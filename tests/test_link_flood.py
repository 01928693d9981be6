"""The probe's server under abuse from a client of its own user: a connect flood, connections held
open and silent, a table full of idle clients. The job's descriptors and CPU stay bounded, and a
monitor that asks still gets its answer. (bench/bench_flood.py measures the job's step time.)"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from gputui.link import client, paths, protocol
from gputui.link.server import ProbeServer

from test_link_server import connect, read_reply


@pytest.fixture
def probe_dir(tmp_path, monkeypatch):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    return directory


@pytest.fixture
def serve(probe_dir):
    servers = []

    def start(**limits) -> ProbeServer:
        srv = ProbeServer({"echo": lambda params: {"params": params}}, **limits)
        assert srv.start(), srv.error
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False


def test_a_connection_that_never_speaks_is_dropped(serve):
    srv = serve(silent_timeout=0.3)
    silent = [connect(srv.path) for _ in range(5)]
    assert all(closed_by_server(sock, within=3.0) for sock in silent)
    assert srv.clients_dropped_idle == 5
    client.request(os.getpid(), "echo", timeout=2.0)  # and it still answers


def test_a_monitor_keeps_its_connection_while_it_asks_and_loses_it_when_idle(serve):
    srv = serve(silent_timeout=0.2, idle_timeout=0.8)
    sock = connect(srv.path)
    for i in range(4):  # asking every 0.3 s: longer than the silent limit, within the idle one
        sock.sendall(protocol.request_line(i, "echo", {"i": i}))
        assert read_reply(sock)["result"] == {"params": {"i": i}}
        time.sleep(0.3)
    assert srv.clients_dropped_idle == 0
    assert closed_by_server(sock, within=3.0)  # then idle past the limit
    assert srv.clients_dropped_idle == 1


def test_idle_connections_filling_the_table_never_keep_a_monitor_from_its_answer(serve):
    srv = serve(max_clients=4, silent_timeout=60.0, idle_timeout=60.0)
    held = [connect(srv.path) for _ in range(4)]  # all the slots, held open and silent
    time.sleep(0.7)
    # A monitor that asks gets its answer: the longest-idle silent connection makes room.
    assert client.request(os.getpid(), "echo", {"ok": 1}, timeout=2.0) == {"params": {"ok": 1}}
    assert srv.clients_evicted == 1
    assert sum(closed_by_server(sock, within=0.5) for sock in held) == 1
    for sock in held:
        sock.close()


def test_a_connect_flood_is_accepted_at_a_bounded_rate(serve):
    srv = serve(accept_rate=200.0, accept_burst=20.0)
    attempts = 0
    stop = time.monotonic() + 1.0
    while time.monotonic() < stop:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(os.fspath(srv.path))
        except (BlockingIOError, ConnectionRefusedError, OSError):
            pass
        sock.close()
        attempts += 1
    accepted = srv.clients_accepted
    assert attempts > 500  # a real flood
    assert accepted <= 20 + 200 * 1.5  # the burst, then the rate, over the second (and a margin)
    assert srv.accepts_deferred >= 1 and not srv.problems
    # After the flood, a monitor is served as before.
    assert client.request(os.getpid(), "echo", {"after": 1}, timeout=3.0) == {"params": {"after": 1}}


def test_a_quiet_server_sleeps(serve):
    serve()
    thread = next(t for t in threading.enumerate() if t.name == "gputui-probe-server")
    before = time.thread_time()  # not the server's: measure its wakeups from /proc instead
    ticks = _thread_cpu_ticks(thread.native_id)
    time.sleep(1.0)
    assert _thread_cpu_ticks(thread.native_id) - ticks <= 1  # at most a tick (10 ms) in a second
    assert time.thread_time() >= before


def test_the_watcher_reconnects_rather_than_writing_into_a_dropped_connection(serve, monkeypatch):
    srv = ProbeServer({"report": lambda params: {"pid": os.getpid(), "taken_at": 1.0}},
                      idle_timeout=0.5)
    assert srv.start(), srv.error
    monkeypatch.setattr(protocol, "IDLE_TIMEOUT", 0.5)
    watcher = client.ProbeWatcher(timeout=2.0)
    try:
        assert list(watcher.poll()) == [os.getpid()]
        time.sleep(1.0)  # the probe hangs up on the idle connection meanwhile
        assert list(watcher.poll()) == [os.getpid()]
        assert watcher.unavailable == {}
    finally:
        watcher.close()
        srv.stop()


def _thread_cpu_ticks(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime
