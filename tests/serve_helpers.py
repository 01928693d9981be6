"""Running ``gputui serve`` in a subprocess and asking it things, for the exporter's end-to-end tests."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager

from cli_helpers import ROOT


def serve_env(tmp_path) -> dict[str, str]:
    """The environment for a ``gputui serve`` of this checkout: its own probe and config directories."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k != "GPUTUI_PROBE"}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(env, *args, timeout: float = 60.0, stdout_closed: bool = False):
    """``python -m gputui [ARGS] serve ...`` on a free port; yields (process, base URL). Stopped with
    SIGTERM afterwards, which must end it with 143. ``stdout_closed``: started as ``gputui ... >&-``."""
    command = [sys.executable, "-m", "gputui", *args]
    if stdout_closed:
        command = ["sh", "-c", 'exec "$@" >&-', "sh", *command]  # exec: the signal reaches gputui itself
    proc = subprocess.Popen(command, cwd=ROOT, env=env, text=True, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL if stdout_closed else subprocess.PIPE)
    try:
        line = proc.stderr.readline()  # "gputui serve: http://127.0.0.1:PORT/metrics and /snapshot, ..."
        assert line.startswith("gputui serve: http"), line + proc.stderr.read()
        yield proc, line.split()[2].removesuffix("/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=timeout)
        if proc.stdout is not None:
            proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 143, proc.returncode


def basic(name: str, password: str) -> str:
    """An HTTP basic-auth header's value (the exporter's and gputui web's users file)."""
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


def fetch(url: str, *, method: str = "GET", auth: tuple[str, str] | None = None,
          context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; an HTTP error status is an answer, not an exception."""
    request = urllib.request.Request(url, method=method)
    if auth is not None:
        request.add_header("Authorization", basic(*auth))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()
