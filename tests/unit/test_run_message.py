"""`gputui run` says what it armed: a probe starts only in Python processes that import torch, and
it says when one did (or that none did)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE", "PYTHONPATH")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT))
    return clean


def run(env, *command):
    return subprocess.run([sys.executable, "-m", "gputui", "run", "--", *command],
                          capture_output=True, text=True, env=env, timeout=180)


def lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("gputui:")]


def test_a_command_without_torch_is_told_that_no_probe_started(env):
    result = run(env, "bash", "-c", "exit 3")
    assert result.returncode == 3
    said = lines(result)
    assert said[0].startswith("gputui: running bash (pid ")
    assert said[0].endswith("with the probe armed: it starts in each Python process of the command "
                            "that imports torch, and this says so when one does")
    assert said[1:] == ["gputui: no probe started: bash ran no Python process that imported torch "
                        "(or it ended too soon to be seen)"]


def test_a_python_child_that_imports_torch_is_announced(env):
    pytest.importorskip("torch")
    script = "import torch, time; time.sleep(3)"
    result = run(env, "bash", "-c", f"{sys.executable} -c '{script}'; true")
    assert result.returncode == 0, result.stderr
    said = lines(result)
    started = [line for line in said if line.startswith("gputui: probe started in pid ")]
    assert len(started) == 1, said
    pid = started[0].split()[5].rstrip(";")
    assert started[0] == (f"gputui: probe started in pid {pid}; watch it with `gputui` or "
                          f"`gputui probe {pid}` in another pane")
    assert not any("no probe started" in line for line in said)
