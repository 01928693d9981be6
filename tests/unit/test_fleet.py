"""The many-host view's data layer without ssh: host entries and the [hosts] config, the per-host
state (backoff, stale, refusals), the ssh child's reading (with a stand-in command), the URL
transport against a local HTTP server serving real ``gputui --demo ... --json`` documents, and the
``gputui.hosts`` document."""

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_helpers import gputui, no_traceback
from plain_data import SCHEMA, errors, judged, judged_document, workstation

from gputui.config import ConfigError, parse_config
from gputui.errors import UserError
from gputui.fleet.entries import HostEntry, HostsSettings, host_entries, name_problem
from gputui.fleet.fleet import Fleet
from gputui.fleet.link import Link
from gputui.fleet.status import HostStatus, retry_delay, state_words
from gputui.fleet.transport import BURST, MAX_LINE, NO_GPUTUI, Ended, NewestLine, Pace, SshStream, why_ended
from gputui.model import HostView
from gputui.plain.document import dumps, hosts_document, read_snapshot_document


def line_of(document) -> bytes:
    return (dumps(document) + "\n").encode()


# ------------------------------------------------------------------------------------- entries

def test_host_names_and_urls_are_checked():
    assert name_problem("node1") is None and name_problem("lena@10.0.0.7") is None
    assert name_problem("http://node3:9403") is None
    assert "start with '-'" in name_problem("-oProxyCommand=touch x")
    assert "not a host name" in name_problem("node1;rm")
    assert "only http://" in name_problem("ftp://node")
    assert "port" in name_problem("http://node:port")
    with pytest.raises(UserError, match="named twice"):
        host_entries(("a", "a"), HostsSettings())
    with pytest.raises(UserError, match="name the hosts"):
        host_entries((), HostsSettings())


def test_entries_take_their_command_and_ssh_from_the_config():
    settings = HostsSettings(names=("a", "b"), command="~/venv/bin/gputui", commands={"b": "gputui2"},
                             ssh="ssh -F /etc/cluster")
    a, b = host_entries((), settings, environ={})
    assert (a.name, a.command, a.ssh) == ("a", "~/venv/bin/gputui", ("ssh", "-F", "/etc/cluster"))
    assert b.command == "gputui2"
    (c,) = host_entries(("c",), HostsSettings(), environ={"GPUTUI_SSH": "/bin/fake-ssh -q"})
    assert c.ssh == ("/bin/fake-ssh", "-q") and c.command == "gputui"


def test_url_entries_carry_basic_auth_and_never_show_the_password():
    (entry,) = host_entries(("https://lena:s3cret@node3:9403/",), HostsSettings(), environ={})
    assert entry.url == "https://node3:9403" and entry.auth == ("lena", "s3cret")
    assert entry.name == "https://lena:***@node3:9403/"
    (other,) = host_entries(("http://node4:9403",), HostsSettings(auth={"http://node4:9403": "u:p:q"}),
                            environ={})
    assert other.auth == ("u", "p:q") and other.is_url


