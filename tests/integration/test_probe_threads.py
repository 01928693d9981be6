"""The probe's one rule: no torch object is touched off the training thread (gputui/probe/__init__.py).

The socket thread runs under a guard that records every call into torch; the board it reads is walked
for torch objects; and real training jobs, polled flat out by several clients at once for several times
as long as the old design took to crash them (it read gradient storages from the socket thread and
segfaulted within 4-11 s under four such pollers), must finish with exit code 0 and true reports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import types
from collections import deque
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from clocks import MovableClock  # noqa: E402

from gputui.link import client  # noqa: E402
from gputui.link.admission import FLOOD_NOTE  # noqa: E402
from gputui.link.server import ProbeServer  # noqa: E402
from gputui.probe import runtime  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
JOB = HERE / "probe_stress_job.py"
TORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "")
SERVER_THREAD = "gputui-probe-server"
STRESS_SECONDS = 35.0  # the old design died within 11 s under these pollers: over 3x that


# -- the guard ---------------------------------------------------------------------------------------

def touches_torch(frame, event, arg) -> str | None:
    """What a profiler event says about a call into torch: Python code in torch, or a builtin that
    belongs to torch or is bound to a torch object (a tensor's or a storage's method)."""
    if event == "call" and frame.f_code.co_filename.startswith(TORCH_DIR):
        return f"{frame.f_code.co_filename}:{frame.f_code.co_name}"
    if event == "c_call":
        owner = getattr(arg, "__self__", None)
        module = getattr(arg, "__module__", None) or ""
        if module.startswith("torch") or type(owner).__module__.startswith("torch"):
            return f"{type(owner).__name__}.{getattr(arg, '__name__', arg)}"
    return None


class TorchGuard:
    """Records calls into torch made on the probe's socket thread (started while the guard is on)."""

    def __init__(self):
        self.violations: list[str] = []

    def _profile(self, frame, event, arg):
        if threading.current_thread().name == SERVER_THREAD:
            what = touches_torch(frame, event, arg)
            if what is not None and len(self.violations) < 20:
                self.violations.append(what)

    def __enter__(self):
        threading.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        threading.setprofile(None)


def not_about_the_polling(problems) -> list[str]:
    """The report's problems, less the one note that flat-out polling earns: new connections come
    faster than the probe's accept rate (each client.request is a connection of its own)."""
    return [p for p in problems if not p.startswith(FLOOD_NOTE)]


def hammer(pid: int, env: dict, stop: threading.Event, counts: list) -> None:
    """Ask for every op the probe serves, over and over, until told to stop."""
    params: dict = {}
    while not stop.is_set():
        try:
            result = client.request(pid, "report", params, timeout=5.0, environ=env)
            counts.append(1)
            steps = result.get("steps") or []
            params = ({"since_step": steps[-1]["step"], "started_at": result["probe_started_at"]}
                      if steps and len(counts) % 2 else {})
            client.request(pid, "hello", None, timeout=5.0, environ=env)
            if len(counts) % 50 == 0:
                client.request(pid, "record_sites", {"steps": 2}, timeout=5.0, environ=env)
        except client.ProbeUnavailable:
            time.sleep(0.01)


def train_steps(model, optimizer, x, y, n: int) -> None:
    for _ in range(n):
        optimizer.zero_grad()  # set_to_none: gradients freed at every step
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTUI_PROBE_DIR", str(tmp_path))
    return {**os.environ, "GPUTUI_PROBE_DIR": str(tmp_path)}


def small_job():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, optimizer, torch.randn(16, 64), torch.randn(16, 64)


def test_the_socket_thread_never_calls_into_torch(env):
    model, optimizer, x, y = small_job()
    stop, counts = threading.Event(), []
    with TorchGuard() as guard:
        probe = runtime.start(budget=1.0)  # every step measured: the most publishing there can be
        try:
            pollers = [threading.Thread(target=hammer, args=(os.getpid(), env, stop, counts))
                       for _ in range(2)]
            for t in pollers:
                t.start()
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                train_steps(model, optimizer, x, y, 5)
            stop.set()
            for t in pollers:
                t.join(10)
            report = probe.report()
        finally:
            runtime.stop()
    assert len(counts) > 50  # the socket thread really served while the job trained
    assert guard.violations == []
    assert not_about_the_polling(report.problems) == []
    params = sum(p.nbytes for p in model.parameters())
    assert report.devices[0].categories.parameters == params


def test_the_guard_catches_a_handler_that_reads_tensors(env, tmp_path):
    """The old design, a handler that counts gradient storages itself, is caught by the same guard."""
    model, optimizer, x, y = small_job()
    train_steps(model, optimizer, x, y, 1)

    def old_report(params):
        return sum(p.grad.untyped_storage().nbytes() for p in model.parameters() if p.grad is not None)

    with TorchGuard() as guard:
        server = ProbeServer({"report": old_report}, path=tmp_path / "old.sock")
        assert server.start()
    try:
        link = client.ProbeLink(os.getpid(), tmp_path / "old.sock", timeout=5.0)
        link.send("report", {})
        link.wait(5.0)
        assert link.receive()[0]["result"] == sum(p.nbytes for p in model.parameters())
        link.close()
    finally:
        server.stop()
    assert any("untyped_storage" in v for v in guard.violations)


