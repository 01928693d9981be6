"""The probe server against well-behaved, broken, hostile and vanishing clients.

Every abuse test ends by checking that the server still answers a normal request.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from link_helpers import connect, read_reply

from gputui.link import client, paths, protocol
from gputui.link.admission import MAX_CLIENTS
from gputui.link.peers import peer_allowed, peer_credentials
from gputui.link.server import ProbeServer


@pytest.fixture
def probe_dir(tmp_path, monkeypatch):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    return directory


@pytest.fixture
def server(probe_dir):
    def boom(params):
        raise RuntimeError("the probe tripped")

    def slow(params):
        time.sleep(float(params.get("seconds", 0.3)))
        return {"slept": True}

    handlers = {
        "echo": lambda params: {"params": params},
        "boom": boom,
        "slow": slow,
        "weird": lambda params: {"value": object()},
        "nan": lambda params: {"value": float("nan"), "fine": 1.5},
        "big": lambda params: {"blob": "z" * 200_000},
    }
    srv = ProbeServer(handlers)
    assert srv.start(), srv.error
    yield srv
    srv.stop()


def hung_up(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may hang up before taking it all: its reply is what we check


def still_answers(srv: ProbeServer) -> None:
    assert client.request(os.getpid(), "echo", {"n": 7}, timeout=2.0) == {"params": {"n": 7}}
    assert srv.serving


def test_round_trip_in_process(server, probe_dir):
    assert server.path == probe_dir / f"{os.getpid()}.sock"
    assert client.request(os.getpid(), "echo", {"a": [1, "b"]}) == {"params": {"a": [1, "b"]}}
    hello = client.request(os.getpid(), "hello")
    assert hello == {"protocol": 1, "pid": os.getpid(),
                     "ops": ["big", "boom", "echo", "hello", "nan", "slow", "weird"]}


def test_many_requests_on_one_connection_are_answered_in_order(server):
    sock = connect(server.path)
    sock.sendall(b"".join(protocol.request_line(i, "echo", {"i": i}) for i in range(20)))
    replies = []
    buffer = b""
    while len(replies) < 20:
        buffer += sock.recv(65536)
        *lines, buffer = buffer.split(b"\n")
        replies += [json.loads(line) for line in lines]
    assert [r["id"] for r in replies] == list(range(20))
    assert [r["result"]["params"]["i"] for r in replies] == list(range(20))
    sock.close()


def test_socket_and_directory_permissions(server, probe_dir):
    assert stat.S_ISSOCK(os.lstat(server.path).st_mode)
    assert stat.S_IMODE(os.lstat(server.path).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(probe_dir).st_mode) == 0o700
    assert os.lstat(server.path).st_uid == os.getuid()
    # No temporary bind names are left behind.
    assert sorted(p.name for p in probe_dir.iterdir()) == [f"{os.getpid()}.sock"]


def test_default_directory_is_created_private(short_tmp, monkeypatch):
    monkeypatch.delenv(paths.DIR_ENV, raising=False)
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    srv = ProbeServer({})
    assert srv.start(), srv.error
    try:
        assert srv.path == runtime / "gputui" / f"{os.getpid()}.sock"
        assert stat.S_IMODE(os.lstat(runtime / "gputui").st_mode) == 0o700
    finally:
        srv.stop()
    assert not srv.path.exists()


def test_credential_check_allows_only_own_user_and_root():
    assert peer_allowed(1000, own_uid=1000)
    assert peer_allowed(0, own_uid=1000)
    assert not peer_allowed(1001, own_uid=1000)
    assert not peer_allowed(65534, own_uid=0)


def test_peer_credentials_name_the_connecting_process():
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        assert peer_credentials(a) == (os.getpid(), os.getuid(), os.getgid())
    finally:
        a.close()
        b.close()


def test_foreign_uid_is_refused_by_the_server(server, monkeypatch):
    # Pretend our own uid is another one: every peer (us) is then a foreign, non-root user.
    monkeypatch.setattr("gputui.link.admission.peer_allowed", lambda uid: False)
    sock = connect(server.path)
    reply = read_reply(sock)
    assert reply["ok"] is False and reply["code"] == "refused"
    assert "only answers its own user" in reply["error"]
    assert hung_up(sock)
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "echo")
    assert caught.value.reason == client.REFUSED
    assert any("refused a connection from uid" in p for p in server.problems)


def connect_as(uid: int, path) -> str:
    """What a process of user ``uid`` gets when it asks the probe at ``path`` (fork, no exec)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        outcome = "child failed"
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(2)
            try:
                sock.connect(os.fspath(path))
                send_quietly(sock, protocol.request_line(1, "echo"))
                outcome = sock.makefile("rb").readline().decode().strip()
            except PermissionError:
                outcome = "permission denied"
        except BaseException as exc:
            outcome = f"child failed: {exc!r}"
        finally:
            os.write(w, outcome.encode())
            os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    with os.fdopen(r, "rb") as pipe:
        return pipe.read().decode()