@pytest.mark.parametrize("table, words", [
    ({"names": "node1"}, "hosts.names"),
    ({"names": ["-x"]}, "start with '-'"),
    ({"command": ""}, "hosts.command"),
    ({"commands": {"a": 3}}, "hosts.commands"),
    ({"auth": {"http://a": "nopassword"}}, "user:password"),
    ({"wait": -1}, "hosts.wait"),
    ({"colour": 1}, "hosts.colour"),
])
def test_bad_hosts_tables_are_refused_with_the_key(table, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        parse_config({"hosts": table}, Path("config.toml"))


def test_bad_host_on_the_command_line_exits_2(tmp_path):
    result = gputui(os.environ, "--hosts", "good,-oProxyCommand=x", "--json", "--config", "/dev/null")
    no_traceback(result)
    assert result.returncode == 2 and "cannot start with '-'" in result.stderr
    assert result.stderr.count("\n") == 1  # one line
    result = gputui(os.environ, "--hosts", "a", "--demo", "--json")
    assert result.returncode == 2 and "run it there" in result.stderr


# ---------------------------------------------------------------------------------- host state

def test_backoff_doubles_from_2_to_60_seconds():
    assert [retry_delay(n) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]
    status = HostStatus("a", 1.0)
    assert [status.failed("refused") for _ in range(3)] == [2, 4, 8]
    status.received(workstation(), at=100.0)
    assert status.failed("gone") == 2  # a snapshot in between starts the backoff again


def test_a_live_host_silent_for_three_intervals_is_stale():
    status = HostStatus("a", 2.0)
    assert status.view(0.0).state == "connecting"
    status.received(workstation(), at=100.0)
    assert status.view(106.0).state == "live"
    stale = status.view(106.5)
    assert (stale.state, stale.reason, stale.age) == ("stale", "no snapshot for 6 s", 6.5)
    status.failed("Connection reset")
    down = status.view(107.0)
    assert (down.state, down.reason) == ("unreachable", "Connection reset")
    assert down.snapshot is not None  # the last picture stays
    status.connecting()
    assert status.view(108.0).state == "unreachable"  # said until it answers again
    assert state_words(status.view(108.0)) == "unreachable: Connection reset"


def test_a_host_that_never_answered_keeps_its_reason_while_tried_again():
    # CI read a --json view during nogputui's retry and got "connecting" for a host already known down.
    status = HostStatus("a", 2.0)
    status.connecting()
    assert status.view(0.0).state == "connecting"
    status.failed("no gputui on PATH: set its command in [hosts]")
    status.connecting()
    retrying = status.view(3.0)
    assert (retrying.state, retrying.reason) == ("unreachable", "no gputui on PATH: set its command in [hosts]")
    status.received(workstation(), at=5.0)
    assert status.view(5.0).state == "live"


def test_documents_of_another_kind_or_a_newer_version_are_refused():
    document = judged_document(workstation())
    assert read_snapshot_document(json.loads(dumps(document))) == workstation()
    with pytest.raises(ValueError, match="not a gputui snapshot"):
        read_snapshot_document({**document, "schema": "gputui.probes"})
    with pytest.raises(ValueError, match="snapshot version 2; this one reads up to 1"):
        read_snapshot_document({**document, "version": 2})
    with pytest.raises(ValueError, match="missing field 'taken_at'"):
        read_snapshot_document({**document, "snapshot": {}})


# ------------------------------------------------------------------------ links, with fakes

class FakeStream:
    """Lines handed over one at a time; ``then`` raised at the end (None: block until closed)."""

    def __init__(self, lines, then=None):
        self._lines, self._then = list(lines), then
        self.closed = threading.Event()

    def lines(self):
        yield from self._lines
        if self._then is None:
            self.closed.wait()
            raise Ended("closed")
        raise self._then

    def close(self):
        self.closed.set()


def wait_until(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_link_keeps_the_latest_snapshot_and_skips_a_shells_greeting():
    first, second = workstation(), workstation()
    second = type(second)(**{**second.__dict__, "taken_at": second.taken_at + 1})
    stream = FakeStream([b"Welcome to node1\n", line_of(judged_document(first)),
                         line_of(judged_document(second))])
    link = Link(HostEntry("a"), 1.0, open_stream=lambda entry, interval: stream)
    link.start()
    wait_until(lambda: link.view().snapshot == second)
    assert link.view().state == "live" and link.answered.is_set()
    link.close()
    assert stream.closed.is_set()


def first_view_of(stream):
    link = Link(HostEntry("a"), 1.0, open_stream=lambda entry, interval: stream)
    link.start()
    wait_until(lambda: link.view().snapshot is not None)
    view = link.view()
    link.close()
    return view


def test_a_hosts_judgements_come_with_its_snapshot_and_an_older_gputuis_are_judged_here():
    leaky = workstation()  # its probed job 4242 is judged: a leak verdict of its steps
    sent = judged_document(leaky)
    older = {k: v for k, v in sent.items() if k != "judgements"}  # a gputui from before the field
    for document in (sent, older):
        view = first_view_of(FakeStream([line_of(document)]))
        assert view.judgements == judged(leaky)
        assert view.judgements.of(4242).leak is not None


def test_a_refused_document_ends_the_connection_with_the_reason():
    bad = line_of({**judged_document(workstation()), "version": 9})
    link = Link(HostEntry("a"), 1.0, open_stream=lambda entry, interval: FakeStream([bad]))
    link.start()
    wait_until(lambda: link.view().state == "unreachable")
    assert "refused its answer" in link.view().reason and "version 9" in link.view().reason
    link.close()


NESTED = b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n"  # json.loads: RecursionError


@pytest.mark.parametrize("transport", ["ssh", "url"])
def test_deeply_nested_json_is_refused_and_the_hosts_thread_goes_on(transport):
    opened = []

    def open_stream(entry, interval):
        opened.append(FakeStream([NESTED], then=Ended("closed")))
        return opened[-1]

    def fetch(entry, timeout):
        opened.append(NESTED)
        return NESTED

    entry = HostEntry("a", url="http://a:1" if transport == "url" else None)
    link = Link(entry, 1.0, open_stream=open_stream, fetch=fetch)
    link.start()
    wait_until(lambda: link.view().state == "unreachable")
    assert link.view().reason == "refused its answer: JSON nested too deeply"
    assert link.answered.is_set() and opened
    assert link._thread.is_alive()  # waiting to try again, not dead
    link.close()


def test_a_dead_host_does_not_stall_the_others():
    streams = {"slow": FakeStream([]), "fast": FakeStream([line_of(judged_document(workstation()))])}
    fleet = Fleet([HostEntry("slow"), HostEntry("fast")], 1.0,
                  link=lambda e, i: Link(e, i, open_stream=lambda entry, interval: streams[entry.name]))
    with fleet:
        started = time.monotonic()
        fleet.wait_first(0.5)
        assert time.monotonic() - started < 2
        slow, fast = fleet.view()
        assert (slow.name, slow.state, fast.name, fast.state) == ("slow", "connecting", "fast", "live")
    assert streams["slow"].closed.is_set()


# -------------------------------------------------------------- the ssh child, with a stand-in

STAND_IN = "import sys; sys.stdout.buffer.write({out}); sys.exit({status})"


def stand_in(out: str, status: int = 0) -> HostEntry:
    """An entry whose "ssh" is Python printing ``out``: ssh's options and the host become argv."""
    return HostEntry("node1", ssh=(sys.executable, "-c", STAND_IN.format(out=out, status=status)))


def test_the_ssh_childs_lines_and_why_it_ended():
    doc = dumps(judged_document(workstation()))
    stream = SshStream(stand_in(repr(doc.encode() + b"\n")), 1.0)
    lines = stream.lines()
    assert read_snapshot_document(json.loads(next(lines))) == workstation()
    with pytest.raises(Ended, match="ssh ended with status 255"):
        stream = SshStream(stand_in("b''", status=255), 1.0)
        list(stream.lines())
    with pytest.raises(Ended, match="the remote gputui stopped"):
        list(SshStream(stand_in("b''"), 1.0).lines())


def test_a_line_longer_than_the_bound_ends_the_connection():
    stream = SshStream(stand_in(f"b'x' * {MAX_LINE + 10}"), 1.0)
    with pytest.raises(Ended, match="longer than 16 MiB"):
        list(stream.lines())
    stream.close()


FLOOD = ("import itertools, sys\n"
         "for n in itertools.count(): sys.stdout.buffer.write(b'{\"n\": %d, \"pad\": \"%s\"}\\n' % (n, b'x' * 2000))")


def test_a_flooding_host_has_only_its_newest_line_handed_on_once_an_interval():
    stream = SshStream(HostEntry("n", ssh=(sys.executable, "-c", FLOOD)), 0.25)
    handed, started, cpu = [], time.monotonic(), time.thread_time()
    for line in stream.lines():
        handed.append(json.loads(line)["n"])
        if time.monotonic() - started > 2.0:
            break
    cpu, wall = time.thread_time() - cpu, time.monotonic() - started
    stream.close()
    assert BURST + 2.0 / 0.25 - 2 <= len(handed) <= BURST + 2.0 / 0.25 + 1  # 4 at once, then 4 a second
    assert all(b > a for a, b in zip(handed, handed[1:]))  # newer each time, what came between dropped
    assert handed[-1] - handed[0] > 2 * len(handed)
    assert cpu < 0.2 * wall, (cpu, wall)  # the pipe holds the flood back: no core spent reading it


def test_only_the_newest_complete_line_is_kept_and_lines_are_bounded():
    newest = NewestLine()
    newest.feed(b"Welcome\n{\"a\"")
    assert newest.line == b"Welcome\n"
    newest.feed(b": 1}\n{\"b\": 2}\n{\"c\"")
    assert newest.take() == b'{"b": 2}\n' and newest.line is None
    newest.feed(b": 3}")
    newest.end()  # a last line without its newline
    assert newest.take() == b'{"c": 3}'
    with pytest.raises(Ended, match="longer than 16 MiB"):
        newest.feed(b"x" * (MAX_LINE + 1))


def test_the_pace_lets_a_burst_through_then_one_a_gap():
    now = [0.0]
    pace = Pace(0.5, 4, clock=lambda: now[0])
    assert [pace.delay() for _ in range(5)] == [0.0, 0.0, 0.0, 0.0, 0.5]
    now[0] = 0.25
    assert pace.delay() == 0.25
    now[0] = 0.5
    assert pace.delay() == 0.0 and pace.delay() == 0.5
    now[0] = 100.0  # a quiet while fills the bucket again, to the burst and no further
    assert [pace.delay() for _ in range(5)] == [0.0, 0.0, 0.0, 0.0, 0.5]


def test_why_ssh_ended_in_its_own_words():
    assert why_ended(["ssh: connect to host n port 22: Connection refused"], 255) == \
        "connect to host n port 22: Connection refused"
    assert why_ended(["root@n: Permission denied (publickey)."], 255) == "root@n: Permission denied (publickey)."
    assert why_ended(["bash: line 1: gputui: command not found"], 127) == NO_GPUTUI
    assert why_ended([], 127) == NO_GPUTUI


def test_closing_ends_the_child_and_its_children():
    entry = HostEntry("n", ssh=(sys.executable, "-c", "import subprocess, time; "
                                "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"))
    stream = SshStream(entry, 1.0)
    grandchild = int(next(stream.lines()))
    stream.close()
    assert stream.process.returncode is not None
    wait_until(lambda: not alive(grandchild))  # ssh's own children (ProxyCommand, ...) end too


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a container's init to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# ----------------------------------------------------------------- URLs: a gputui serve stand-in

@pytest.fixture(scope="module")
def serve():
    """An HTTP server answering /snapshot with real `gputui --demo SCENARIO --json` documents
    (/training-node/snapshot ...), behind basic auth lena:pw."""
    documents = {}
    for scenario in ("training-node", "leaky"):
        result = gputui(os.environ, "--demo", scenario, "--json")
        assert result.returncode == 0, result.stderr
        documents[f"/{scenario}/snapshot"] = result.stdout.encode()
    token = "Basic " + base64.b64encode(b"lena:pw").decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.headers.get("Authorization") != token:
                self.send_response(401, "Unauthorized")
                self.end_headers()
                return
            body = documents.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_url_hosts_over_http_with_basic_auth(serve):
    names = (f"http://lena:pw@{serve}/training-node", f"http://{serve}/leaky",
             f"http://lena:wrong@{serve}/leaky", f"http://lena:pw@{serve}/nothing")
    with Fleet(host_entries(names, HostsSettings(auth={names[1]: "lena:pw"}), environ={}), 1.0) as fleet:
        fleet.wait_first(10)
        training, leaky, wrong, nothing = fleet.view()
    assert training.state == "live" and len(training.snapshot.devices) == 8
    assert training.snapshot.source == "sim:training-node"
    assert training.name == f"http://lena:***@{serve}/training-node"
    assert leaky.state == "live" and leaky.snapshot.source == "sim:leaky"
    assert (wrong.state, wrong.reason) == ("unreachable", "HTTP 401 Unauthorized")
    assert (nothing.state, nothing.reason) == ("unreachable", "HTTP 404 Not Found")


def test_an_unreachable_url_says_why():
    with Fleet(host_entries(("http://127.0.0.1:9",), HostsSettings(), environ={}), 1.0) as fleet:
        fleet.wait_first(10)
        (view,) = fleet.view()
    assert view.state == "unreachable" and "refused" in view.reason.lower()


class Origin:
    """A local HTTP(S) server: ``routes`` maps a path to (status, headers, body); every request's
    path and Authorization header is kept in ``asked``."""

    def __init__(self, routes, context=None):
        self.routes, self.asked = routes, []
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                origin.asked.append((self.path, self.headers.get("Authorization")))
                status, headers, body = origin.routes.get(self.path, (404, {}, b""))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def first_view(name):
    with Fleet(host_entries((name,), HostsSettings(), environ={}), 1.0) as fleet:
        fleet.wait_first(10)
        (view,) = fleet.view()
    return view


LENA = "Basic " + base64.b64encode(b"lena:pw").decode()


@pytest.fixture
def elsewhere():
    """Another origin (another port of 127.0.0.1) that would answer with a snapshot."""
    other = Origin({"/snapshot": (200, {}, line_of(judged_document(workstation())))})
    yield other
    other.close()


def test_a_redirect_to_another_origin_is_not_followed_and_gets_no_credentials(elsewhere):
    host = Origin({"/snapshot": (302, {"Location": f"http://127.0.0.1:{elsewhere.port}/snapshot"}, b"")})
    try:
        view = first_view(f"http://lena:pw@127.0.0.1:{host.port}")
    finally:
        host.close()
    assert host.asked == [("/snapshot", LENA)]
    assert (view.state, view.reason) == (
        "unreachable", f"redirected to another origin (http://127.0.0.1:{elsewhere.port}); not followed")
    assert elsewhere.asked == []  # never even asked, so never sent the password


def test_a_redirect_within_the_origin_is_followed_with_the_credentials():
    document = line_of(judged_document(workstation()))
    host = Origin({"/old/snapshot": (308, {"Location": "/new/snapshot"}, b""), "/new/snapshot": (200, {}, document)})
    try:
        view = first_view(f"http://lena:pw@127.0.0.1:{host.port}/old")
    finally:
        host.close()
    assert view.state == "live" and view.snapshot == workstation()
    assert host.asked == [("/old/snapshot", LENA), ("/new/snapshot", LENA)]


def test_an_origin_is_scheme_host_and_port():
    from gputui.fleet.transport import origin

    assert origin("https://Node3/snapshot") == origin("https://node3:443/other") == ("https", "node3", 443)
    assert origin("http://node3:443/snapshot") != origin("https://node3:443/snapshot")  # a downgrade
    assert origin("http://node3:9403") != origin("http://node3:9404")
    assert origin("http://node3:x/") == ("http", "node3", -1)


@pytest.fixture
def trusted_certificate(tmp_path, monkeypatch):
    """A server context for 127.0.0.1 whose certificate this process trusts (SSL_CERT_FILE)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed here (it makes the test's certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_https_is_never_downgraded_to_http(trusted_certificate, elsewhere):
    document = line_of(judged_document(workstation()))
    host = Origin({"/snapshot": (200, {}, document),
                   "/down/snapshot": (301, {"Location": f"http://127.0.0.1:{elsewhere.port}/snapshot"}, b"")},
                  trusted_certificate)
    try:
        assert first_view(f"https://lena:pw@127.0.0.1:{host.port}").state == "live"  # the certificate is trusted
        view = first_view(f"https://lena:pw@127.0.0.1:{host.port}/down")
    finally:
        host.close()
    assert (view.state, view.reason) == (
        "unreachable", f"redirected to another origin (http://127.0.0.1:{elsewhere.port}); not followed")
    assert elsewhere.asked == []


# ------------------------------------------------------------------------- the hosts document

def test_the_hosts_document_follows_the_schema():
    document = json.loads(dumps(hosts_document([
        HostView("a", "live", None, 0.5, workstation(), judged(workstation())),
        HostView("b", "unreachable", "Connection refused"),
    ])))
    assert errors(document, SCHEMA) == []
    assert document["hosts"][0]["document"] == json.loads(dumps(judged_document(workstation())))
    assert document["hosts"][1] == {"name": "b", "state": "unreachable", "reason": "Connection refused",
                                    "age": None, "document": None}


def test_many_hosts_are_asked_for_snapshots_less_often():
    from gputui.fleet.fleet import DOCUMENTS_PER_SECOND, period_for

    assert period_for(4, 1.0) == 1.0 and period_for(4, 5.0) == 5.0
    assert period_for(64, 1.0) == 64 / DOCUMENTS_PER_SECOND == 8.0
    asked = []
    Fleet([HostEntry(f"n{i}") for i in range(64)], 1.0, link=lambda e, period: asked.append(period))
    assert set(asked) == {8.0}


FAKE_SSH = """#!/bin/sh
# ssh's stand-in: skip the options up to --, then the host, and run the command here
while [ "$1" != "--" ]; do shift; done; shift; shift
exec sh -c "$*"
"""


def fake_ssh(tmp_path: Path) -> Path:
    """FAKE_SSH as an executable in ``tmp_path``."""
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    return ssh


def test_bare_hosts_watches_the_config_names_and_prints_into_a_pipe(tmp_path):
    ssh = fake_ssh(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text(f'[hosts]\nnames = ["n1", "n2", "n3"]\ncommand = "{sys.executable} -m gputui --demo leaky"\n'
                      f'ssh = "{ssh}"\nwait = 5\n[hosts.commands]\nn2 = "exit 3"\nn3 = "sleep 60; true"\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = gputui(env, "--hosts", "--config", str(config))  # the live monitor, but stdout is a pipe
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("== n1 · live · 1 GPU")
    assert "simulated: leaky" in result.stdout
    assert "== n2 · unreachable: ssh ended with status 3" in result.stdout
    assert "== n3 · connecting: no answer within 5 s" in result.stdout  # late, and said so


def test_once_reports_a_host_sending_deep_nesting_in_a_line_without_a_traceback(tmp_path):
    ssh = fake_ssh(tmp_path)
    nested = tmp_path / "nested.py"
    nested.write_text(f"import sys, time; sys.stdout.buffer.write({NESTED!r}); sys.stdout.flush(); time.sleep(60)")
    config = tmp_path / "config.toml"
    config.write_text(f'[hosts]\nnames = ["n1"]\ncommand = "{sys.executable} {nested}"\nssh = "{ssh}"\nwait = 5\n')
    started = time.monotonic()
    result = gputui(os.environ, "--hosts", "--config", str(config), "--once")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "== n1 · unreachable: refused its answer: JSON nested too deeply\n"
    assert time.monotonic() - started < 5  # answered, not waited out


def test_the_monitor_shows_hosts_visible_and_judges_each_new_snapshot_once():
    from plain_data import training_report
    from still import FrozenHosts

    from gputui.ui.sources.hosts_sampler import HostsSampler

    snapshot = type(workstation())(**{**workstation().__dict__, "probes": (training_report(pid=1234),)})
    hostile = HostView("evil\x1b]0;pwned\x07", "unreachable", "Permission denied\x1b[2J")
    views = (HostView("a", "live", None, 0.5, snapshot), hostile)
    clocks = iter([0.0, 0.5, 1.0, 1.5]), iter([0.0, 0.02])
    sampler = HostsSampler(FrozenHosts(views), clock=lambda: next(clocks[0]), cpu_clock=lambda: next(clocks[1]),
                           wall=lambda: 123.0)
    first, second = sampler.sample(), sampler.sample()
    assert first.hosts[1].name == "evil\\x1b]0;pwned\\x07" and first.hosts[1].reason == "Permission denied\\x1b[2J"
    assert second.hosts[0].snapshot is first.hosts[0].snapshot  # the same snapshot made visible once
    assert set(first.leaks) == {"a"} and set(first.leaks["a"]) == {1234}
    assert (first.monitor.cpu_percent, second.monitor.cpu_percent, second.taken_at) == (None, 2.0, 123.0)


def test_once_over_hosts_ends_with_each_owner_over_all_of_them(tmp_path):
    # The shared Kubernetes node of the demo, twice: each pod's GPUs and memory over both nodes.
    ssh = fake_ssh(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text(f'[hosts]\nnames = ["n1", "n2"]\ncommand = "{sys.executable} -m gputui --demo shared-k8s"\n'
                      f'ssh = "{ssh}"\nwait = 30\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = gputui(env, "--hosts", "--config", str(config), "--once", "--ascii")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    section = result.stdout[result.stdout.index("Who holds the GPUs: all hosts"):].splitlines()
    assert section[1] == "  each host as its own gputui judged it, by its rules, over what it watched"
    assert section[2].split()[:4] == ["OWNER", "HOSTS", "GPUS", "MEMORY"]
    sam = next(line for line in section if line.startswith("pod team-vision/notebook-sam "))
    assert sam.split()[2:5] == ["2", "4", "80.0GiB"]
    llama = next(line for line in section if line.startswith("pod ml-research/llama-ft-0 "))
    assert llama.split()[2:5] == ["2", "8", "252GiB"]
