"""``gputui web`` on the command line: its flags, what it refuses (one line, exit 2, before it listens), the
command line each browser session runs, and what it leaves unloaded elsewhere."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest
from cli_helpers import ROOT, gputui, no_traceback
from web_helpers import serve_env, serving_web, users_file

from gputui import cli
from gputui.config import parse_config, resolve
from gputui.options import WEB_IDLE, WEB_SESSIONS, WebOptions
from gputui.web.run import session_command

DEMO = ("--demo", "training-node")


@pytest.fixture
def env(tmp_path):
    return serve_env(tmp_path)


def parse_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.parse(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.splitlines()[0]


def test_web_takes_the_monitors_options_before_it_and_its_own_after():
    argv = [*DEMO, "--only", "0,2", "--interval", "2", "web", "--listen", "0.0.0.0:9500", "--max-sessions", "2",
            "--session-timeout", "90s"]
    options = cli.parse(argv)
    assert options.mode == "web"
    assert (options.demo, options.only, options.interval) == ("training-node", ("0", "2"), 2.0)
    assert options.web == WebOptions(listen="0.0.0.0:9500", sessions=2, idle=90.0, argv=tuple(argv))


def test_web_defaults():
    options = cli.parse(["web"])
    assert options.web == WebOptions(argv=("web",))
    assert (options.web.sessions, options.web.idle, options.web.session) == (WEB_SESSIONS, WEB_IDLE, False)


def test_a_bare_demo_before_web_is_the_default_scenario():
    options = cli.parse(["--demo", "web"])
    assert (options.mode, options.demo) == ("web", "workstation")


def test_the_many_host_view_and_a_replay_go_to_the_browser_too():
    hosts = cli.parse(["--hosts", "node1,node2", "web"])
    assert (hosts.mode, hosts.hosts) == ("web", ("node1", "node2"))
    replay = cli.parse(["replay", "run.rec", "--web", "--max-sessions", "1"])
    assert (replay.mode, replay.replay.file, replay.web.sessions) == ("web", "run.rec", 1)


def test_each_session_runs_the_command_line_given_marked_as_a_session():
    argv = [*DEMO, "--theme", "light", "web", "--listen", "127.0.0.1:0"]
    command = session_command(cli.parse(argv).web.argv)
    assert command == [sys.executable, "-m", "gputui", *argv, "--web-session"]
    session = cli.parse(command[3:])
    assert (session.mode, session.web.session, session.demo, session.theme) == ("web", True, "training-node", "light")
    replay = cli.parse(session_command(cli.parse(["replay", "a.rec", "--web"]).web.argv)[3:])
    assert (replay.mode, replay.web.session, replay.replay.file) == ("web", True, "a.rec")


def test_the_config_files_interval_is_the_browser_monitors_as_it_is_the_terminals():
    config = parse_config({"interval": 3})
    assert resolve(cli.parse(["web"]), config).interval == 3.0
    assert resolve(cli.parse(["serve"]), config).interval is None  # serve keeps its own pace


@pytest.mark.parametrize("argv, message", [
    (["web", "--tls-key", "k.pem"], "--tls-key goes with --tls-cert"),
    (["--once", "web"], "gputui web shows the live monitor in a browser; --once, --json and --watch print it here"),
    (["--watch", "2", "web"], "--once, --json and --watch print it here"),
    (["web", "--max-sessions", "0"], "at least 1 session, not '0'"),
    (["web", "--session-timeout", "soon"], "not a duration: 'soon'"),
    (["replay", "a.rec", "--listen", "127.0.0.1:0"], "--listen goes with --web"),
    (["replay", "a.rec", "--web", "--once"], "--web shows the monitor in a browser; --once and --json print here"),
    (["--hosts", "n1", "--demo", "web"], "--hosts shows what the hosts' own gputui sees"),
])
def test_what_web_cannot_take_is_said_in_one_line(argv, message, capsys):
    assert message in parse_error(argv, capsys)


@pytest.fixture
def port_in_use():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    yield taken.getsockname()[1]
    taken.close()


@pytest.mark.parametrize("args, message", [
    ((*DEMO, "web", "--listen", "127.0.0.1:{port}"),
     "gputui: cannot listen on 127.0.0.1:{port}: Address already in use (another gputui web? choose a port with "
     "--listen)"),
    ((*DEMO, "web", "--listen", "localhost"), "gputui: --listen localhost: give ADDRESS:PORT"),
    ((*DEMO, "web", "--basic-auth-file", "/nonexistent/users"),
     "gputui: cannot read the basic auth file /nonexistent/users: "),
    ((*DEMO, "web", "--tls-cert", "/nonexistent/cert.pem"), "gputui: cannot read the TLS file /nonexistent/cert.pem"),
    # What every session would end on, said once before listening: no such GPU, no recording.
    ((*DEMO, "--only=9", "web"), "gputui: --only 9: no such GPU; the GPUs here are 0 "),
    (("replay", "/nonexistent/run.rec", "--web"), "gputui: cannot read recording /nonexistent/run.rec: "),
])
def test_what_cannot_be_served_is_one_line_and_exit_2_before_listening(env, port_in_use, args, message):
    done = gputui(env, *(a.format(port=port_in_use) for a in args), timeout=60)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message.format(port=port_in_use)), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "gputui web: http" not in done.stderr


def test_an_open_address_is_warned_about_as_the_exporters_is(env, tmp_path):
    with serving_web(env, *DEMO, "web", "--listen", "0.0.0.0:0") as (proc, url):
        warning = proc.stderr.readline()
        assert url.startswith("http://0.0.0.0:")
    assert warning.startswith("gputui web: warning: no basic auth (--basic-auth-file), and this address is open")
    with serving_web(env, *DEMO, "web", "--listen", "0.0.0.0:0", "--basic-auth-file", str(users_file(tmp_path))) \
            as (proc, url):
        warning = proc.stderr.readline()
    assert warning.startswith("gputui web: warning: basic auth without TLS (--tls-cert) sends passwords")


def test_ctrl_c_ends_it_with_130(env):
    proc = subprocess.Popen([sys.executable, "-m", "gputui", *DEMO, "web", "--listen", "127.0.0.1:0"], cwd=ROOT,
                            env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr.readline().startswith("gputui web: http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert proc.stderr.read() == ""  # no traceback, no KeyboardInterrupt
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted("
                          "m for m in ('aiohttp', 'textual_serve', 'jinja2') if m in sys.modules)))"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import gputui.cli",
    "import gputui.ui.app, gputui.ui.startup.launch",
    "import gputui.serve.run",
    # A browser session's monitor is the terminal's, under another driver: no web server in each of them.
    "import gputui.web.session, gputui.web.run",
    "from gputui import cli; cli.main(['--demo', '--once'])",
])
def test_only_the_web_server_loads_aiohttp_and_textual_serve(code):
    assert loaded(code) == []
