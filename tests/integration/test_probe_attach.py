"""The ways to start the probe, end to end in subprocesses: start(), gputui run, GPUTUI_PROBE=1, attach.

Each child uses a private probe directory (GPUTUI_PROBE_DIR) and the monitor's own client to fetch
reports while it runs; the socket must be gone once it exits, and forked workers must never serve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gputui.launch import attach  # noqa: E402
from gputui.link import client  # noqa: E402
from gputui.probe import hook, pth  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PARAMS = 1_597_480  # parameter bytes of the examples' MLP


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    environ = dict(os.environ)
    environ.pop("GPUTUI_PROBE", None)
    environ["GPUTUI_PROBE_DIR"] = str(probe_dir)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(EXAMPLES)])
    environ["OMP_NUM_THREADS"] = "1"
    return environ


def spawn(code: str, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def first_json_line(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"child said nothing; stderr:\n{proc.stderr.read()}")
    return json.loads(line)


def wait_for_socket(pid: int, env: dict, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = client.find_socket(pid, env)
        if path is not None:
            return path
        time.sleep(0.1)
    raise AssertionError(f"no probe socket for pid {pid}")


TRAIN_AND_WAIT = """
    import json, os, sys
    import loops
    {start}
    job = loops.make_job()  # kept alive: the probe only holds weak references
    loops.clean(job, 5)
    from gputui.probe import runtime
    probe = runtime.current()
    print(json.dumps({{"pid": os.getpid(), "via": probe and probe.via,
                      "socket": str(probe.server.path) if probe and probe.server else None}}), flush=True)
    sys.stdin.readline()
