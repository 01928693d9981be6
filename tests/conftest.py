"""Fixtures shared by several test modules."""

import gc
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

# A run started in the background by a script (`./.ci/run &`, nohup) inherits SIGINT ignored, and every
# child the tests start would too: a `gputui --watch` the tests stop with Ctrl-C would never see it. A
# handler of our own here is reset to the default in each child at exec, so the children get Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test: screens and text show times of day in the local zone.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("utc")``."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path, for tests that bind a Unix socket in it: a socket's
    path has 107 bytes at most, and pytest-xdist's tmp_path (.../popen-gwN/test_name0) leaves too few."""
    directory = Path(tempfile.mkdtemp(prefix="gputui-test-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def one_torch_thread():
    """torch computes on one thread for the test: the CPU is shared, so steps stay short and steady.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# A CPU job serving a probe's report on the socket, as a real probed process does. The `env` fixture
# it runs with is the requesting module's own (its probe directory, its settings).
PROBE_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from gputui.link.server import ProbeServer
    from gputui.model import ProbeReport, ProbeDevice, StepRecord, to_jsonable

    report = ProbeReport(pid=os.getpid(), taken_at=time.time(), torch_version="2.13.0+cpu",
                         command=tuple(sys.argv), devices=(ProbeDevice("cpu"),),
                         steps=(StepRecord(step=7, ended_at=time.time(), duration=0.005),))
    server = ProbeServer({"report": lambda params: to_jsonable(report)})
    server.start()
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def probed_process(env, tmp_path):
    """A running process whose probe answers with a fixed report; killed afterwards."""
    script = tmp_path / "cpu_job.py"
    script.write_text(PROBE_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait(timeout=10)


# pytest-timeout's limit for tests marked slow (pyproject's `timeout` is the others'): a real training
# loop on a loaded 2-core machine may take minutes, and one that hangs must still end.
SLOW_TIMEOUT = 600
# Tests by kind, by folder: unit/ (pure logic, our own CLI in a subprocess), ui/ (Textual's pilot and
# screen snapshots) and integration/ (real programs beside ours: training loops, Prometheus,
# Alertmanager, sshd, gdb, openssl, systemd-analyze, the frameworks). Every integration test is slow;
# a slow test elsewhere says so itself (@pytest.mark.slow).
SLOW_FOLDER = "integration"


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == SLOW_FOLDER:
            item.add_marker(pytest.mark.slow)
        if "snap_compare" in getattr(item, "fixturenames", ()):  # a screen compared with its SVG
            item.add_marker(pytest.mark.snapshot)
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


def pytest_unconfigure(config):
    """Garbage collected once here, then what survives set aside, before pytest's own final sweeps.

    At its end pytest collects garbage five times over, to report exceptions raised in finalizers. A
    worker that imported torch and the frameworks holds 400,000 objects and more: on a busy 2-core machine
    the five sweeps took over 5 s, past which execnet interrupts its own worker with SIGINT, and the
    interrupt came out as a stray KeyboardInterrupt traceback (in hypothesis's gc callback) after the
    summary. Here the garbage of the run is still collected, and its finalizers still reported, once;
    pytest's sweeps then walk only what is new since (gc.freeze: test harness only, never gputui's code).
    """
    gc.collect()
    gc.freeze()
