"""The layers of docs/architecture.md, checked by import-linter against pyproject.toml's contracts.

import-linter reads every import in gputui's source, including those inside functions that a test
never runs, so it sees our own arrows between packages (a new ``analysis -> collect``, say).
``tests/unit/test_import_rules.py`` checks the other half: what importing each module really loads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is not installed: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
# `lint-imports` itself, whichever of its versions is installed; --no-cache leaves no cache directory
# behind. It reads pyproject.toml in the working directory and finds gputui there (first on sys.path).
LINT = ("import sys\n"
        "from importlinter.cli import lint_imports_command\n"
        "sys.exit(lint_imports_command(['--no-cache']))\n")


def lint_imports(directory: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}  # whole contract names on one line, no escapes
    return subprocess.run([sys.executable, "-c", LINT], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_are_kept():
    out = lint_imports(ROOT)
    assert out.returncode == 0, f"lint-imports found broken contracts:\n{out.stdout}\n{out.stderr}"
    assert "0 broken" in out.stdout, out.stdout


# One wrong arrow for each contract, inside a function (a lazy import the runtime test cannot see),
# and a new module left out of the layers.
@pytest.mark.parametrize("module, line, contract", [
    ("analysis/text.py", "from gputui.collect import users", "Layers: "),  # siblings
    ("launch/run.py", "from gputui.probe import hook", "Layers: "),  # the monitor's side, the job's
    ("model/codec.py", "from gputui.ui import app", "Nothing imports the ui but the CLI"),
    ("probe/oom.py", "import textual", "Only the ui imports Textual"),
    ("plain/render.py", "import torch", "The monitor never imports torch"),
    ("probe/desk.py", "from gputui.probe import tracking", "The probe's socket side"),
    ("probe/host.py", "import pynvml", "The probe leaves sampling to the monitor"),
    ("link/paths.py", "import psutil", "The vocabulary, the analysis and the wire"),
    ("serve/web.py", "from gputui.ui import app", "Layers: "),  # the exporter and the monitor are siblings
    ("plain/render.py", "import prometheus_client", "Only the exporter imports prometheus_client"),
    ("notes.py", "pass", "Layers: "),  # a new module that was given no layer
])
def test_a_wrong_arrow_breaks_its_contract(tmp_path, module, line, contract):
    shutil.copytree(ROOT / "gputui", tmp_path / "gputui",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "gputui" / module, "a") as f:
        f.write(f"\n\ndef _wrong_arrow():\n    {line}  # noqa\n")
    out = lint_imports(tmp_path)
    assert out.returncode != 0, out.stdout
    verdicts = [v for v in out.stdout.splitlines() if re.search(r" (KEPT|BROKEN)\b", v)]
    assert any(v.startswith(contract) and " BROKEN" in v for v in verdicts), out.stdout


def import_circles(package: str = "gputui") -> list[list[str]]:
    """The circles of imports among the package's modules (strongly connected groups of more than one
    module), counting every import: inside functions and under TYPE_CHECKING too."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=False)
    order, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module: str) -> None:  # Tarjan's: the graph is a few hundred modules deep at most
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return sorted(circles)


def test_no_import_circle():
    # collect/sim's machine and its views (psutil, files, probes) were one: the views now read the
    # machine through state.MachineView. The ui's apps and screens were the last (issue 34 item 1):
    # the key listings are data in ui/bindings.py, Ahead has a module of its own, the replay's
    # launcher is in launch.py, and screens ask their app with Messages (ui/requests.py) and read
    # it through the typed views of ui/state.py.
    assert import_circles() == []


def test_key_listings_need_no_app_or_screen():
    # Every app (and the help, and the config's key check) reads the key listings: they import
    # nothing of gputui, so reading them can close no circle.
    import grimp

    graph = grimp.build_graph("gputui", exclude_type_checking_imports=False)
    assert graph.find_modules_directly_imported_by("gputui.ui.bindings") == set()