@pytest.fixture
def reachable_server(monkeypatch):
    """A server whose private directory sits in /tmp, so another user can walk up to it."""
    parent = Path(tempfile.mkdtemp(prefix="gputui-link-test-"))
    parent.chmod(0o755)
    directory = parent / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    srv = ProbeServer({"echo": lambda params: {"params": params}})
    assert srv.start(), srv.error
    yield srv
    srv.stop()
    shutil.rmtree(parent)


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another uid needs root")
def test_another_user_cannot_reach_the_socket(reachable_server):
    assert connect_as(65534, reachable_server.path) == "permission denied"
    still_answers(reachable_server)


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another uid needs root")
def test_another_user_is_refused_even_past_the_file_permissions(reachable_server):
    # If the directory and socket were opened up by mistake, SO_PEERCRED still keeps others out.
    server = reachable_server
    server.path.parent.chmod(0o755)
    server.path.chmod(0o666)
    reply = json.loads(connect_as(65534, server.path))
    assert (reply["ok"], reply["code"]) == (False, "refused")
    assert any("refused a connection from uid 65534" in p for p in server.problems)
    server.path.parent.chmod(0o700)  # the client only looks in private directories
    still_answers(server)


@pytest.mark.parametrize("line, code", [
    (b"this is not json\n", "bad_json"),
    (b"\xff\xfe\n", "bad_json"),
    (b"[1, 2, 3]\n", "bad_request"),
    (b'{"v": 1, "id": 3}\n', "bad_request"),
    (b'{"v": 1, "id": 3, "op": "echo", "params": [1]}\n', "bad_request"),
    (b'{"v": 1, "id": true, "op": "echo"}\n', "bad_request"),
    (b'{"v": 2, "id": 3, "op": "echo"}\n', "wrong_version"),
    (b'{"id": 3, "op": "echo"}\n', "wrong_version"),
    (b'{"v": 1, "id": 3, "op": "exec", "params": {"code": "import os"}}\n', "unknown_op"),
    (b'{"v": 1, "id": 3, "op": "__init__"}\n', "unknown_op"),
])
def test_bad_message_gets_an_error_reply_and_hang_up(server, line, code):
    sock = connect(server.path)
    sock.sendall(line)
    reply = read_reply(sock)
    assert reply["v"] == 1 and reply["ok"] is False and reply["code"] == code
    assert reply["error"]
    assert hung_up(sock)
    sock.close()
    still_answers(server)


def test_wrong_version_reply_echoes_the_id_and_names_our_version(server):
    sock = connect(server.path)
    sock.sendall(b'{"v": 7, "id": 42, "op": "report"}\n')
    reply = read_reply(sock)
    assert reply["id"] == 42
    assert "version 7 is not supported" in reply["error"] and "version 1" in reply["error"]
    sock.close()


def test_oversized_line_without_newline_is_refused(server):
    sock = connect(server.path)
    send_quietly(sock, b"x" * (protocol.MAX_REQUEST + 100))
    reply = read_reply(sock)
    assert reply["code"] == "too_large"
    assert hung_up(sock)
    sock.close()
    still_answers(server)


def test_oversized_line_with_newline_is_refused(server):
    sock = connect(server.path)
    payload = b'{"v":1,"id":1,"op":"echo","params":{"x":"' + b"a" * protocol.MAX_REQUEST + b'"}}\n'
    send_quietly(sock, payload)
    assert read_reply(sock)["code"] == "too_large"
    sock.close()
    still_answers(server)


def test_request_just_under_the_limit_is_answered(server):
    sock = connect(server.path)
    head = b'{"v":1,"id":1,"op":"echo","params":{"x":"'
    tail = b'"}}'
    filler = b"a" * (protocol.MAX_REQUEST - len(head) - len(tail))
    sock.sendall(head + filler + tail + b"\n")
    reply = read_reply(sock)
    assert reply["ok"] is True and len(reply["result"]["params"]["x"]) == len(filler)
    sock.close()


