"""Running ``gputui web`` in a subprocess, and seeing its sessions, for the browser view's tests (unit/ without a
browser, integration/ with Chromium)."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
from cli_helpers import ROOT
from serve_helpers import basic as basic_value
from serve_helpers import serve_env

from gputui.serve.auth import password_line

__all__ = ["serve_env", "serving_web", "sessions_of", "users_file", "wait_until"]

USER, PASSWORD = "alice", "correct horse"


@contextmanager
def serving_web(env, *args, timeout: float = 60.0):
    """``python -m gputui ARGS`` (ARGS hold ``web`` and its flags; --listen 127.0.0.1:0 where they give none):
    yields (process, its URL). Stopped with SIGTERM afterwards, which must end it with 143 and leave no
    session's monitor behind."""
    if "--listen" not in args:
        args = (*args, "--listen", "127.0.0.1:0")
    proc = subprocess.Popen([sys.executable, "-m", "gputui", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    monitors: list[psutil.Process] = []
    try:
        line = proc.stderr.readline()  # "gputui web: http://127.0.0.1:PORT/, at most N browser sessions at once"
        assert line.startswith("gputui web: http"), line + proc.stderr.read()
        yield proc, line.split()[2].rstrip(",")
        monitors = sessions_of(proc)
    finally:
        proc.terminate()
        proc.wait(timeout=timeout)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 143, proc.returncode
    assert not [m for m in monitors if m.is_running() and m.status() != psutil.STATUS_ZOMBIE], \
        f"sessions outlived gputui web: {monitors}"


def sessions_of(proc) -> list[psutil.Process]:
    """The browser sessions' monitors ``gputui web`` (process ``proc``) runs now."""
    try:
        children = psutil.Process(proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "--web-session" in child.cmdline():
                found.append(child)
        except psutil.Error:
            pass  # gone meanwhile
    return found


def basic(user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    """A request's basic auth header (by hand: aiohttp's BasicAuth is deprecated)."""
    return {"Authorization": basic_value(user, password)}


def users_file(tmp_path: Path, name: str = USER, password: str = PASSWORD) -> Path:
    """A users file (the exporter's, --hash-password's line), private as it must be."""
    users = tmp_path / "users"
    users.write_text(password_line(name, password) + "\n")
    users.chmod(0o600)
    return users


def wait_until(check, seconds: float = 30.0, every: float = 0.1):
    """``check()``'s first true value within ``seconds``; AssertionError when it stays false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {seconds:g} s: {check}")
