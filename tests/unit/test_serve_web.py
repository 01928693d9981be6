"""What the exporter answers (paths, methods, basic auth), its users file, and where it listens (the
address, a port in use, TLS), in process: the WSGI app called directly, the server on loopback."""

from __future__ import annotations

import base64
import gzip
import json
import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from wsgiref.util import setup_testing_defaults

import pytest
from plain_data import workstation
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from serve_helpers import basic, fetch

from gputui.errors import UserError
from gputui.serve import auth
from gputui.serve import server as server_module
from gputui.serve.auth import Check, Hashed, Users, password_line
from gputui.serve.metrics import SampleCollector
from gputui.serve.sampling import Sample
from gputui.serve.sampling import document as document_of
from gputui.serve.server import Address, listen, parse_address, tls_context
from gputui.serve.web import make_app


def app_for(sample: Sample | None, users: Users | None = None):
    registry = CollectorRegistry()
    registry.register(SampleCollector(lambda: sample))
    return make_app(lambda: sample, registry, users)


def ask(app, path: str = "/", method: str = "GET", authorization: str | None = None, extra: dict | None = None):
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": method, **(extra or {})}
    if authorization is not None:
        environ["HTTP_AUTHORIZATION"] = authorization
    setup_testing_defaults(environ)
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=int(status.split()[0]), headers=dict(headers))

    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


@pytest.fixture(scope="module")
def sample():
    return Sample(workstation())


# ------------------------------------------------------------------------------------------ paths

def test_metrics_are_the_exposition_of_the_last_sample(sample):
    status, headers, body = ask(app_for(sample), "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    used = [s for family in text_string_to_metric_families(body.decode()) for s in family.samples
            if s.name == "gputui_device_memory_used_bytes"]
    assert [(s.labels, s.value) for s in used] == [
        ({"index": "0", "uuid": "GPU-aaaa", "name": "NVIDIA GeForce RTX 4090"}, 12 << 30),
        ({"index": "2", "uuid": "GPU-cccc", "name": "NVIDIA A100-SXM4-40GB"}, 5 << 30)]


def test_snapshot_is_the_json_document_of_the_same_sample(sample):
    status, headers, body = ask(app_for(sample), "/snapshot")
    document = json.loads(body)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert (document["schema"], document["version"]) == ("gputui.snapshot", 1)
    assert document["snapshot"]["taken_at"] == sample.snapshot.taken_at
    assert document["breakdowns"][0]["items"][0] == {"key": "parameters", "label": "parameters", "size": 1 << 30}
    assert body == document_of(sample)


def test_the_index_names_the_paths(sample):
    status, _, body = ask(app_for(sample), "/")
    assert status == 200 and b"/metrics" in body and b"/snapshot" in body


