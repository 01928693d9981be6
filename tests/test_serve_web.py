"""What the exporter answers (paths, methods, basic auth), its users file, and where it listens (the
address, a port in use, TLS), in process: the WSGI app called directly, the server on loopback."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gputui.errors import UserError
from gputui.serve.auth import Hashed, Users, password_line
from gputui.serve.metrics import SampleCollector
from gputui.serve.sampling import Sample
from gputui.serve.server import Address, listen, parse_address, tls_context
from gputui.serve.web import make_app

from plain_data import workstation
from serve_helpers import fetch


def app_for(sample: Sample | None, users: Users | None = None):
    registry = CollectorRegistry()
    registry.register(SampleCollector(lambda: sample))
    return make_app(lambda: sample, registry, users)


def ask(app, path: str = "/", method: str = "GET", authorization: str | None = None):
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": method}
    if authorization is not None:
        environ["HTTP_AUTHORIZATION"] = authorization
    setup_testing_defaults(environ)
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=int(status.split()[0]), headers=dict(headers))

    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


def basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


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
    assert body == sample.document  # made once per sample


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
    assert users.allow(basic("bob", "pw2")) and not users.allow(basic("bob", "pw1"))


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


def test_tls_serves_https_and_a_silent_client_holds_up_no_one(sample, certificate):
    cert, key = certificate
    server = listen(Address("127.0.0.1", 0), tls_context(str(cert), str(key)))
    server.set_app(app_for(sample))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = socket.create_connection(server.server_address[:2])  # connects, never says hello
    try:
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False
        started = time.monotonic()
        status, _, body = fetch(server.url + "/snapshot", context=client)
        assert status == 200 and json.loads(body)["schema"] == "gputui.snapshot"
        assert time.monotonic() - started < 5
        assert server.url.startswith("https://127.0.0.1:")
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets no answer (URLError, a reset)
            fetch(server.url.replace("https", "http") + "/")
    finally:
        silent.close()
        server.shutdown()
        server.server_close()


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