def test_client_vanishing_mid_message(server):
    for _ in range(5):
        sock = connect(server.path)
        sock.sendall(b'{"v": 1, "id": 1, "op": "ec')
        sock.close()
    still_answers(server)


def test_client_vanishing_before_reading_its_replies(server):
    for _ in range(5):
        sock = connect(server.path)
        sock.sendall(b"".join(protocol.request_line(i, "big") for i in range(20)))
        sock.close()
    still_answers(server)


def answered_once_stalled(srv: ProbeServer) -> int:
    """Requests answered once the count stopped growing for half a second (the server waits for a
    client to read), however long a busy machine took to get there."""
    answered, since = srv.requests_answered, time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < 0.5:
        assert time.monotonic() < deadline, f"still answering after 30 s ({srv.requests_answered})"
        time.sleep(0.05)
        if srv.requests_answered != answered:
            answered, since = srv.requests_answered, time.monotonic()
    return answered


def test_client_that_sends_but_does_not_read_cannot_pile_up_replies(server):
    sock = connect(server.path)
    sock.sendall(b"".join(protocol.request_line(i, "big") for i in range(100)))  # ~20 MB of replies
    # Replies wait in the socket buffer and one bounded outbox; the rest are not even built yet.
    assert 1 <= answered_once_stalled(server) < 30
    still_answers(server)
    stream = sock.makefile("rb")
    ids = [json.loads(stream.readline())["id"] for _ in range(100)]
    assert ids == list(range(100))
    assert server.requests_answered == 100 + 1  # and the one from still_answers
    sock.close()


def test_as_many_clients_as_the_limit_at_once(server):
    socks = [connect(server.path) for _ in range(MAX_CLIENTS)]
    for i, sock in enumerate(socks):
        sock.sendall(protocol.request_line(i, "echo", {"client": i}))
    for i, sock in enumerate(socks):
        reply = read_reply(sock)
        assert (reply["id"], reply["result"]) == (i, {"params": {"client": i}})
        sock.close()
    still_answers(server)


def test_fifty_clients_from_threads(server):
    results: dict[int, object] = {}

    def ask(i):
        results[i] = client.request(os.getpid(), "echo", {"i": i}, timeout=5.0)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == {i: {"params": {"i": i}} for i in range(50)}


def test_clients_beyond_the_limit_are_told_the_probe_is_busy(probe_dir):
    srv = ProbeServer({"echo": lambda params: params}, max_clients=2)
    assert srv.start()
    try:
        kept = [connect(srv.path) for _ in range(2)]
        for sock in kept:  # make sure both are accepted before the third arrives
            sock.sendall(protocol.request_line(1, "echo"))
            read_reply(sock)
        third = connect(srv.path)
        assert read_reply(third)["code"] == "busy"
        kept[0].close()
        deadline = time.monotonic() + 5
        while True:  # the server frees the slot once it has seen the hang-up
            try:
                assert client.request(os.getpid(), "echo", {"ok": 1}) == {"ok": 1}
                break
            except client.ProbeUnavailable as exc:
                assert "too many clients" in str(exc) and time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        srv.stop()


def test_handler_exception_is_contained_and_the_connection_stays(server):
    sock = connect(server.path)
    sock.sendall(protocol.request_line(5, "boom"))
    reply = read_reply(sock)
    assert (reply["id"], reply["ok"], reply["code"]) == (5, False, "handler_failed")
    assert reply["error"] == "boom failed: RuntimeError: the probe tripped"
    sock.sendall(protocol.request_line(6, "echo", {"after": True}))
    assert read_reply(sock)["result"] == {"params": {"after": True}}
    sock.close()
    assert "op 'boom' failed: RuntimeError: the probe tripped" in server.problems
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "boom")
    assert caught.value.reason == client.FAILED
    assert "the probe tripped" in str(caught.value)
    still_answers(server)


def test_result_that_is_not_json_becomes_an_error(server):
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "weird")
    assert caught.value.reason == client.FAILED
    assert "not JSON serializable" in str(caught.value)
    still_answers(server)


def test_nan_travels_as_null(server):
    assert client.request(os.getpid(), "nan") == {"value": None, "fine": 1.5}


def test_slow_handler_times_out_the_client_not_the_server(server):
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "slow", {"seconds": 0.3}, timeout=0.05)
    assert caught.value.reason == client.TIMED_OUT
    still_answers(server)