@pytest.mark.parametrize("path", ["/metrics/", "/favicon.ico", "/snapshot.json", "/../etc/passwd", "/probe/4242"])
def test_anything_else_is_not_found(sample, path):
    assert ask(app_for(sample), path)[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
def test_only_get_and_head_are_answered(sample, method):
    status, headers, _ = ask(app_for(sample), "/metrics", method)
    assert status == 405 and headers["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("path", ["/", "/metrics", "/snapshot"])
def test_head_has_the_headers_and_no_body(sample, path):
    status, headers, body = ask(app_for(sample), path, "HEAD")
    assert status == 200 and body == b"" and headers["Content-Type"]


def test_before_the_first_sample_snapshot_is_unavailable_and_metrics_are_empty():
    assert ask(app_for(None), "/snapshot")[0] == 503
    assert ask(app_for(None), "/metrics")[:3:2] == (200, b"")


def test_metrics_are_rendered_once_per_sample_and_format(sample):
    """A scrape between samples is a copy of the bytes rendered at the first one: the collectors run
    once per sample and format, however many scrapes come."""
    current = [sample]
    renders = []

    class Counting(SampleCollector):
        def collect(self):
            renders.append(current[0])
            return super().collect()

    registry = CollectorRegistry()
    registry.register(Counting(lambda: current[0]))
    app = make_app(lambda: current[0], registry)
    first = [ask(app, "/metrics")[2] for _ in range(5)]
    assert len(renders) == 1 and first == [first[0]] * 5 and b"gputui_device_memory_used_bytes{" in first[0]
    environ = {"HTTP_ACCEPT": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
               "HTTP_ACCEPT_ENCODING": "gzip"}
    status, headers, zipped = ask(app, "/metrics", extra=environ)
    assert status == 200 and headers["Content-Encoding"] == "gzip" and len(renders) == 2
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=")  # 0.0.1 before 0.16
    assert gzip.decompress(zipped).endswith(b"# EOF\n") and ask(app, "/metrics", extra=environ)[2] == zipped
    assert len(renders) == 2
    current[0] = Sample(workstation())  # the next sample: rendered anew at its first scrape
    assert ask(app, "/metrics")[2] == first[0] and len(renders) == 3


# ------------------------------------------------------------------------------------- basic auth

@pytest.fixture(scope="module")
def users():
    return Users({"alice": Hashed.of("s3cret pass")})


@pytest.mark.parametrize("path", ["/", "/metrics", "/snapshot", "/nothing"])
def test_every_path_asks_for_a_password(sample, users, path):
    status, headers, body = ask(app_for(sample, users), path)
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="gputui"')
    assert b"gputui_" not in body


@pytest.mark.parametrize("authorization", [
    basic("alice", "wrong"), basic("bob", "s3cret pass"), basic("alice", ""), "Basic !!!", "Bearer x",
    "Basic " + base64.b64encode(b"alice").decode(), "",
])
def test_a_wrong_password_or_name_is_refused(sample, users, authorization):
    assert ask(app_for(sample, users), "/metrics", authorization=authorization)[0] == 401


def test_the_right_password_is_let_in_and_paid_for_once(sample, users, monkeypatch):
    app = app_for(sample, users)
    assert ask(app, "/metrics", authorization=basic("alice", "s3cret pass"))[0] == 200
    monkeypatch.setattr(Hashed, "matches", lambda self, password: pytest.fail("scrypt again"))
    assert ask(app, "/metrics", authorization=basic("alice", "s3cret pass"))[0] == 200


def test_auth_comes_before_the_method_check(sample, users):
    assert ask(app_for(sample, users), "/metrics", "POST")[0] == 401


def test_a_hash_round_trips_and_is_salted():
    line = password_line("alice", "correct horse")
    name, hashed = line.split(":", 1)
    assert name == "alice" and hashed.startswith("scrypt$16384$8$1$")
    assert Hashed.parse(hashed).matches("correct horse") and not Hashed.parse(hashed).matches("correct horse ")
    assert password_line("alice", "correct horse") != line


def test_the_users_file(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"# who may scrape\n\n{password_line('alice', 'pw1')}\n{password_line('bob', 'pw2')}\n")
    users = Users.load(path)
    assert users.check(basic("bob", "pw2")) is Check.ALLOWED and users.check(basic("bob", "pw1")) is Check.REFUSED


@pytest.mark.parametrize("text, why", [
    ("alice:hunter2\n", "line 1: not a scrypt hash"),
    ("# nobody\n", "names no user"),
    ("alice\n", "line 1: it is not NAME:HASH"),
    ("alice:scrypt$16384$8$1$AAAA$!!!!\n", "line 1: its parameters or base64 parts are damaged"),
    ("alice:scrypt$1048576$8$1$AAAA$AAAA\n", "line 1: its scrypt parameters are out of range"),
])
def test_a_bad_users_file_is_one_line_that_does_not_quote_it(tmp_path, text, why):
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(UserError, match=why) as caught:
        Users.load(path)
    assert "hunter2" not in str(caught.value) and "\n" not in str(caught.value)


def test_an_unreadable_users_file(tmp_path):
    with pytest.raises(UserError, match="cannot read the basic auth file .*: No such file or directory"):
        Users.load(tmp_path / "missing")


def hash_text(cost: int, block_size: int, parallel: int) -> str:
    salt, key = (base64.b64encode(bytes(size)).decode() for size in (16, 32))
    return f"scrypt${cost}${block_size}${parallel}${salt}${key}"


@pytest.mark.parametrize("cost, block_size, parallel, why", [
    (16384, 8, 1048576, r"out of range \(N=16384, r=8, p=1048576: .*p at most 16"),  # minutes a check
    (16384, 8, 17, "out of range"),
    (1 << 17, 8, 16, "out of range"),  # 16 times the default's memory and 128 times its time
    (2, 8, 1, r"too weak \(N=2, r=8, p=1: N\*r\*p under 131072\); make the line again"),
    (16384, 1, 1, "too weak"),
])
def test_scrypt_parameters_are_bounded_both_ways(tmp_path, cost, block_size, parallel, why):
    path = tmp_path / "users"
    path.write_text(f"alice:{hash_text(cost, block_size, parallel)}\n")
    with pytest.raises(UserError, match=f"line 1: its scrypt parameters are {why}"):
        Users.load(path)


def test_the_costliest_parameters_allowed_still_check_a_password():
    hashed = Hashed.parse(hash_text(16384, 8, 16))
    assert not hashed.matches("guess")  # 16 times the default's time, no MemoryError or ValueError


@pytest.mark.parametrize("mode, owner, why", [
    (0o666, 0, r"may be written by other users \(mode 666\); run: chmod go-w "),
    (0o620, 0, r"may be written by other users \(mode 620\)"),
    (0o600, 12345, "belongs to uid 12345, not to you; use a file you own"),
])
def test_a_users_file_others_may_change_is_refused(tmp_path, mode, owner, why):
    path = tmp_path / "users"
    path.write_text(password_line("alice", "pw") + "\n")
    os.chmod(path, mode)
    if owner != os.geteuid():
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user takes root")
        os.chown(path, owner, -1)
    with pytest.raises(UserError, match=f"^the basic auth file {path} {why}"):
        Users.load(path)


def finishes(call, seconds: float):
    """``call()``'s result, asserting that it came within ``seconds`` (it runs in a thread that may hang)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"still waiting after {seconds} s"
    return result[0]


def test_a_fifo_or_a_device_as_the_users_file_is_one_line(tmp_path):
    fifo = tmp_path / "users"
    os.mkfifo(fifo)

    def refused(path):
        try:
            Users.load(path)
        except UserError as exc:
            return str(exc)
        return "loaded"

    assert finishes(lambda: refused(fifo), 5) == f"the basic auth file {fifo} is not a regular file"
    assert finishes(lambda: refused("/dev/zero"), 5) == "the basic auth file /dev/zero is not a regular file"


def test_a_known_password_never_waits_for_the_checks_of_guesses(sample, monkeypatch):
    """A header that passed is answered at once while guesses hold every scrypt turn; guesses beyond
    the turns wait at most CHECK_WAIT and are answered 503, so scrypt's memory and CPU stay bounded."""
    users = Users({"alice": Hashed.of("s3cret pass")})
    app = app_for(sample, users)
    right = basic("alice", "s3cret pass")
    assert ask(app, "/metrics", authorization=right)[0] == 200  # remembered from here on
    release, checking = threading.Event(), []

    def slow_scrypt(self, password):
        checking.append(password)
        release.wait(10)
        return False

    monkeypatch.setattr(Hashed, "matches", slow_scrypt)
    monkeypatch.setattr(auth, "CHECK_WAIT", 0.2, raising=False)
    answers: list = []
    guessers = [threading.Thread(target=lambda n=n: answers.append(ask(app, "/metrics", authorization=basic(
        "alice", f"guess {n}"))[:2]), daemon=True) for n in range(8)]
    try:
        for guesser in guessers:
            guesser.start()
        time.sleep(0.6)
        assert finishes(lambda: ask(app, "/metrics", authorization=right)[0], 1.0) == 200
        assert len(checking) == auth.CHECKS_AT_ONCE == 2
        assert [status for status, _ in answers] == [503] * 6
        assert answers[0][1]["Retry-After"] == "1"
    finally:
        release.set()
        for guesser in guessers:
            guesser.join(5)
    assert sorted(status for status, _ in answers) == [401, 401] + [503] * 6


def test_scrypt_runs_on_its_own_few_threads(monkeypatch):
    """Not on each request's thread: glibc would keep 16 MiB in every such thread's arena (278 MB)."""
    users = Users({"alice": Hashed.of("s3cret pass")})
    ran_on = set()
    monkeypatch.setattr(Hashed, "matches", lambda self, password: ran_on.add(threading.current_thread().name))
    askers = [threading.Thread(target=users.check, args=(basic("alice", f"guess {n}"),)) for n in range(12)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(10)
    assert 1 <= len(ran_on) <= auth.CHECKS_AT_ONCE and all(name.startswith("gputui-scrypt") for name in ran_on)


@pytest.mark.parametrize("name", ["", "a:b", " alice", "al\nice"])
def test_a_user_name_must_fit_the_file(name):
    with pytest.raises(UserError):
        password_line(name, "pw")


# ------------------------------------------------------------------------------------ the address

@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9403", Address("127.0.0.1", 9403)),
    ("0.0.0.0:80", Address("0.0.0.0", 80)),
    (":9403", Address("0.0.0.0", 9403)),
    ("9500", Address("127.0.0.1", 9500)),
    ("[::1]:9403", Address("::1", 9403)),
    ("localhost:0", Address("localhost", 0)),
])
def test_listen_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["nope", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1", "[::1:9403", "a b:1"])
def test_a_bad_listen_address_is_one_line(text):
    with pytest.raises(UserError, match="give ADDRESS:PORT"):
        parse_address(text)


def test_a_port_in_use_is_one_line():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            listen(Address("127.0.0.1", port))
    finally:
        taken.close()


def test_a_name_that_does_not_resolve_is_one_line():
    with pytest.raises(UserError, match="cannot listen on no-such-host.invalid:9403"):
        listen(Address("no-such-host.invalid", 9403))


# ------------------------------------------------------------------------------ slow and many clients

@pytest.fixture
def counted(sample):
    """A served app on loopback that notes each request it runs; yields (server, the paths run)."""
    run: list[str] = []
    app = app_for(sample)

    def counting(environ, start_response):
        run.append(environ["PATH_INFO"])
        return app(environ, start_response)

    server = listen(Address("127.0.0.1", 0))
    server.set_app(counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, run
    server.shutdown()
    server.server_close()


def until_closed(connection: socket.socket, seconds: float, trickle: bytes = b"") -> tuple[float, bytes] | None:
    """(seconds until the server ended ``connection``, what it sent), sending ``trickle`` every 0.2 s
    meanwhile; None if it kept the connection open ``seconds``."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if select.select([connection], [], [], 0.2)[0]:
            try:
                return time.monotonic() - started, connection.recv(1 << 16)
            except OSError:
                return time.monotonic() - started, b""
        try:
            connection.sendall(trickle)
        except OSError:
            return time.monotonic() - started, b""
    return None


def test_a_request_must_come_whole_in_time_and_a_partial_one_never_runs(counted, monkeypatch):
    server, run = counted
    monkeypatch.setattr(server_module, "REQUEST_TIMEOUT", 1.0, raising=False)
    trickler = socket.create_connection(server.server_address[:2])
    half = None
    try:
        trickler.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
        ended = until_closed(trickler, 4.0, trickle=b"X")  # a header a byte every 0.2 s, never ended
        assert ended is not None and ended[0] < 2.0 and ended[1] == b""
        half = socket.create_connection(server.server_address[:2])
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")  # no blank line, then the client closes
        half.shutdown(socket.SHUT_WR)
        assert until_closed(half, 3.0) == (pytest.approx(0, abs=1.0), b"")
        assert run == []  # neither ran as a scrape
        assert fetch(server.url + "/metrics")[0] == 200 and run == ["/metrics"]
    finally:
        trickler.close()
        if half is not None:
            half.close()


def test_a_connection_that_sends_nothing_is_dropped_after_a_second(counted):
    server, run = counted
    silent = socket.create_connection(server.server_address[:2])
    try:
        ended = until_closed(silent, 4.0)
        assert ended is not None and ended[0] == pytest.approx(server_module.FIRST_BYTE_TIMEOUT, abs=0.5)
        assert ended[1] == b"" and run == []
    finally:
        silent.close()


def soon(condition, seconds: float = 5.0) -> bool:
    """Whether ``condition()`` comes true within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


@pytest.fixture
def holding(sample, monkeypatch):
    """A served app on loopback, three places and one kept; /hold is answered once ``release`` is set.
    Yields (server, release, the number of /hold requests being held)."""
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 3, raising=False)
    monkeypatch.setattr(server_module, "KEPT_PLACES", 1, raising=False)
    app, release, held = app_for(sample), threading.Event(), []

    def hold(environ, start_response):
        if environ["PATH_INFO"] == "/hold":
            held.append(environ["PATH_INFO"])
            release.wait(10)
        return app(environ, start_response)

    server = listen(Address("127.0.0.1", 0))
    server.set_app(hold)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, release, held
    release.set()
    server.shutdown()
    server.server_close()


def test_a_newcomer_takes_the_place_of_the_oldest_connection_still_waiting(holding, monkeypatch):
    """Every place taken by clients that have not sent their request: a scrape still gets in, in the
    place of the oldest of them, whatever it has sent; one answering keeps its place."""
    server, release, held = holding
    monkeypatch.setattr(server_module, "FIRST_BYTE_TIMEOUT", 30.0, raising=False)
    holder = threading.Thread(target=fetch, args=(server.url + "/hold",), daemon=True)
    holder.start()
    assert soon(lambda: held)
    trickler = socket.create_connection(server.server_address[:2])
    trickler.sendall(b"GET /metrics HTTP/1.1\r\n")  # half a request, the oldest waiting
    silent = socket.create_connection(server.server_address[:2])
    newer = None
    try:
        time.sleep(1.0)  # all three places taken, the half request read by its thread
        assert fetch(server.url + "/metrics")[0] == 200
        assert until_closed(trickler, 1.0) == (pytest.approx(0, abs=0.5), b"")
        newer = socket.create_connection(server.server_address[:2])  # the scrape's place, taken again
        time.sleep(1.0)
        assert fetch(server.url + "/metrics")[0] == 200
        assert until_closed(silent, 1.0) == (pytest.approx(0, abs=0.5), b"")
        assert until_closed(newer, 0.5) is None
        release.set()
        holder.join(5)
        assert not holder.is_alive()
    finally:
        for connection in (trickler, silent, newer):
            if connection is not None:
                connection.close()


def test_only_an_idle_connection_is_pushed_out():
    """Idle: its thread waiting on the client, and nothing come. A connection whose request is in its
    socket (its thread not yet at it: a burst of scrapes on a busy machine), or whose thread is reading
    what came, keeps its place."""
    places = server_module.Places(1, 0)
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        (came, came_client), (read, _), (idle, _), (newcomer, _) = pairs
        came_client.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert places.take(came) is server_module.Place.ORDINARY
        with places.awaiting(came):
            assert places.take(newcomer) is None  # every place has a request to read: 503
        places.give_back(came)
        assert places.take(read) is server_module.Place.ORDINARY
        assert places.take(newcomer) is None  # its thread has read what came and is at it
        with places.awaiting(read):
            assert places.take(newcomer) is server_module.Place.ORDINARY  # waiting, nothing come: idle
        assert read.recv(1) == b""  # ended: its thread sees the end
        assert places.answering(read) is None  # and does not answer it
        places.give_back(newcomer)
        assert places.take(idle) is server_module.Place.ORDINARY
        assert places.answering(idle) is server_module.Place.ORDINARY
        with places.awaiting(idle):
            assert places.take(newcomer) is None  # answering: not waiting any more
    finally:
        for pair in pairs:
            for end in pair:
                end.close()


def test_when_every_place_is_answering_one_kept_place_then_503_at_once(holding):
    server, release, held = holding
    holders = [threading.Thread(target=fetch, args=(server.url + "/hold",), daemon=True) for _ in range(4)]
    for number, holder in enumerate(holders, 1):
        holder.start()
        assert soon(lambda: len(held) == number)  # noqa: B023 - called at once; three places, then the kept one
    started = time.monotonic()
    status, headers, body = fetch(server.url + "/metrics")
    assert (status, headers["Retry-After"], body) == (503, "1", b"gputui: too many connections; try again\n")
    assert time.monotonic() - started < 1.0
    release.set()
    for holder in holders:
        holder.join(5)
    assert fetch(server.url + "/metrics")[0] == 200


def test_a_kept_place_lets_in_a_known_password_at_once_and_never_waits_for_a_check(sample, holding, monkeypatch):
    """Every place held by password guesses waiting for scrypt's turns: Prometheus, whose password passed
    before, gets in through the kept place; a guess there is not checked (no turn is free) but 503."""
    server, release, _ = holding
    monkeypatch.setattr(auth, "CHECK_WAIT", 10.0, raising=False)
    users = Users({"alice": Hashed.of("s3cret pass")})
    right = ("alice", "s3cret pass")
    server.set_app(app_for(sample, users))
    assert fetch(server.url + "/metrics", auth=right)[0] == 200  # remembered from here on
    checking = []

    def slow_scrypt(self, password):
        checking.append(password)
        release.wait(10)
        return False

    monkeypatch.setattr(Hashed, "matches", slow_scrypt)
    guessers = [threading.Thread(target=fetch, args=(server.url + "/metrics",),
                                 kwargs={"auth": ("alice", f"guess {n}")}, daemon=True) for n in range(3)]
    for guesser in guessers:
        guesser.start()
    assert soon(lambda: len(checking) == auth.CHECKS_AT_ONCE)
    time.sleep(1.0)  # the third waits for a turn: all three places are answering
    # at once, not after CHECK_WAIT (10 s here); 5 s for a loaded machine
    assert finishes(lambda: fetch(server.url + "/metrics", auth=right)[0], 5.0) == 200
    status, _, body = finishes(lambda: fetch(server.url + "/metrics", auth=("alice", "guess 4")), 5.0)
    assert (status, body) == (503, b"gputui: too many passwords being checked; try again\n")
    assert len(checking) == auth.CHECKS_AT_ONCE
    release.set()
    for guesser in guessers:
        guesser.join(5)


def test_ipv4_loopback_written_as_ipv6_is_this_machine_only():
    server = listen(parse_address("[::ffff:127.0.0.1]:0"))
    try:
        assert server.address.host == "::ffff:127.0.0.1" and server.loopback
    finally:
        server.server_close()
    for host, loopback in (("::1", True), ("127.0.0.1", True), ("0.0.0.0", False)):
        server = listen(Address(host, 0))
        try:
            assert server.loopback is loopback
        finally:
            server.server_close()


# ------------------------------------------------------------------------------------------- TLS

@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed here (it makes the test's certificate)")
    where = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    return where / "cert.pem", where / "key.pem"


def test_tls_serves_https_and_a_silent_client_holds_up_no_one(sample, certificate, monkeypatch):
    """Not its thread (the handshake is in its own), nor its place: with one place only, a client that
    says nothing gives it up to the next, and is dropped."""
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 1, raising=False)
    monkeypatch.setattr(server_module, "KEPT_PLACES", 0, raising=False)
    cert, key = certificate
    server = listen(Address("127.0.0.1", 0), tls_context(str(cert), str(key)))
    server.set_app(app_for(sample))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = socket.create_connection(server.server_address[:2])  # connects, never says hello
    try:
        time.sleep(0.2)  # the only place is the silent client's
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False
        started = time.monotonic()
        status, _, body = fetch(server.url + "/snapshot", context=client)
        assert status == 200 and json.loads(body)["schema"] == "gputui.snapshot"
        assert time.monotonic() - started < 1
        assert until_closed(silent, 0.5) == (pytest.approx(0, abs=0.5), b"")
        assert server.url.startswith("https://127.0.0.1:")
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets no answer (URLError, a reset)
            fetch(server.url.replace("https", "http") + "/")
    finally:
        silent.close()
        server.shutdown()
        server.server_close()


def test_a_tls_client_that_leaves_mid_answer_is_no_traceback(certificate, capfd):
    """ssl says a client gone mid-answer (a scrape timed out, a kubelet probe that reads 10 kB of
    /metrics) with SSLEOFError, which the stdlib's WSGI handler does not take for a client gone: it
    printed a traceback for each."""
    release, written = threading.Event(), threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"first\n"
        release.wait(10)
        try:
            yield b"x" * (8 << 20)  # the rest, after the client has gone
        finally:
            written.set()

    cert, key = certificate
    server = listen(Address("127.0.0.1", 0), tls_context(str(cert), str(key)))
    server.set_app(app)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False
        with client.wrap_socket(socket.create_connection(server.server_address[:2])) as connection:
            connection.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            received = b""
            while b"first\n" not in received:
                received += connection.recv(1 << 16)
        release.set()
        assert written.wait(10)
        time.sleep(0.5)  # the handler's error handling, if any, done
        assert capfd.readouterr().err == ""
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_fifo_as_a_tls_file_is_one_line(tmp_path, certificate):
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)

    def refused(*files):
        try:
            tls_context(*files)
        except UserError as exc:
            return str(exc)
        return "loaded"

    assert finishes(lambda: refused(str(fifo)), 5) == f"the TLS file {fifo} is not a regular file"
    assert finishes(lambda: refused(str(certificate[0]), str(fifo)), 5) == f"the TLS file {fifo} is not a regular file"


@pytest.mark.parametrize("files, why", [
    (("missing.pem", None), "cannot read the TLS file .*missing.pem: No such file or directory"),
    (("junk.pem", None), "not a PEM certificate with its private key"),
    (("cert.pem", None), "not a PEM certificate with its private key"),  # the key is elsewhere
])
def test_a_certificate_that_cannot_be_loaded_is_one_line(tmp_path, certificate, files, why):
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    shutil.copy(certificate[0], tmp_path / "cert.pem")
    with pytest.raises(UserError, match=why):
        tls_context(*(str(tmp_path / f) if f else None for f in files))
