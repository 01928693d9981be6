"""gputui attach/detach for real: this machine's gdb, real jobs on each CPython found here.

A torch job that never imported gputui is attached mid-run, reports exact bytes, is detached and
attached again, and ends with its unattached twin's loss, bit for bit. Jobs on the other Pythons
(no torch there) show the injection, arming and disarming. Skipped where gdb or ptrace is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import gputui
from gputui.launch import preflight

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(gputui.__file__).resolve().parents[1]  # the gputui under test: the checkout's or the wheel's
JOB = Path(__file__).parents[1] / "attach_job.py"
DDP_PARAMETER_BYTES = (64 * 128 + 128 + 128 * 10 + 10) * 4  # tests/ddp_job.py's model
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _ptrace_works() -> str | None:
    """Why attaching cannot be tested here, or None."""
    if shutil.which("gdb") is None:
        return "no gdb on the PATH (CI installs it)"
    try:
        preflight.check_ptrace_policy(preflight._ptrace_scope(Path("/proc")), preflight.has_cap_sys_ptrace())
    except preflight.Refused as exc:
        return f"ptrace is not allowed here: {exc}"
    return None


needs_gdb = pytest.mark.skipif(_ptrace_works() is not None, reason=str(_ptrace_works()))


def pythons() -> list[str]:
    """This interpreter (in CI's minimums run, a 3.10) and every CPython 3.10+ that pyenv has here."""
    found = {sys.version_info[:2]: sys.executable}
    for exe in sorted(PYENV.glob("3.*/bin/python3.*")):
        name = exe.name.removeprefix("python")
        if exe.name.endswith("-config") or not name.replace(".", "").isdigit():
            continue
        version = tuple(int(n) for n in name.split("."))
        if version >= (3, 10):
            found.setdefault(version[:2], str(exe))
    return [found[v] for v in sorted(found)]


def torch_python() -> str:
    """A Python here with torch (this one where it has it: in CI's minimums run, gputui runs on 3.10
    without torch and attaches to a job on another Python)."""
    for python in [sys.executable, *pythons()]:
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
            return python
    pytest.skip("no Python here has torch")


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    environ = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE", "PYTHONPATH")}
    environ.update(GPUTUI_PROBE_DIR=str(probe_dir), OMP_NUM_THREADS="1")
    return environ


def gputui(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The gputui CLI under test (the job itself has no gputui on its path)."""
    return subprocess.run([sys.executable, "-m", "gputui", *args], env={**env, "PYTHONPATH": str(HOME)},
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def read_json(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the job said nothing; stderr:\n{proc.stderr.read()}")
    return json.loads(line)


def wait_gone(path: Path, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


# -- a torch job: exact bytes, detach, attach again, the twin's loss --------------------------------


@needs_gdb
@pytest.mark.parametrize("kind", ["plain", "loader", "compile"])
def test_attach_a_torch_job_detach_and_attach_again_and_it_ends_as_its_twin(env, tmp_path, kind):
    """plain: a loop over slices; loader: attached while a DataLoader's forked workers are alive (and
    forking new ones at each epoch); compile: a torch.compile'd model."""
    python = torch_python()
    from gputui.link import client

    env = {**env, "ATTACH_JOB": kind}
    holds = tmp_path / "holds"
    holds.mkdir()
    (holds / "1").touch()
    (holds / "2").touch()
    counts = ["20", "10", "10"]
    twin = subprocess.Popen([python, str(JOB), str(tmp_path / "none"), *counts], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = subprocess.Popen([python, str(JOB), str(holds), *counts], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        truth = read_json(job)  # holding after 20 steps, gputui never imported
        pid = job.pid
        out = gputui(env, "attach", str(pid))
        assert out.returncode == 0, out.stderr
        assert f"probe started in process {pid}" in out.stdout
        (holds / "1").unlink()
        truth = read_json(job)  # holding after 30 steps, 10 of them probed
        report = client.fetch_report(pid, timeout=10, environ=env)
        (device,) = report.devices
        assert (device.categories.parameters, device.categories.gradients, device.categories.optimizer_state) \
            == (truth["parameters"], truth["gradients"], truth["optimizer_state"]) == (38440, 38440, 76896)
        socket = client.find_socket(pid, env)
        assert socket is not None and [s.step for s in report.steps][-1] == 10
        assert [p.name for p in Path(env["GPUTUI_PROBE_DIR"]).iterdir()] == [f"{pid}.sock"]  # no worker serves

        out = gputui(env, "detach", str(pid))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"probe stopped in process {pid}")
        assert wait_gone(socket) and client.find_socket(pid, env) is None

        out = gputui(env, "attach", str(pid))  # again, after a detach
        assert out.returncode == 0 and f"probe started in process {pid}" in out.stdout, out.stderr
        assert client.request(pid, "hello", timeout=10, environ=env)["via"] == "attach"
        out = gputui(env, "detach", str(pid))
        assert out.returncode == 0, out.stderr
        (holds / "2").unlink()
        end, twin_end = read_json(job), read_json(twin)
        assert job.wait(timeout=60) == 0 and twin.wait(timeout=60) == 0
        assert end["steps"] == twin_end["steps"] == 40
        assert end["loss"] == twin_end["loss"]  # bit for bit (float.hex)
        assert job.stderr.read() == ""  # nothing said in the job's output
    finally:
        for proc in (job, twin):
            if proc.poll() is None:
                proc.kill()


# -- every CPython here: injection, arming, disarming -----------------------------------------------

TARGET = """
    import os, sys, time
    hold = sys.argv[1]
    names = sorted(globals())
    print(os.getpid(), flush=True)
    total = 0
    while os.path.exists(hold):
        total += 1
        time.sleep(0.005)
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))  # a long C call: queued code waits for it
    print(sorted(set(globals()) - set(names)) == ["names", "total"], "gputui" in sys.modules, flush=True)
"""


def start_target(python: str, env: dict, hold: Path, *args: str) -> subprocess.Popen:
    hold.touch()
    proc = subprocess.Popen([python, "-c", textwrap.dedent(TARGET), str(hold), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    return proc


@needs_gdb
@pytest.mark.parametrize("python", pythons())
def test_attach_arms_and_detach_disarms_on_each_python(python, env, tmp_path):
    target = start_target(python, env, tmp_path / "hold")
    try:
        out = gputui(env, "attach", str(target.pid))
        assert (out.returncode, out.stderr) == (0, "")
        assert out.stdout == f"the probe is armed in process {target.pid}: it starts when the process imports torch\n"
        out = gputui(env, "detach", str(target.pid))
        assert (out.returncode, out.stdout) == (
            0, f"the armed probe in process {target.pid} is removed: it will not start when torch is imported\n")
        out = gputui(env, "detach", str(target.pid))
        assert (out.returncode, out.stderr) == (2, f"gputui: process {target.pid} has no probe to stop\n")
        (tmp_path / "hold").unlink()
        # The job's own names untouched (the code ran in a namespace of its own); gputui's hook stays
        # imported, disarmed.
        assert target.stdout.read() == "True True\n"
        assert target.wait(timeout=30) == 0 and target.stderr.read() == ""
    finally:
        if target.poll() is None:
            target.kill()


@needs_gdb
def test_a_job_in_a_long_c_call_gets_the_code_when_it_runs_python_again(env, tmp_path):
    target = start_target(sys.executable, env, tmp_path / "hold", "8")
    try:
        (tmp_path / "hold").unlink()  # now in time.sleep(8): no Python runs until it returns (a loaded
        # machine may take seconds to start gputui and gdb)
        time.sleep(0.5)
        started = time.monotonic()
        out = gputui(env, "attach", str(target.pid))
        assert out.returncode == 0, out.stderr
        first, second = out.stdout.splitlines()
        assert first.startswith(f"process {target.pid} has not run Python since (a long C call?): the probe's "
                                f"code is queued and runs when it next does")
        assert second.startswith(f"the probe is armed in process {target.pid}")
        assert time.monotonic() - started > 2
        assert target.wait(timeout=30) == 0
    finally:
        if target.poll() is None:
            target.kill()


@needs_gdb
def test_a_killed_gputui_leaves_the_job_running(env, tmp_path):
    target = start_target(sys.executable, env, tmp_path / "hold")
    tmp = tmp_path / "tmp"  # gputui's temp directory
    tmp.mkdir()
    try:
        attach = subprocess.Popen([sys.executable, "-m", "gputui", "attach", str(target.pid)],
                                  env={**env, "PYTHONPATH": str(HOME), "TMPDIR": str(tmp)},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not _traced(target.pid) and time.monotonic() < deadline and attach.poll() is None:
            time.sleep(0.005)
        attach.send_signal(signal.SIGKILL)  # gputui dies while gdb holds the job (or just after)
        attach.wait()
        deadline = time.monotonic() + 30  # gdb finishes on its own and lets go
        while _traced(target.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _traced(target.pid)
        assert _state(target.pid) not in ("T", "t")
        # SIGKILL runs no clean-up: the attach's folder may stay (root's, the job's answer in it), but
        # gdb's script never was a file
        assert [p.name for p in tmp.iterdir() if not p.name.startswith("gputui-attach-")] == []
        (tmp_path / "hold").unlink()
        assert target.wait(timeout=30) == 0  # ran on, and ended as usual
    finally:
        if target.poll() is None:
            target.kill()


def _has_socket(pid: int) -> bool:
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith("socket:"):
                return True
        except OSError:
            continue
    return False


def _traced(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return line.split()[1] != "0"
    return False


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# -- refusals: one line each, before anything touches the job ---------------------------------------


@pytest.mark.parametrize("command", ["attach", "detach"])
def test_a_process_that_is_not_python_is_refused(env, command):
    # Each command names itself (issue 47 item 4: detach said "gputui attach works on ...").
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        out = gputui(env, command, str(sleeper.pid))
        assert out.returncode == 2
        assert out.stderr == (f"gputui: process {sleeper.pid} (sleep) is not a Python process: gputui {command} "
                              f"works on CPython 3.10 or newer\n")
    finally:
        sleeper.kill()


def test_no_gdb_says_how_to_install_it(env, tmp_path):
    target = start_target(sys.executable, env, tmp_path / "hold")
    try:
        out = gputui({**env, "PATH": str(tmp_path)}, "attach", str(target.pid))  # no gdb on this PATH
        assert out.returncode == 2 and out.stderr.count("\n") == 1
        assert out.stderr.startswith(f"gputui: gputui attach needs gdb to reach a Python "
                                     f"{sys.version_info[0]}.{sys.version_info[1]} process, and there is none on "
                                     f"the PATH (nor CUDA's cuda-gdb-minimal): install gdb (`apt-get install gdb`")
    finally:
        (tmp_path / "hold").unlink()
        target.wait(timeout=30)


def test_no_such_process(env):
    out = gputui(env, "detach", "4194303")
    assert (out.returncode, out.stderr) == (2, "gputui: no process 4194303\n")


def fake_proc(root: Path, *, exe: str = "/usr/bin/python3.12", uid: int = 0, tracer: int = 0,
              cap_eff: str = "000001ffffffffff", scope: str | None = None, maps: str = "",
              state: str = "S (sleeping)") -> Path:
    """A /proc with process 4242 in it, as preflight reads it; its executable ``exe`` a file under
    ROOT/files (the link's name ends as ``exe`` does)."""
    (root / "4242").mkdir(parents=True)
    (root / "4242" / "status").write_text(f"Name:\tpython3\nState:\t{state}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                          f"TracerPid:\t{tracer}\n")
    (root / "4242" / "stat").write_text(f"4242 (python3) {state[0]} 1 4242 4242 0 -1 4194560 1 0 0 0 5 2 0 0 20 0 "
                                        f"1 0 7331 12345678 2048\n")  # field 22: started 7331 ticks after boot
    (root / "4242" / "comm").write_text("python3\n")
    (root / "4242" / "maps").write_text(maps)
    program = root / "files" / exe.lstrip("/")
    program.parent.mkdir(parents=True)
    program.touch()
    os.symlink(program, root / "4242" / "exe")
    (root / "self").mkdir()
    (root / "self" / "status").write_text(f"CapEff:\t{cap_eff}\n")
    if scope is not None:
        (root / "sys" / "kernel" / "yama").mkdir(parents=True)
        (root / "sys" / "kernel" / "yama" / "ptrace_scope").write_text(scope + "\n")
    (root / "1").mkdir()
    (root / "1" / "comm").write_text("gdb\n")
    return root


def gdb_here(name: str) -> str:
    return "/usr/bin/gdb"


def test_gdb_first_then_cuda_gdb_minimal_on_the_path_then_in_the_cuda_toolkit(tmp_path, monkeypatch):
    """NVIDIA's CUDA images have cuda-gdb and no gdb: its minimal build runs the attach script (H200, CUDA 13)."""
    on_path = {"gdb": "/usr/bin/gdb", "cuda-gdb-minimal": "/opt/cuda/bin/cuda-gdb-minimal"}
    assert preflight.find_gdb(on_path.get, {}) == "/usr/bin/gdb"
    assert preflight.find_gdb({"cuda-gdb-minimal": "/opt/cuda/bin/cuda-gdb-minimal"}.get, {}) \
        == "/opt/cuda/bin/cuda-gdb-minimal"
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "cuda-gdb").write_text("#!/bin/sh\n")  # (the wrapper alone is not taken)
    (toolkit / "bin" / "cuda-gdb").chmod(0o755)
    monkeypatch.setattr(preflight, "CUDA_DEFAULT", str(tmp_path / "no-cuda"))
    assert preflight.find_gdb(lambda name: None, {"CUDA_HOME": str(toolkit)}) is None
    (toolkit / "bin" / "cuda-gdb-minimal").write_text("#!/bin/sh\n")
    assert preflight.find_gdb(lambda name: None, {"CUDA_HOME": str(toolkit)}) is None  # (not executable)
    (toolkit / "bin" / "cuda-gdb-minimal").chmod(0o755)
    minimal = str(toolkit / "bin" / "cuda-gdb-minimal")
    assert preflight.find_gdb(lambda name: None, {"CUDA_PATH": str(toolkit)}) == minimal
    monkeypatch.setattr(preflight, "CUDA_DEFAULT", str(toolkit))
    assert preflight.find_gdb(lambda name: None, {}) == minimal


def refusal(tmp_path, **kwargs) -> str:
    with pytest.raises(preflight.Refused) as caught:
        preflight.check(4242, proc=fake_proc(tmp_path / "proc", **kwargs), which=gdb_here)
    message = str(caught.value)
    assert "\n" not in message
    return message


NO_CAP = "0000000000000000"


@pytest.mark.parametrize("scope, expected", [
    ("1", "the kernel lets a process be traced only by its parent (kernel.yama.ptrace_scope = 1): run gputui "
          "attach as root (sudo), or allow it with `sudo sysctl kernel.yama.ptrace_scope=0` (in a container: "
          "--cap-add=SYS_PTRACE)"),
    ("2", "the kernel lets only root attach to a process (kernel.yama.ptrace_scope = 2): run gputui attach as "
          "root (sudo), with CAP_SYS_PTRACE (in a container: --cap-add=SYS_PTRACE)"),
    ("3", "the kernel forbids attaching to any process (kernel.yama.ptrace_scope = 3, fixed until reboot): start "
          "the job under the probe instead: `gputui run -- python train.py`, `GPUTUI_PROBE=1 python train.py`, "
          "or `import gputui.probe; gputui.probe.start()` in the script"),
])
def test_a_ptrace_policy_that_forbids_it(tmp_path, scope, expected):
    assert refusal(tmp_path, uid=os.geteuid(), cap_eff=NO_CAP, scope=scope) == expected


def test_ptrace_scope_1_is_fine_with_cap_sys_ptrace(tmp_path):
    proc = fake_proc(tmp_path / "proc", scope="1", maps="x /opt/lib/libtorch_cpu.so\n")
    target = preflight.check(4242, proc=proc, which=gdb_here)
    assert (target.version, target.method, target.debugger, target.torch_loaded) == ((3, 12), "gdb", "/usr/bin/gdb",
                                                                                     True)
    program = os.stat(proc / "files" / "usr" / "bin" / "python3.12")
    assert (target.started, target.program) == (7331, (program.st_dev, program.st_ino))


def test_another_users_process(tmp_path):
    assert refusal(tmp_path, uid=os.geteuid() + 4321, cap_eff=NO_CAP) == (
        f"process 4242 belongs to user {os.geteuid() + 4321}: run gputui attach as that user (or as root)")


def test_a_process_under_another_debugger(tmp_path):
    assert refusal(tmp_path, tracer=1) == ("process 4242 is already traced by process 1 (gdb), a debugger or "
                                           "profiler: detach that first")


def test_a_stopped_job_is_not_woken(tmp_path):
    assert refusal(tmp_path, state="T (stopped)") == ("process 4242 is stopped (Ctrl-Z or SIGSTOP) and would run "
                                                      "nothing: continue it first (`fg`, or `kill -CONT 4242`)")


def test_a_free_threaded_build(tmp_path):
    assert refusal(tmp_path, exe="/usr/bin/python3.13t").startswith(
        "process 4242 runs a free-threaded CPython 3.13t build, which the probe does not support: start the job")


def test_pypy_is_named(tmp_path):
    assert refusal(tmp_path, exe="/opt/pypy3.10/bin/pypy3.10") == (
        "process 4242 (python3) runs PyPy: gputui attach works on CPython 3.10 or newer")


def test_detach_names_itself_in_its_refusals(tmp_path):
    with pytest.raises(preflight.Refused) as caught:
        preflight.check(4242, command="detach", proc=fake_proc(tmp_path / "proc", uid=os.geteuid() + 4321,
                                                              cap_eff=NO_CAP), which=gdb_here)
    assert str(caught.value) == (f"process 4242 belongs to user {os.geteuid() + 4321}: run gputui detach as that "
                                 f"user (or as root)")


def test_a_python_older_than_the_probe(tmp_path):
    assert refusal(tmp_path, exe="/usr/bin/python3.9") == "process 4242 runs Python 3.9; the probe needs 3.10 or newer"


def test_an_embedded_python_is_found_by_its_libpython(tmp_path):
    proc = fake_proc(tmp_path / "proc", exe="/usr/bin/uwsgi",
                     maps="7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n")
    assert preflight.check(4242, proc=proc, which=gdb_here).version == (3, 11)


def test_the_functions_are_found_where_the_process_has_them():
    """elf.py reads the addresses from the files, before gdb stops the job: they must be those the
    dynamic linker gave this very process."""
    import ctypes

    from gputui.launch import elf, inject

    where = inject.symbols(os.getpid())
    address = {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
               for name in ("Py_AddPendingCall", "PyRun_SimpleString")}
    address["mmap"] = ctypes.cast(ctypes.CDLL(None).mmap, ctypes.c_void_p).value
    assert {name: function.address for name, function in where.items()} == address
    # The code read from the files is the code in memory: what gdb checks before each call.
    assert {name: function.code for name, function in where.items()} == {
        name: ctypes.string_at(at, elf.CODE_BYTES) for name, at in address.items()}


def test_a_program_without_the_symbols_says_so():
    from gputui.launch import inject

    sleeper = subprocess.Popen(["sleep", "60"])
    while "libc" not in Path(f"/proc/{sleeper.pid}/maps").read_text():  # (until its exec is done)
        time.sleep(0.01)
    try:
        with pytest.raises(preflight.Refused) as caught:
            inject.symbols(sleeper.pid)
        assert str(caught.value) == (f"process {sleeper.pid}'s Python exports no PyRun_SimpleString, "
                                     f"Py_AddPendingCall (a statically linked build without its symbols?): "
                                     f"gputui attach cannot reach it")
    finally:
        sleeper.kill()


@needs_gdb
def test_gdb_without_permission_says_so():
    from gputui.launch import inject

    me = preflight.check(os.getpid())  # (a process that runs on: the refusal is ptrace's own)
    with pytest.raises(preflight.Refused, match=r"in a container, run it with --cap-add=SYS_PTRACE"):
        inject._check_gdb_output(me, "ptrace: Operation not permitted.\n")


@needs_gdb
def test_the_ranks_of_a_torchrun_job_are_attached_and_detached_and_it_ends_well(env, tmp_path):
    """torch.distributed (2 gloo ranks under torchrun, no gputui anywhere): each rank attached, its exact
    bytes, detached; the launcher itself is refused (it trains nothing); the job ends as usual."""
    python = torch_python()
    import psutil

    from gputui.link import client

    stop = tmp_path / "stop"
    job = subprocess.Popen([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                            str(Path(__file__).parents[1] / "ddp_job.py"), str(stop)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while len(ranks) < 2 and time.monotonic() < deadline:
            ranks = [p.pid for p in psutil.Process(job.pid).children()
                     if "torch.distributed.run" not in " ".join(p.cmdline())]
            time.sleep(0.2)
        # torch imported (attached mid-import, a rank has torch in sys.modules and no probe yet) once
        # each rank reaches the rendezvous (its TCP connection); on a loaded machine that takes a while.
        while not all(_has_socket(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # training under way
        out = gputui(env, "attach", str(job.pid))
        assert out.returncode == 2 and out.stderr.startswith(
            f"gputui: the probe did not start in process {job.pid}: a launcher (torchrun, deepspeed) trains nothing")
        for pid in ranks:
            out = gputui(env, "attach", str(pid))
            assert out.returncode == 0 and f"probe started in process {pid}" in out.stdout, out.stderr
        for pid in ranks:
            deadline = time.monotonic() + 60
            while True:
                (device,) = client.fetch_report(pid, timeout=10, environ=env).devices
                if device.categories.gradients or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert (device.categories.parameters, device.categories.gradients, device.categories.optimizer_state) \
                == (DDP_PARAMETER_BYTES,) * 3  # (SGD's momentum: the parameters' bytes again)
            out = gputui(env, "detach", str(pid))
            assert out.returncode == 0, out.stderr
        assert not list(Path(env["GPUTUI_PROBE_DIR"]).iterdir())
        stop.touch()
        assert job.wait(timeout=120) == 0, job.communicate()
    finally:
        if job.poll() is None:
            job.kill()
