"""``gputui serve`` end to end, as users run it: python -m gputui in a subprocess, asked over HTTP.

The demo and the filters like every mode, a real probe that vanishes, basic auth from a file made by
--hash-password, the warning for an open address, and one-line errors (exit 2) for what cannot be.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, gputui, no_traceback
from idle_flood import IdleFlood
from plain_data import errors
from serve_helpers import fetch, serving

DEMO = ("--demo", "training-node")


@pytest.fixture
def env(tmp_path):
    """A private probe directory and config directory."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE", "NO_COLOR")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


def test_the_demo_is_served_as_metrics_and_as_the_json_document(env):
    with serving(env, *DEMO, "serve", "--listen", "127.0.0.1:0", "--interval", "1") as (_, url):
        status, _, body = fetch(url + "/snapshot")
        document = json.loads(body)
        assert status == 200 and errors(document, document_schema()) == []
        assert document["snapshot"]["source"] == "sim:training-node" and len(document["snapshot"]["devices"]) == 8
        status, headers, metrics = fetch(url + "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert metrics.count(b"gputui_device_memory_used_bytes{") == 8
        assert b'gputui_probe_leak_state{device="cuda:0",pid="48231",state="clean"' in metrics
        assert b"process_cpu_seconds_total" in metrics  # the exporter's own cost
        assert b"python_gc_objects_collected_total" not in metrics  # none of the global registry's


def document_schema():
    from gputui.plain.schema import SCHEMA

    return SCHEMA


def test_the_filters_apply_as_in_every_mode(env):
    with serving(env, *DEMO, "--only=3", "serve", "--listen", "127.0.0.1:0") as (_, url):
        metrics = fetch(url + "/metrics")[2]
        snapshot = json.loads(fetch(url + "/snapshot")[2])["snapshot"]
    assert [d["index"] for d in snapshot["devices"]] == [3]
    assert metrics.count(b"gputui_device_memory_used_bytes{") == 1 and b'index="3"' in metrics


def test_an_open_address_without_a_password_is_warned_about(env):
    with serving(env, *DEMO, "serve", "--listen", "0.0.0.0:0") as (proc, url):
        warning = proc.stderr.readline()
        assert url.startswith("http://0.0.0.0:")
    assert warning.startswith("gputui serve: warning: no basic auth (--basic-auth-file)")


def users_file(env, tmp_path):
    """A users file made by --hash-password: user prometheus, password "correct horse"."""
    made = subprocess.run([sys.executable, "-m", "gputui", "serve", "--hash-password", "prometheus"],
                          input="correct horse\n", capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0 and made.stdout.startswith("prometheus:scrypt$")
    assert "correct horse" not in made.stdout
    users = tmp_path / "users"
    users.write_text(made.stdout)
    return users


def test_basic_auth_from_a_file_made_by_hash_password(env, tmp_path):
    users = users_file(env, tmp_path)
    with serving(env, *DEMO, "serve", "--listen", "127.0.0.1:0", "--basic-auth-file", str(users)) as (_, url):
        assert fetch(url + "/metrics")[0] == 401
        assert fetch(url + "/metrics", auth=("prometheus", "correct horse!"))[0] == 401
        assert fetch(url + "/metrics", auth=("prometheus", "correct horse"))[0] == 200


@pytest.mark.slow
@pytest.mark.parametrize("auth", [("prometheus", "correct horse"), None], ids=["logged-in", "open"])
def test_idle_connections_reopened_when_dropped_do_not_crowd_out_scrapes(env, tmp_path, auth):
    """Issue 44: 128 connections that never send a byte, each reopened as soon as it is dropped (25 a
    second), took every place: 80 of 81 logged-in scrapes were answered 503. Now the oldest of them gives
    its place to a newcomer and each is dropped a second after it came: every scrape is answered."""
    users = ("--basic-auth-file", str(users_file(env, tmp_path))) if auth else ()
    with serving(env, *DEMO, "serve", "--listen", "127.0.0.1:0", *users) as (_, url):
        assert fetch(url + "/metrics", auth=auth)[0] == 200  # a logged-in client pays scrypt once
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with IdleFlood((host, int(port))) as flood:
            time.sleep(1.0)  # every place taken
            statuses = []
            for _ in range(40):  # Prometheus at 4 scrapes a second
                statuses.append(fetch(url + "/metrics", auth=auth)[0])
                time.sleep(0.25)
    assert flood.opened >= flood.count + 100 and flood.dropped >= 100  # the flood was at work throughout
    assert statuses == [200] * 40


@pytest.fixture
def port_in_use():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    yield taken.getsockname()[1]
    taken.close()


@pytest.mark.parametrize("args, message", [
    (("--listen", "127.0.0.1:{port}"), "gputui: cannot listen on 127.0.0.1:{port}: Address already in use"),
    (("--listen", "localhost"), "gputui: --listen localhost: give ADDRESS:PORT"),
    (("--listen", "256.1.1.1:80"), "gputui: cannot listen on 256.1.1.1:80: "),
    (("--tls-cert", "/nonexistent/cert.pem"), "gputui: cannot read the TLS file /nonexistent/cert.pem: "),
    (("--basic-auth-file", "/nonexistent/users"), "gputui: cannot read the basic auth file /nonexistent/users: "),
])
def test_what_cannot_be_served_is_one_line_and_exit_2(env, port_in_use, args, message):
    args = tuple(a.format(port=port_in_use) for a in args)
    result = gputui(env, *DEMO, "serve", *args, timeout=60)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.startswith(message.format(port=port_in_use)) and result.stderr.count("\n") == 1


@pytest.mark.parametrize("flags", [
    ("--tls-cert", "{fifo}"),
    ("--tls-cert", "{regular}", "--tls-key", "{fifo}"),
    ("--basic-auth-file", "{fifo}"),
])
def test_a_fifo_given_for_a_file_is_one_line_not_a_hang(env, tmp_path, flags):
    fifo, regular = tmp_path / "fifo", tmp_path / "regular.pem"
    os.mkfifo(fifo)
    regular.write_text("not read: the FIFO is\n")
    result = gputui(env, *DEMO, "serve", *(f.format(fifo=fifo, regular=regular) for f in flags), timeout=30)
    what = "the basic auth file" if flags[0] == "--basic-auth-file" else "the TLS file"
    assert (result.returncode, result.stderr) == (2, f"gputui: {what} {fifo} is not a regular file\n")


def test_serve_runs_with_standard_output_closed(env):
    """It writes nothing there (where it listens goes to stderr): ``gputui serve >&-`` serves."""
    with serving(env, *DEMO, "serve", "--listen", "127.0.0.1:0", stdout_closed=True) as (proc, url):
        assert fetch(url + "/metrics")[0] == 200 and proc.poll() is None
    made = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "gputui", "serve",
                           "--hash-password", "prometheus"], input="pw\n", capture_output=True, text=True,
                          env=env, timeout=60)
    assert (made.returncode, made.stderr) == (2, "gputui: standard output is closed: nothing to show on\n")


def test_a_probe_that_vanishes_leaves_the_exporter_serving(env, probed_process):
    """No driver here (or a real one): the probed CPU job is served, then killed mid-run."""
    pid = str(probed_process.pid)
    with serving(env, "serve", "--listen", "127.0.0.1:0", "--interval", "0.3") as (proc, url):
        if not _driver_here():  # said once at the start, after where it listens
            assert _line_within(proc.stderr, 10) == (
                "gputui serve: warning: no NVIDIA driver (NVML could not be loaded): no GPU metrics; serving the "
                "host's and the probed processes' metrics\n")
        metrics = fetch(url + "/metrics")[2].decode()
        assert f'gputui_probe_steps_total{{device="",pid="{pid}",uuid=""}} 7.0' in metrics
        probed_process.kill()
        probed_process.wait(timeout=10)
        deadline = time.monotonic() + 20
        while f'pid="{pid}"' in metrics and time.monotonic() < deadline:
            time.sleep(0.3)
            status, _, body = fetch(url + "/metrics")
            assert status == 200
            metrics = body.decode()
        assert f'pid="{pid}"' not in metrics and "gputui_snapshot_timestamp_seconds" in metrics
        assert fetch(url + "/snapshot")[0] == 200 and proc.poll() is None


def _driver_here() -> bool:
    from gputui.collect import NvmlUnavailable, open_collector

    try:
        open_collector(None).close()
    except NvmlUnavailable:
        return False
    return True


def _line_within(stream, seconds: float) -> str:
    """The next line of ``stream``, or "" when none comes within ``seconds`` (not a hung test)."""
    import threading

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    return lines[0] if lines else ""
