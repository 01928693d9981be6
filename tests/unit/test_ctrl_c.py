"""Ctrl-C at any moment ends gputui quietly: exit 130, no traceback, even while the CLI's own modules are
still loading (issue 47 item 3: a 20-30 line traceback through model/gpu.py and dataclasses.py in the
first 0.2 s). The moment is made exact rather than timed: an import hook raises KeyboardInterrupt, as
the signal would, when a chosen module starts loading."""

import os
import pty
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT

# Raises KeyboardInterrupt when MODULE is first imported, then runs the command as its entry point does.
INTERRUPTED_WHILE_LOADING = """
import sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["gputui", *{args!r}]
from gputui.entry import main
sys.exit(main())
"""

# Modules the command loads on its way to the live monitor's first frame, early to late.
LOADING = ["gputui.cli", "gputui.units", "gputui.model.gpu", "argparse", "gettext", "gputui.options",
           "gputui.collect.collector", "gputui.plain.render"]
# ... and those only the live monitor loads (it starts only on a terminal).
LOADING_LIVE = ["gputui.ui.startup.launch", "gputui.ui.startup.early_frame", "textual.app", "gputui.ui.app"]


def interrupted(module, *args):
    """gputui run with Ctrl-C as ``module`` starts loading: its exit status and all it wrote."""
    code = INTERRUPTED_WHILE_LOADING.format(module=module, args=list(args))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                            stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout + result.stderr


def interrupted_on_a_terminal(module, *args):
    """The same, with a terminal (a pty) for standard input, output and error, as the live monitor needs."""
    code = INTERRUPTED_WHILE_LOADING.format(module=module, args=list(args))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    main, child = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child, env=env,
                               start_new_session=True)
    os.close(child)
    written = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child has gone and closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(main)
    return process.wait(timeout=10), written.decode("utf-8", "replace")


@pytest.mark.parametrize("module", LOADING)
def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback(module):
    assert interrupted(module, "--demo", "--once") == (130, "")


@pytest.mark.parametrize("module", LOADING_LIVE)
def test_ctrl_c_while_the_live_monitor_loads_exits_130_without_a_traceback(module):
    status, written = interrupted_on_a_terminal(module, "--demo")
    assert status == 130 and "Traceback" not in written and "KeyboardInterrupt" not in written, written


def test_ctrl_c_before_the_entry_point_is_reached_is_python_s_own():
    """The hook itself works: a module loaded before gputui's entry point is interrupted with Python's
    traceback, which no code of gputui's can prevent (the interpreter's first few milliseconds)."""
    status, written = interrupted("gputui.entry", "--demo", "--once")
    assert status == -2 and "KeyboardInterrupt" in written
