"""The config file is read once a run, by ``gputui.cli.main``, whatever the mode (issue 46: --once and --json
read it twice, serve, --watch and the live monitor three times, each read a chance to find another file),
and what it says reaches the mode. Each read is counted where the config module reads a file
(``gputui.config.read_small``): in this process, or in a child that counts them the same way."""

import os
import signal
import subprocess
import sys

import pytest
from cli_helpers import ROOT

from gputui import cli, config

CONFIG = 'interval = 2\ntheme = "light"\n[alerts]\noom_within = "20m"\n[waste]\nidle_after = "5m"\n'

# A gputui whose config reads are counted, said on stderr as it exits.
COUNTED = (
    "import atexit, sys\n"
    "from gputui import config\n"
    "reads = []\n"
    "real = config.read_small\n"
    "def counted(path, *args, **kwargs):\n"
    "    reads.append(str(path))\n"
    "    return real(path, *args, **kwargs)\n"
    "config.read_small = counted\n"
    "atexit.register(lambda: print(f'config reads: {reads}', file=sys.stderr, flush=True))\n"
    "from gputui.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.fixture
def path(tmp_path):
    written = tmp_path / "config.toml"
    written.write_text(CONFIG)
    return written


@pytest.fixture
def reads(monkeypatch):
    """The paths the config module reads in this process, in order."""
    seen = []
    real = config.read_small

    def counted(file, *args, **kwargs):
        seen.append(str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(config, "read_small", counted)
    return seen


@pytest.mark.parametrize("mode", ["--once", "--json"])
def test_once_and_json_read_it_once(path, reads, mode, capsys):
    assert cli.main(["--demo", "--config", str(path), mode]) == 0
    assert reads == [str(path)]
    assert "GPU" in capsys.readouterr().out


def test_record_reads_it_once(path, reads, tmp_path, capsys):
    assert cli.main(["--demo", "--config", str(path), "record", str(tmp_path / "r.rec"), "--duration", "1s"]) == 0
    assert reads == [str(path)]
    assert (tmp_path / "r.rec").stat().st_size > 0


def test_the_live_monitor_reads_it_once_and_shows_what_it_says(path, reads, monkeypatch):
    from gputui.ui.app import GpuTuiApp

    opened = []
    original = GpuTuiApp.run

    async def leave(pilot):
        await pilot.pause()
        pilot.app.exit()

    def headless(self, **kwargs):  # the test has no terminal to draw on
        opened.append(self)
        return original(self, headless=True, auto_pilot=leave, **kwargs)

    monkeypatch.setattr(GpuTuiApp, "run", headless)
    monkeypatch.setattr("gputui.plain.terminal.is_terminal", lambda *args, **kwargs: True)
    monkeypatch.setattr("gputui.cli._stdin_is_terminal", lambda: True)  # a keyboard, as a user has
    monkeypatch.setenv("TERM", "xterm-256color")
    assert cli.main(["--demo", "--config", str(path)]) == 0
    assert reads == [str(path)]
    app = opened[0]
    assert (app.theme, app.options.alerts.thresholds.oom_within) == ("textual-light", 1200.0)


@pytest.mark.parametrize("words, stop, status", [
    (["serve", "--listen", "127.0.0.1:0"], signal.SIGTERM, 128 + signal.SIGTERM),  # says where it listens first
    (["--watch", "1"], signal.SIGINT, 0),  # prints its first sample; Ctrl-C is how it ends
])
def test_what_runs_until_stopped_reads_it_once(path, tmp_path, words, stop, status):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path)}
    running = subprocess.Popen([sys.executable, "-c", COUNTED, "--demo", "--config", str(path), *words],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = (running.stderr if words[0] == "serve" else running.stdout).readline()
        assert first.startswith(("gputui serve: http://127.0.0.1:", "-- 2026-01-05 09:00:00 UTC --")), first
        running.send_signal(stop)
        said = running.communicate(timeout=60)[1]
    finally:
        running.kill()
        running.wait()
    assert running.returncode == status
    assert said.splitlines()[-1] == f"config reads: {[str(path)]}"
