"""ruff, with the settings of pyproject.toml's [tool.ruff], finds nothing in the source, the tests,
the benchmarks, the scripts and the examples."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CHECKED = ("gputui", "tests", "bench", "scripts", "examples")


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed (pip install -e '.[test]' brings it)")
def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", *CHECKED],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ruff check {' '.join(CHECKED)}:\n{result.stdout}{result.stderr}"
