"""Running ``python -m gputui`` in a subprocess, for the end-to-end tests of the plain modes."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gputui(env, *args, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "gputui", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=cwd)


def no_traceback(result):
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