def torch_objects_in(value, path: str = "board", seen: set | None = None) -> list[str]:
    """Paths to torch objects reachable from ``value`` through containers and records."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
        return []
    seen.add(id(value))
    if type(value).__module__.startswith("torch"):
        return [path]
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += torch_objects_in(k, f"{path}[key]", seen) + torch_objects_in(v, f"{path}[{k!r}]", seen)
    elif isinstance(value, (list, tuple, deque, set, frozenset)):
        for i, item in enumerate(value):
            found += torch_objects_in(item, f"{path}[{i}]", seen)
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            found += torch_objects_in(getattr(value, field.name), f"{path}.{field.name}", seen)
    elif hasattr(value, "__dict__"):
        for name, item in vars(value).items():
            found += torch_objects_in(item, f"{path}.{name}", seen)
    elif isinstance(value, types.BuiltinFunctionType) and value.__module__ == "time":
        pass  # the probe's clock (time.perf_counter)
    else:
        found.append(f"{path}: unexpected {type(value).__name__}")
    return found


def test_the_board_holds_no_torch_object():
    model, optimizer, x, y = small_job()
    probe = runtime.start(budget=1.0, serve=False)
    try:
        train_steps(model, optimizer, x, y, 5)
        probe.desk.record_sites({"steps": 2})
        train_steps(model, optimizer, x, y, 4)  # a recording window opens and closes
        board, desk = probe.board, probe.desk
        assert board.step_count == 9 and board.sites.recorded_steps == (7, 8)
        assert torch_objects_in(board) == []
        assert torch_objects_in(desk) == []
        assert torch_objects_in(torch.zeros(1), "tensor") == ["tensor"]  # the walk sees them
    finally:
        runtime.stop()


# -- a reading asked for between steps ----------------------------------------------------------------

def test_a_report_asks_for_a_reading_that_the_next_forward_takes():
    model, optimizer, x, y = small_job()
    # 5 % of the time: a loaded machine's slow first steps must not use up the reading's allowance
    clock = MovableClock()
    probe = runtime.start(serve=False, budget=0.05, clock=clock)
    try:
        train_steps(model, optimizer, x, y, 2)
        first = probe.report()
        clock.advance(1.2)  # older than a second, and the probe has earned time for one reading
        probe.desk.report({})  # a monitor asks: nothing is read on this thread, a request is left
        assert probe.board.reading.read_at == first.read_at
        optimizer.zero_grad()
        model(x)  # the next hook on the training thread takes the reading
        fresh = probe.report()
        assert fresh.read_at_step == 2 and fresh.read_at > first.read_at
        assert fresh.devices[0].categories.parameters == sum(p.nbytes for p in model.parameters())
        assert fresh.devices[0].categories.gradients == 0  # zero_grad freed them: read just now
    finally:
        runtime.stop()


def test_a_job_that_never_steps_an_optimizer_gets_fresh_readings_too():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    clock = MovableClock()
    probe = runtime.start(serve=False, budget=0.05, clock=clock)
    try:
        first = probe.report()
        clock.advance(1.2)
        probe.desk.report({})
        with torch.no_grad():
            model(torch.randn(4, 64))  # evaluation only: the forward hook is where the reading happens
        fresh = probe.report()
        assert fresh.read_at > first.read_at and fresh.read_at_step == 0
        assert probe.board.step_count == 0
    finally:
        runtime.stop()


def test_no_reading_is_taken_beyond_the_budget():
    model, optimizer, x, y = small_job()
    clock = MovableClock()
    probe = runtime.start(budget=0.0, serve=False, clock=clock)  # only the first step is measured, by rule
    try:
        train_steps(model, optimizer, x, y, 2)
        clock.advance(1.1)
        probe.desk.report({})
        assert probe.board.reading_wanted > probe.board.reading.monotonic  # asked for, and
        model(x)
        assert probe.report().read_at_step == 1  # not taken
    finally:
        runtime.stop()


def test_before_the_first_step_the_report_says_nothing_was_read_per_device():
    probe = runtime.start(serve=False)
    try:
        report = probe.report()
        assert report.read_at_step == 0 and report.read_at is not None
        assert report.steps == ()
    finally:
        runtime.stop()


# -- real jobs, polled flat out ------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", ["set_to_none", "accumulation", "replace", "dataloader", "compile"])
def test_a_job_polled_flat_out_by_several_clients_finishes_with_true_reports(scenario, env):
    job = subprocess.Popen(
        [sys.executable, str(JOB), "train", scenario, "--seconds", str(STRESS_SECONDS)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = job.stdout.readline().split()
        assert ready[:1] == ["ready"], job.stderr.read()
        pid = int(ready[1])
        pollers = [subprocess.Popen(
            [sys.executable, str(JOB), "poll", str(pid), "--seconds", str(STRESS_SECONDS + 5)]
            + (["--incremental"] if i == 2 else []),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
        truth = json.loads(job.stdout.readline() or "null")
        assert truth is not None, job.stderr.read()
        last = client.fetch_report(pid, timeout=10, environ=env)
        polled = [json.loads(p.communicate(timeout=120)[0] or "null") for p in pollers]
        job.stdin.close()
        assert job.wait(timeout=60) == 0, job.stderr.read()
    finally:
        if job.poll() is None:
            job.kill()
    assert truth["steps"] > 100
    assert last.steps[-1].step == truth["steps"]  # every step counted, none twice
    assert not_about_the_polling(last.problems) == []
    (device,) = last.devices
    assert device.categories.parameters == truth["parameters"]
    for result in polled:
        assert result["wrong"] == [] and result["answers"] > 20
        assert result["parameters"] == [truth["parameters"]]
