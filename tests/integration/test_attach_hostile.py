"""Root's `gputui attach` against a job that another, hostile user controls (issue 44).

Each target is a real Python process of user "nobody" (tests/attach_hostile_target.py), reached by
this machine's gdb: it links the result gputui reads to a root-only file, leaves FIFOs where its
memory map names a file, maps a crafted ELF, runs a setuid-root program or exits the moment gdb
appears. Root's gputui must read nothing it should not, never block, stay cheap, call nothing in a
process that is no longer the one chosen, leave nothing behind when it is stopped, and say so in
one line.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_attach import HOME, ROOT, needs_gdb, pythons

from gputui.launch import attach as attach_module
from gputui.launch import elf, preflight

pytestmark = [pytest.mark.slow, needs_gdb,
              pytest.mark.skipif(os.geteuid() != 0, reason="a job of another user needs root")]

NOBODY = 65534
TARGET = Path(__file__).parents[1] / "attach_hostile_target.py"


@functools.cache
def nobody_python() -> str | None:
    """A CPython 3.10+ that user nobody may run (pyenv's live under /root, which it cannot enter)."""
    for python in [shutil.which("python3"), "/usr/bin/python3", *pythons()]:
        try:
            if python and subprocess.run([python, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                                         user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True,
                                         cwd="/").returncode == 0:
                return python
        except OSError:  # (a folder on the way that nobody may not enter)
            continue
    return None


@pytest.fixture
def shared_tmp():
    """A temp directory like /tmp (anyone may make their own entries): gputui's and the job's TMPDIR,
    so what gputui leaves behind is seen there alone."""
    folder = Path(tempfile.mkdtemp(prefix="gputui-hostile-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def env(shared_tmp):
    environ = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE", "PYTHONPATH")}
    environ.update(TMPDIR=str(shared_tmp), OMP_NUM_THREADS="1")
    return environ


def start_hostile(env: dict, mode: str, *args: str) -> subprocess.Popen:
    """The hostile job, as user nobody; its pid is the Popen's."""
    python = nobody_python()
    if python is None:
        pytest.skip("no Python here that user nobody may run")
    job = subprocess.Popen([python, str(TARGET), mode, *args], env=env, user=NOBODY, group=NOBODY,
                           extra_groups=[], cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == str(job.pid), job.stderr.read()
    return job


def gputui(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputui", *args], env={**env, "PYTHONPATH": str(HOME)},
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start_gputui(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gputui", *args], env={**env, "PYTHONPATH": str(HOME)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def armed(pid: int) -> str:
    return f"the probe is armed in process {pid}: it starts when the process imports torch\n"


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def runs_on(pid: int) -> bool:
    """Whether ``pid`` runs, neither stopped nor traced (gdb let go of it), within a few seconds."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = status_of(pid)
        if status["TracerPid"] == "0" and status["State"][0] not in "TtZ":
            return True
        time.sleep(0.05)
    return False


def stop(job: subprocess.Popen) -> None:
    if job.poll() is None:
        job.kill()
    job.wait(timeout=10)


# -- 1. what the job reports is read from root's own file -------------------------------------------


def test_the_job_cannot_have_root_read_a_file_through_its_result(env, tmp_path):
    """The job links the result file gputui reads to a root-only file: gputui never reads through it."""
    secret = tmp_path / "secret"  # (tmp_path: a folder of root's that nobody may enter)
    secret.write_text("TOPSECRET-4181\nsecond line\n")
    secret.chmod(0o600)
    job = start_hostile(env, "symlink", str(secret))
    try:
        out = gputui(env, "attach", str(job.pid))
        assert "TOPSECRET" not in out.stdout + out.stderr
        assert (out.returncode, out.stdout, out.stderr) == (0, armed(job.pid), "")
        assert not list(Path(env["TMPDIR"]).iterdir())  # the attach's folder is gone
    finally:
        stop(job)


# -- 2. no open of what the job names blocks ---------------------------------------------------------


def test_fifos_where_the_jobs_map_names_a_file_block_nothing(env):
    """The job maps a file named like libpython, deletes it and leaves FIFOs at both of the names its
    map shows: gputui reads the mapped file itself, never the FIFOs, and attaches."""
    job = start_hostile(env, "fifo")
    try:
        maps = Path(f"/proc/{job.pid}/maps").read_text()
        assert "libpython" in maps and " (deleted)" in maps
        out = gputui(env, "attach", str(job.pid), timeout=40)
        assert (out.returncode, out.stdout, out.stderr) == (0, armed(job.pid), "")
    finally:
        stop(job)


def test_the_unprivileged_reader_skips_a_fifo_at_a_mapped_name(env, shared_tmp):
    """Without the right to open /proc/PID/map_files (a user attaching to their own job), the files
    are opened by their names: a FIFO there is skipped, without blocking, and the real ones read."""
    python = nobody_python()
    if python is None:
        pytest.skip("no Python here that user nobody may run")
    fifo = shared_tmp / "libpython3.99.so.1.0"
    os.mkfifo(fifo)
    code = ("import ctypes, os\n"
            "from gputui.launch import elf\n"
            f"maps = '7f0000000000-7f0000001000 r--p 00000000 00:00 1 {fifo}\\n'\n"
            "maps += open('/proc/self/maps').read()\n"
            "found = elf.addresses(os.getpid(), maps, {'PyRun_SimpleString': ('libpython', 'python')})\n"
            "print(found['PyRun_SimpleString'].address == "
            "ctypes.cast(ctypes.pythonapi.PyRun_SimpleString, ctypes.c_void_p).value)\n")
    # nobody's own copy of the gputui under test: the wheel's venv may sit in a folder only root may enter
    readable = shared_tmp / "readable"
    shutil.copytree(HOME / "gputui", readable / "gputui", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([python, "-c", code], env={**env, "PYTHONPATH": str(readable)}, user=NOBODY, group=NOBODY,
                         extra_groups=[], cwd="/", capture_output=True, text=True, timeout=20)
    assert (out.returncode, out.stdout) == (0, "True\n"), out.stderr


def test_the_whole_attach_is_bounded_in_time(tmp_path):
    """What gputui attach does is bounded: past the limit, even an open() that would block for good
    ends, with one line."""
    from gputui.launch import bounds

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(preflight.Refused) as caught:
        with bounds.bounded(1.0, "gputui attach 77"):
            os.open(fifo, os.O_RDONLY)  # no writer: blocks
    assert 0.9 < time.monotonic() - started < 5
    assert str(caught.value) == "gputui attach 77 did not finish within 1 s: the job was let go and runs on"


# -- 3. the ELF reader is bounded -------------------------------------------------------------------


def test_a_crafted_elf_costs_gputui_little(env):
    """The job maps a crafted ELF named like libpython (65,535 section headers over a sparse 64 MiB
    symbol table): gputui skips it in a moment and attaches through the real interpreter, at the cost of
    attaching to a plain job (measured in the same run: gdb's own share differs from machine to machine,
    55 MiB on one, 590 MiB on another). Before the reader was bounded: 2.7-33 CPU s and +100-170 MiB."""
    costs = {}
    for mode in ("plain", "crafted"):
        job = start_hostile(env, mode)
        try:
            out, cpu, peak_mib = measured(env, "attach", str(job.pid))
            assert (out.returncode, out.stdout, out.stderr) == (0, armed(job.pid), "")
            costs[mode] = cpu, peak_mib
        finally:
            stop(job)
    (plain_cpu, plain_mib), (cpu, peak_mib) = costs["plain"], costs["crafted"]
    assert cpu < plain_cpu + 2 and peak_mib < plain_mib + 40, costs


def measured(env: dict, *args: str, limit: float = 60) -> tuple[subprocess.CompletedProcess, float, float]:
    """gputui's answer, the CPU seconds it used and its peak RSS (MiB)."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "gputui", *args], env={**env, "PYTHONPATH": str(HOME)},
                                stdout=stdout, stderr=stderr, text=True, cwd=ROOT)
        deadline = time.monotonic() + limit
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(f"gputui {' '.join(args)} ran past {limit} s")
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout.read(), stderr.read())
    return done, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def test_the_elf_reader_refuses_a_crafted_file_at_once(tmp_path):
    """Read directly: the crafted file is refused in milliseconds, with a few KiB read."""
    sys.path.insert(0, str(TARGET.parent))
    from attach_hostile_target import crafted_elf

    path = tmp_path / "libpython3.11.so.1.0"
    crafted_elf(str(path))
    started, before = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(elf.NotFound, match="65535 section headers"):
            elf.exported(fd, {"Py_AddPendingCall"})
    finally:
        os.close(fd)
    assert time.process_time() - started < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 8 << 10  # KiB


# -- 4. nothing is called in a process that is no longer the Python chosen -------------------------


@pytest.fixture
def setuid_sleep():
    """A setuid-root copy of sleep, where user nobody may run it."""
    folder = Path(tempfile.mkdtemp(prefix="gputui-setuid-"))
    folder.chmod(0o755)
    program = folder / "sleep"
    shutil.copy(shutil.which("sleep"), program)
    os.chown(program, 0, 0)
    program.chmod(0o4755)
    yield str(program)
    shutil.rmtree(folder)


def test_a_job_that_runs_a_setuid_program_when_gdb_appears_gets_no_call(env, setuid_sleep):
    """The job runs a setuid-root program the moment gdb appears: the pid is then a root process.
    gputui sees that what it stopped is not the Python it chose (its functions' code is not where it
    was; its executable changed), calls nothing in it, lets it go and says so."""
    job = start_hostile(env, "exec", setuid_sleep)
    try:
        out = gputui(env, "attach", str(job.pid))
        assert os.readlink(f"/proc/{job.pid}/exe") == setuid_sleep  # it did run it, as root
        assert status_of(job.pid)["Uid"].split()[:2] == [str(NOBODY), "0"]
        assert (out.returncode, out.stdout) == (2, "")
        assert out.stderr == (f"gputui: process {job.pid} now runs another program ({setuid_sleep}), not the "
                              f"Python chosen: gputui ran nothing in it\n")
        assert runs_on(job.pid)
    finally:
        stop(job)


def test_the_gdb_script_calls_nothing_where_the_code_differs(env):
    """The check itself, on a real job: told to expect other bytes at the functions (as after an
    exec), gdb calls nothing (no page mapped, nothing queued) and gputui says the process changed."""
    from gputui.launch import inject

    job = start_hostile(env, "plain")
    try:
        target = preflight.check(job.pid)
        where = inject.symbols(job.pid)
        changed = {name: elf.Function(f.address, bytes(b ^ 0xFF for b in f.code)) for name, f in where.items()}
        before = Path(f"/proc/{job.pid}/maps").read_text()
        with pytest.raises(preflight.Refused) as caught:
            inject.run_gdb(target, inject.gdb_script("open('/tmp/never', 'w')", changed))
        assert str(caught.value) == (f"process {job.pid} changed as gdb stopped it (its functions are not the "
                                     f"ones read before): gputui ran nothing in it")
        assert Path(f"/proc/{job.pid}/maps").read_text() == before  # no page mapped
        assert runs_on(job.pid)
    finally:
        stop(job)


# -- 5. every exit path cleans up; an exit is named ---------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("when", ["gdb", "waiting"])
def test_a_stopped_attach_leaves_nothing_behind(env, signum, when):
    """gputui stopped by a signal while gdb holds the job, or while it waits for a job busy outside
    Python: nothing left in the temp directory, the job let go, one line said."""
    job = start_hostile(env, "plain", "20" if when == "waiting" else "0")
    try:
        attach = start_gputui(env, "attach", str(job.pid))
        if when == "waiting":
            assert attach.stdout.readline().startswith(f"process {job.pid} has not run Python since")
        else:
            deadline = time.monotonic() + 30
            while status_of(job.pid)["TracerPid"] == "0" and time.monotonic() < deadline:
                time.sleep(0.001)
            assert status_of(job.pid)["TracerPid"] != "0"
        attach.send_signal(signum)
        _, err = attach.communicate(timeout=30)
        name = signal.Signals(signum).name
        assert (attach.returncode, err) == (128 + signum, f"gputui: gputui attach {job.pid} stopped by {name}: "
                                                          f"the job was let go and runs on\n")
        assert not list(Path(env["TMPDIR"]).iterdir())
        assert runs_on(job.pid)
    finally:
        stop(job)


def test_what_a_killed_attach_left_is_swept_by_the_next_and_nothing_of_anyone_else(env):
    """SIGKILL skips every clean-up: the answer folder stays. The next attach removes folders of its own user
    older than STALE_AFTER, and leaves alone a fresh one (an attach under way), another user's, and a link."""
    tmp = Path(env["TMPDIR"])
    job = start_hostile(env, "plain", "20")
    try:
        attach = start_gputui(env, "attach", str(job.pid))
        assert attach.stdout.readline().startswith(f"process {job.pid} has not run Python since")
        attach.kill()
        attach.communicate(timeout=30)
    finally:
        stop(job)
    [left] = list(tmp.iterdir())
    assert left.name.startswith(attach_module.ANSWER_PREFIX) and left.stat().st_uid == 0
    old = time.time() - attach_module.STALE_AFTER - 60
    os.utime(left, (old, old))
    fresh = tmp / (attach_module.ANSWER_PREFIX + "under-way")
    fresh.mkdir(mode=0o711)
    theirs = tmp / (attach_module.ANSWER_PREFIX + "theirs")
    theirs.mkdir()
    (theirs / "result").write_text("kept")
    os.chown(theirs, NOBODY, NOBODY)
    secret = tmp / "secret"
    secret.mkdir()
    (secret / "file").write_text("kept")
    link = tmp / (attach_module.ANSWER_PREFIX + "link")
    link.symlink_to(secret)
    for path in (theirs, link, secret):
        os.utime(path, (old, old), follow_symlinks=False)
    job = start_hostile(env, "plain")
    try:
        out = gputui(env, "attach", str(job.pid))
        assert (out.returncode, out.stderr) == (0, ""), out.stderr
    finally:
        stop(job)
    assert sorted(p.name for p in tmp.iterdir()) == sorted([fresh.name, theirs.name, link.name, secret.name])
    assert (theirs / "result").read_text() == "kept" and (secret / "file").read_text() == "kept"


def test_a_job_that_exits_as_gdb_appears_is_said_to_have_exited(env):
    job = start_hostile(env, "exit")  # (a zombie once it exits: this test reaps it last)
    try:
        out = gputui(env, "attach", str(job.pid))
        assert (out.returncode, out.stdout, out.stderr) == (
            2, "", f"gputui: process {job.pid} exited as gputui reached it: nothing was done in it\n")
        assert not list(Path(env["TMPDIR"]).iterdir())
    finally:
        stop(job)