"""


def check_live_report(pid: int, env: dict, via: str) -> None:
    report = client.fetch_report(pid, timeout=10, environ=env)
    assert report.pid == pid
    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5]
    (device,) = report.devices
    assert device.device == "cpu" and device.categories.parameters == PARAMS
    hello = client.request(pid, "hello", timeout=10, environ=env)
    assert hello["via"] == via and hello["steps"] == 5
    assert client.request(pid, "record_sites", {"steps": 3}, timeout=10, environ=env)["recording"]


def finish(proc: subprocess.Popen) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()


def test_start_in_a_script_serves_reports_and_removes_its_socket(env):
    code = textwrap.dedent(TRAIN_AND_WAIT).format(start="import gputui.probe; gputui.probe.start()")
    proc = spawn(code, env)
    info = first_json_line(proc)
    assert Path(info["socket"]).parent == Path(env["GPUTUI_PROBE_DIR"])
    check_live_report(info["pid"], env, via="api")
    finish(proc)
    assert not Path(info["socket"]).exists()


def test_env_variable_starts_the_probe_through_the_pth_line(env, tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    pth.write_pth(site_dir)
    # site.addsitedir runs the .pth lines exactly as interpreter start-up does for site-packages.
    preamble = f"import site; site.addsitedir({str(site_dir)!r})\n"
    env = {**env, "GPUTUI_PROBE": "1"}
    proc = spawn(preamble + textwrap.dedent(TRAIN_AND_WAIT).format(start=""), env)
    info = first_json_line(proc)
    assert info["via"] == "env"
    check_live_report(info["pid"], env, via="env")
    finish(proc)
    assert not Path(info["socket"]).exists()


def test_the_pth_line_does_nothing_without_the_variable(env, tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    pth.write_pth(site_dir)
    code = (f"import site, sys; site.addsitedir({str(site_dir)!r}); import torch\n"
            "print('gputui.probe.hook' in sys.modules, 'gputui.probe.runtime' in sys.modules)")
    for value in (None, "0", "off"):
        child_env = dict(env)
        if value is not None:
            child_env["GPUTUI_PROBE"] = value
        out = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True,
                             text=True, timeout=120)
        assert out.stdout.split() == ["False", "False"], out.stderr


def test_gputui_run_to_completion(env):
    out = subprocess.run(
        [sys.executable, "-m", "gputui", "run", "--", sys.executable, str(EXAMPLES / "train.py"),
         "--steps", "20", "--every", "10"],
        env=env, capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "step     20" in out.stdout
    assert "with the probe armed: it starts in each Python process" in out.stderr
    assert "gputui: probe started in pid " in out.stderr
    assert not list(Path(env["GPUTUI_PROBE_DIR"]).iterdir())  # socket removed on exit


def test_gputui_run_serves_while_running_and_forwards_sigterm(env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "run", "--", sys.executable, str(EXAMPLES / "train.py"),
         "--every", "10"],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    try:
        banner = proc.stderr.readline()
        pid = int(banner.split("(pid ")[1].split(")")[0])
        assert "step" in proc.stdout.readline()  # ten steps done
        wait_for_socket(pid, env)
        report = client.fetch_report(pid, timeout=10, environ=env)
        assert len(report.steps) >= 10
        assert report.command[0].endswith("train.py")
        assert report.devices[0].categories.parameters == PARAMS
        assert client.request(pid, "hello", timeout=10, environ=env)["via"] == "run"
        proc.send_signal(signal.SIGTERM)  # gputui run passes it on to the training job
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert client.find_socket(pid, env) is None  # killed by a signal: gputui run cleaned up


def test_forked_dataloader_workers_do_not_serve(env):
    code = """
        import json, os, torch
        import gputui.probe
        from gputui.link import client
        from gputui.probe import runtime

        class Where(torch.utils.data.Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                probe = runtime.current()
                serving = probe.server is not None and probe.server.serving
                return torch.tensor([os.getpid(), int(serving),
                                     int(client.find_socket(os.getpid()) is not None)])

        probe = gputui.probe.start()
        loader = torch.utils.data.DataLoader(Where(), batch_size=1, num_workers=2,
                                             multiprocessing_context="fork")
        rows = [batch[0].tolist() for batch in loader]
        del loader
        print(json.dumps({"parent": os.getpid(), "rows": rows,
                          "parent_socket": probe.server.path.exists(),
                          "parent_serving": probe.server.serving}), flush=True)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    worker_pids = {row[0] for row in result["rows"]}
    assert len(result["rows"]) == 4 and result["parent"] not in worker_pids
    assert all(row[1:] == [0, 0] for row in result["rows"])  # no server, no socket in workers
    assert result["parent_socket"] and result["parent_serving"]  # workers left the parent's alone


def test_helper_processes_are_recognised():
    assert hook.is_helper_process(["-c", "--multiprocessing-fork"])
    assert hook.is_helper_process(["/usr/bin/torchrun", "--nproc-per-node", "8", "train.py"])
    assert not hook.is_helper_process(["train.py", "--epochs", "3"])


@pytest.mark.parametrize("torch_first", [True, False])
def test_the_injected_script_starts_the_probe(env, tmp_path, torch_first):
    script = tmp_path / "inject.py"
    script.write_text(attach.injection_script(str(ROOT)))
    env = {**env, "PYTHONPATH": str(EXAMPLES)}  # the script must find gputui by itself
    start = f"exec(open({str(script)!r}).read())"
    code = ("import torch\n" + start) if torch_first else (start + "\nimport torch")
    proc = spawn(textwrap.dedent(TRAIN_AND_WAIT).format(start=code), env)
    info = first_json_line(proc)
    assert info["via"] == "attach"
    check_live_report(info["pid"], env, via="attach")
    finish(proc)


def test_pth_build_step_is_a_setuptools_command(tmp_path):
    build_py = pytest.importorskip("setuptools.command.build_py").build_py
    assert issubclass(pth.BuildPy, build_py)
    # site.py executes only .pth lines that start with "import", one line each.
    written = Path(pth.write_pth(tmp_path)).read_text()
    assert written == pth.PTH_LINE and written.startswith("import ") and written.count("\n") == 1