def test_stop_removes_the_socket_and_start_never_raises(probe_dir):
    srv = ProbeServer({})
    assert srv.start()
    path = srv.path
    assert path.exists()
    srv.stop()
    assert not path.exists() and not srv.serving
    srv.stop()  # twice is harmless
    with pytest.raises(client.ProbeUnavailable) as caught:
        client.request(os.getpid(), "hello")
    assert caught.value.reason == client.NO_PROBE


def test_refuses_to_take_over_a_live_socket(server):
    rival = ProbeServer({}, path=server.path)
    assert rival.start() is False
    assert "another live probe is listening" in rival.error
    rival.stop()
    assert server.path.exists()
    still_answers(server)


def test_replaces_a_stale_socket(probe_dir):
    path = probe_dir / f"{os.getpid()}.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(os.fspath(path))
    dead.close()  # the file stays, nobody listens: what a killed process leaves
    srv = ProbeServer({"echo": lambda params: params})
    assert srv.start(), srv.error
    try:
        assert client.request(os.getpid(), "echo", {"x": 1}) == {"x": 1}
    finally:
        srv.stop()


def test_refuses_a_path_that_is_not_a_socket(probe_dir):
    path = probe_dir / f"{os.getpid()}.sock"
    path.write_text("precious")
    srv = ProbeServer({})
    assert srv.start() is False
    assert "is not a socket" in srv.error
    assert path.read_text() == "precious"


def test_refuses_an_unsafe_directory(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv(paths.DIR_ENV, str(open_dir))
    srv = ProbeServer({})
    assert srv.start() is False
    assert "open to other users" in srv.error
    assert list(open_dir.iterdir()) == []


def test_stop_leaves_a_newer_servers_socket_alone(server):
    path = server.path
    os.unlink(path)  # someone removed ours, and a new server took the name
    newer = ProbeServer({"echo": lambda params: {"newer": True}}, path=path)
    assert newer.start(), newer.error
    try:
        server.stop()
        assert path.exists()
        assert client.request(os.getpid(), "echo") == {"newer": True}
    finally:
        newer.stop()
    assert not path.exists()


def run_script(code: str, probe_dir, timeout: float = 20) -> subprocess.CompletedProcess:
    env = {**os.environ, paths.DIR_ENV: str(probe_dir)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_socket_is_removed_at_interpreter_exit(probe_dir):
    out = run_script("""
        import os
        from gputui.link.server import ProbeServer
        srv = ProbeServer({})
        assert srv.start(), srv.error
        print(srv.path)
        # no stop(): atexit must clean up
    """, probe_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(".sock")
    assert list(probe_dir.iterdir()) == []


def test_forked_child_does_not_serve_or_remove_the_socket(probe_dir):
    out = run_script("""
        import json, os, sys
        from gputui.link import client
        from gputui.link.server import ProbeServer
        srv = ProbeServer({"who": lambda params: {"pid": os.getpid()}})
        assert srv.start(), srv.error
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(r)
            facts = {"serving": srv.serving, "restart": srv.start(), "error": srv.error}
            os.write(w, json.dumps(facts).encode())
            sys.exit(0)  # a normal exit runs atexit handlers: they must leave the socket alone
        os.close(w)
        _, status = os.waitpid(child, 0)
        facts = json.loads(os.read(r, 4096))
        facts["child_status"] = status
        facts["socket_still_there"] = srv.path.exists()
        facts["answer"] = client.request(os.getpid(), "who")
        facts["parent"] = os.getpid()
        print(json.dumps(facts))
    """, probe_dir)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["serving"] is False and facts["restart"] is False
    assert "forked child" in facts["error"]
    assert facts["child_status"] == 0
    assert facts["socket_still_there"] is True
    assert facts["answer"] == {"pid": facts["parent"]}
    assert list(probe_dir.iterdir()) == []  # and the parent removed it at its exit


def test_server_thread_sleeps_when_idle(server):
    """Blocking in select: an idle server uses no measurable CPU."""
    thread = next(t for t in threading.enumerate() if t.name == "gputui-probe-server")
    assert thread.daemon
    before = time.process_time()
    time.sleep(0.3)
    # process_time counts every thread; the test thread only sleeps, so this is the server's share
    # (a busy loop would show about 0.3 s).
    assert time.process_time() - before < 0.05
