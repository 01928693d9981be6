"""The probe's server under abuse from a client of its own user: a connect flood, connections held
open and silent, a table full of idle clients. The job's descriptors and CPU stay bounded, and a
monitor that asks still gets its answer. (bench/bench_flood.py measures the job's step time.)"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import pytest
from clocks import MovableClock
from link_helpers import connect, read_reply

from gputui.link import client, paths, protocol
from gputui.link.server import ProbeServer


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
        srv = ProbeServer({"echo": lambda params: {"params": params},
                           "big": lambda params: {"blob": "z" * 200_000}}, **limits)
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
    except TimeoutError:
        return False


def connect_waiting(path, wait: float = 5.0) -> socket.socket | None:
    """A connection that waits in the kernel while the probe's backlog is full (the probe takes
    connections at a bounded rate), as a held-open flood would; None if it could not get in."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(wait), 0))
    try:
        sock.connect(os.fspath(path))
    except OSError:
        sock.close()
        return None
    return sock


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_for(condition, within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_connection_that_never_speaks_is_dropped(serve):
    srv = serve(silent_timeout=0.3)
    silent = [connect(srv.path) for _ in range(5)]
    assert all(closed_by_server(sock, within=3.0) for sock in silent)
    assert srv.clients_dropped_idle == 5
    client.request(os.getpid(), "echo", timeout=2.0)  # and it still answers


def test_a_monitor_keeps_its_connection_while_it_asks_and_loses_it_when_idle(serve):
    clock = MovableClock(running=False)
    srv = serve(silent_timeout=0.2, idle_timeout=0.8, clock=clock)
    sock = connect(srv.path)
    for i in range(4):  # asking every 0.3 s: longer than the silent limit, within the idle one
        sock.sendall(protocol.request_line(i, "echo", {"i": i}))
        assert read_reply(sock)["result"] == {"params": {"i": i}}
        clock.advance(0.3)
    assert srv.clients_dropped_idle == 0
    clock.advance(0.6)  # then idle past the limit (0.9 s since it last asked)
    assert closed_by_server(sock, within=3.0)
    assert srv.clients_dropped_idle == 1


@pytest.mark.parametrize("held_open", [3, 4])  # the limit less one, and the limit
def test_idle_connections_filling_the_table_never_keep_a_monitor_from_its_answer(serve, held_open):
    srv = serve(max_clients=4, silent_timeout=60.0, idle_timeout=60.0)
    held = [connect(srv.path) for _ in range(held_open)]  # held open and silent
    time.sleep(0.7)
    # A monitor that asks gets its answer: at the limit, the oldest silent connection makes room.
    assert client.request(os.getpid(), "echo", {"ok": 1}, timeout=2.0) == {"params": {"ok": 1}}
    assert srv.clients_evicted == held_open - 3
    assert sum(closed_by_server(sock, within=0.2) for sock in held) == held_open - 3
    for sock in held:
        sock.close()


def test_128_idle_connections_cost_few_descriptors_and_a_monitor_is_answered(serve):
    # The case, with the default limits: 128 connections held open and silent.
    srv = serve()
    before = open_fds()
    held = [sock for sock in (connect_waiting(srv.path) for _ in range(128)) if sock is not None]
    assert len(held) == 128
    time.sleep(0.7)
    assert client.request(os.getpid(), "echo", {"ok": 1}, timeout=3.0) == {"params": {"ok": 1}}
    # 128 here (the held ends) and the probe's side of at most 16 of them, not of all 128
    assert open_fds() - before <= 128 + 16
    for sock in held:
        sock.close()


def test_a_monitor_that_asks_keeps_its_connection_through_a_stream_of_silent_ones(serve):
    srv = serve(max_clients=4, silent_timeout=60.0, idle_timeout=60.0)
    monitor = connect(srv.path)
    stop = threading.Event()
    held: list[socket.socket] = []

    def pile_up():  # connect and hold, as fast as the probe takes them
        while not stop.is_set() and len(held) < 400:
            sock = connect_waiting(srv.path, wait=1.0)
            if sock is not None:
                held.append(sock)

    flooder = threading.Thread(target=pile_up)
    flooder.start()
    try:
        for i in range(4):  # asking every 0.8 s, as a monitor refreshing every second or so
            monitor.sendall(protocol.request_line(i, "echo", {"i": i}))
            assert read_reply(monitor)["result"] == {"params": {"i": i}}
            time.sleep(0.8)
    finally:
        stop.set()
        flooder.join()
    assert srv.clients_evicted >= 3  # the silent ones made room for each other, not the monitor
    monitor.sendall(protocol.request_line(9, "echo", {}))
    assert read_reply(monitor)["id"] == 9
    for sock in held:
        sock.close()


def test_a_client_that_stops_reading_its_replies_is_dropped_when_idle(serve):
    srv = serve(silent_timeout=0.2, idle_timeout=0.6)
    sock = connect(srv.path)
    for i in range(20):  # 4 MB of replies it never reads: most stay in the probe's buffer
        sock.sendall(protocol.request_line(i, "big"))
    assert wait_for(lambda: srv.clients_dropped_idle == 1, within=5.0)
    sock.close()
    assert client.request(os.getpid(), "echo", {"after": 1}, timeout=2.0) == {"params": {"after": 1}}


def test_a_client_taking_a_long_reply_slowly_is_not_idle(serve):
    clock = MovableClock(running=False)
    srv = serve(silent_timeout=0.2, idle_timeout=0.6, clock=clock)
    sock = connect(srv.path)
    for i in range(10):
        sock.sendall(protocol.request_line(i, "big"))
    replies = b""
    while replies.count(b"\n") < 10:  # 2 MB, 4 KiB every 4 ms: 2 s, longer than the idle timeout
        part = sock.recv(4096)
        assert part, "dropped while taking its replies"
        replies += part
        clock.advance(0.004)
    assert srv.clients_dropped_idle == 0
    sock.close()


def test_a_connect_flood_is_accepted_at_a_bounded_rate(serve):
    srv = serve()  # the defaults: 200 a second, a burst of 50
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
    assert attempts > 2000  # a real flood
    assert accepted <= 50 + 200 * 1.5  # the burst, then the rate, over the second (and a margin)
    assert srv.accepts_deferred >= 1
    assert len(srv.problems) == 1 and "faster than 200 connections/s" in srv.problems[0]  # said once
    # After the flood, a monitor is served as before.
    assert client.request(os.getpid(), "echo", {"after": 1}, timeout=3.0) == {"params": {"after": 1}}


def test_requests_asked_flat_out_are_answered_at_a_bounded_rate_in_order(serve):
    """A poller asking as fast as it can gets the burst, then the rate: each answer costs the job
    CPU time under its GIL (the cost measured on an H100 is in docs/validation.md)."""
    srv = serve(request_rate=50.0, request_burst=10.0)
    sock = connect(srv.path)
    replies = sock.makefile("rb")
    sent = 100
    started = time.monotonic()
    sock.sendall(b"".join(protocol.request_line(i, "echo", {"i": i}) for i in range(sent)))
    answered = [json.loads(replies.readline())["id"] for _ in range(40)]
    after_40 = time.monotonic() - started
    answered += [json.loads(replies.readline())["id"] for _ in range(sent - 40)]
    took = time.monotonic() - started
    assert answered == list(range(sent))  # every one, in order
    assert 0.5 <= after_40 <= 1.2  # the burst of 10, then 30 at 50 a second: 0.6 s
    assert 1.6 <= took <= 2.6  # 10 at once, 90 at 50 a second: 1.8 s
    assert srv.requests_deferred >= 1
    assert [p for p in srv.problems if "requests/s" in p] == [
        "asked faster than 50 requests/s: answering at that rate (monitors polling it very often, or many at once)"]


def test_a_monitor_is_answered_while_others_ask_flat_out(serve):
    """Waiting requests are answered in the order they came: two flat-out pollers cannot keep a
    monitor that asks once a second from its answer for long. On the server's clock, which stands
    still but when the test moves it: the rate's time, whatever the machine's load."""
    clock = MovableClock(running=False)
    srv = serve(request_rate=20.0, request_burst=5.0, clock=clock)
    stop = threading.Event()
    counts = [0, 0]

    def flat_out(n: int) -> None:
        sock = connect(srv.path)
        sock.settimeout(30.0)
        while not stop.is_set():
            sock.sendall(protocol.request_line(n, "echo", {}))
            read_reply(sock)
            counts[n] += 1
        sock.close()

    def deferred(n: int) -> bool:
        return wait_for(lambda: srv.requests_deferred == n, within=30)

    pollers = [threading.Thread(target=flat_out, args=(n,)) for n in range(2)]
    for poller in pollers:
        poller.start()
    try:
        for i in range(3):
            # both pollers wait for the rate (the burst spent, then each round's answers)
            assert deferred(2 + 3 * i), srv.requests_deferred
            sock = connect(srv.path)
            sock.settimeout(30.0)
            sock.sendall(protocol.request_line(i, "echo", {"monitor": i}))
            assert deferred(3 + 3 * i)  # the monitor waits too
            clock.advance(0.16)  # three answers' time at 20 a second: the two pollers', then the monitor's
            assert read_reply(sock)["result"] == {"params": {"monitor": i}}
            sock.close()
        assert deferred(2 + 3 * 3)
        assert srv.requests_answered == 5 + 3 * 3  # the burst, then the rate
    finally:
        stop.set()
        clock.advance(1.0)  # the pollers' last requests answered: they see the stop
        for poller in pollers:
            poller.join(timeout=10)
    assert min(counts) >= 3  # both pollers answered in every round


def test_a_quiet_server_sleeps(serve):
    serve()
    thread = next(t for t in threading.enumerate() if t.name == "gputui-probe-server")
    ticks = _thread_cpu_ticks(thread.native_id)
    time.sleep(1.0)
    assert _thread_cpu_ticks(thread.native_id) - ticks <= 1  # at most a tick (10 ms) in a second


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
