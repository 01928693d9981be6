"""psutil enrichment of GPU processes: CPU % between samples, gone/denied/zombie, parents.

A small psutil stand-in (with the real psutil exceptions) keeps these tests exact and independent of
the simulator; the collector's tests run the same code against the simulator's psutil.
"""

import contextlib
from types import SimpleNamespace

import psutil
import pytest

from gputui.collect.processes import (
    NOTE_DENIED,
    NOTE_GONE,
    NOTE_HIDDEN,
    NOTE_ZOMBIE,
    ProcessDetails,
    ProcessInspector,
)
from gputui.model import HostProcess


class FakeProcess:
    def __init__(self, world, pid):
        self.world, self.pid = world, pid
        self.info = world.table[pid]

    def _get(self, key):
        if self.pid not in self.world.table:
            raise psutil.NoSuchProcess(self.pid)
        if key in self.info.get("denied", ()):
            raise psutil.AccessDenied(self.pid)
        if self.info.get("zombie") and key == "cmdline":
            raise psutil.ZombieProcess(self.pid)
        self.world.reads += 1
        return self.info[key]

    @contextlib.contextmanager
    def oneshot(self):
        yield

    def name(self):
        return self._get("name")

    def cmdline(self):
        return self._get("cmdline")

    def username(self):
        return self._get("username")

    def ppid(self):
        return self._get("ppid")

    def create_time(self):
        return self._get("create_time")

    def cpu_times(self):
        return SimpleNamespace(user=self._get("cpu"), system=0.5)

    def memory_info(self):
        return SimpleNamespace(rss=self._get("rss"))

    def status(self):
        return psutil.STATUS_ZOMBIE if self.info.get("zombie") else psutil.STATUS_RUNNING


class FakePsutil:
    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied
    ZombieProcess = psutil.ZombieProcess
    STATUS_ZOMBIE = psutil.STATUS_ZOMBIE

    def __init__(self, table):
        self.table = table
        self.constructed = 0
        self.reads = 0

    def Process(self, pid):
        if pid not in self.table:
            raise psutil.NoSuchProcess(pid)
        self.constructed += 1
        return FakeProcess(self, pid)


def entry(name, ppid, cpu, **extra):
    return dict(name=name, cmdline=[name, "--flag"], username="alice", ppid=ppid,
                create_time=1_700_000_000.0 + ppid, cpu=cpu, rss=1 << 30, **extra)


@pytest.fixture
def world():
    return FakePsutil({
        10: entry("bash", 1, 0.0),
        20: entry("torchrun", 10, 0.0),
        100: entry("python", 20, 10.0),
        200: entry("jupyter", 1, 3.0, denied=("cmdline", "username", "cpu", "rss")),
        300: entry("python", 1, 1.0, zombie=True),
    })


def test_first_sample_has_no_cpu_percent_then_measures_between_samples(world):
    now = [50.0]
    inspector = ProcessInspector(world, lambda: now[0])
    first = inspector.inspect([100])[100]
    assert first == ProcessDetails(
        state="ok", name="python", command=("python", "--flag"), user="alice", ppid=20,
        cpu_percent=None, host_memory=1 << 30, started_at=1_700_000_020.0, note=None)
    world.table[100]["cpu"] = 13.0  # 3 s of CPU in 2 s of clock: 150 %
    now[0] = 52.0
    assert inspector.inspect([100])[100].cpu_percent == pytest.approx(150.0)


def test_static_facts_and_process_objects_are_cached(world):
    inspector = ProcessInspector(world, lambda: 1.0)
    inspector.inspect([100])
    reads_first = world.reads
    inspector.inspect([100])
    assert world.constructed == 1
    assert world.reads - reads_first == 2  # only cpu_times and memory_info again


def test_vanished_between_samples_keeps_what_was_known(world):
    now = [0.0]
    inspector = ProcessInspector(world, lambda: now[0])
    inspector.inspect([100])
    del world.table[100]
    now[0] = 1.0
    gone = inspector.inspect([100])[100]
    assert gone.state == "gone" and gone.note == NOTE_GONE
    assert gone.name == "python" and gone.user == "alice" and gone.cpu_percent is None


def test_never_seen_and_already_gone(world):
    gone = ProcessInspector(world, lambda: 0.0).inspect([999])[999]
    assert gone == ProcessDetails(state="gone", note=NOTE_GONE)


def test_denied_lists_what_is_readable(world):
    denied = ProcessInspector(world, lambda: 0.0).inspect([200])[200]
    assert denied == ProcessDetails(
        state="denied", name="jupyter", command=(), user=None, ppid=1, cpu_percent=None,
        host_memory=None, started_at=1_700_000_001.0, note=NOTE_DENIED)


def test_zombie(world):
    zombie = ProcessInspector(world, lambda: 0.0).inspect([300])[300]
    assert zombie.state == "zombie" and zombie.note == NOTE_ZOMBIE
    assert zombie.name == "python" and zombie.command == ()


def test_forgotten_pids_restart_their_cpu_measure(world):
    now = [0.0]
    inspector = ProcessInspector(world, lambda: now[0])
    inspector.inspect([100])
    inspector.inspect([])
    now[0] = 1.0
    assert inspector.inspect([100])[100].cpu_percent is None


def test_parents_walk_up_to_init_and_skip_gpu_processes(world):
    inspector = ProcessInspector(world, lambda: 0.0)
    parents = inspector.parents({20}, exclude={100})
    assert parents == (
        HostProcess(pid=10, ppid=1, name="bash", command=("bash", "--flag"), user="alice"),
        HostProcess(pid=20, ppid=10, name="torchrun", command=("torchrun", "--flag"), user="alice"),
    )
    assert inspector.parents({20}, exclude={20}) == ()
    assert inspector.parents({None, 1}, exclude=set()) == ()


# -- the real psutil, on this machine --------------------------------------------------------------

def test_real_psutil_on_this_process_and_an_exited_child():
    import getpass
    import os
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its PID no longer exists
    inspector = ProcessInspector(psutil, time.monotonic)
    found = inspector.inspect([os.getpid(), child.pid])
    me = found[os.getpid()]
    assert me.state == "ok" and me.note is None
    assert me.user == getpass.getuser()
    assert me.command == tuple(psutil.Process().cmdline())
    assert me.ppid == os.getppid()
    assert me.started_at == psutil.Process().create_time()
    assert me.host_memory > 0 and me.cpu_percent is None
    assert found[child.pid] == ProcessDetails(state="gone", note=NOTE_GONE)
    sum(range(200_000))  # some CPU time for the next reading
    assert inspector.inspect([os.getpid()])[os.getpid()].cpu_percent >= 0.0


def test_real_host_figures():
    from gputui.collect.host import HostReader

    reader = HostReader(psutil, "here")
    first, second = reader.read(), reader.read()
    assert first.hostname == "here" and first.cpu_percent is None
    assert 0.0 <= second.cpu_percent <= 100.0
    assert first.cpu_count == psutil.cpu_count()
    assert first.memory_total == psutil.virtual_memory().total
    assert 0 < first.memory_used <= first.memory_total
    assert len(first.load_average) == 3
    assert first.boot_time == psutil.boot_time()  # the host's uptime is the snapshot's time less this


def test_a_process_proc_hides_is_not_called_gone(world):
    # hidepid=2: another user's process has no /proc entry, yet signal 0 says it exists
    inspector = ProcessInspector(world, lambda: 0.0, exists=lambda pid: pid == 777)
    found = inspector.inspect([777, 999])
    assert found[777] == ProcessDetails(state="denied", note=NOTE_HIDDEN)
    assert found[999] == ProcessDetails(state="gone", note=NOTE_GONE)


def test_pid_exists():
    import os
    import subprocess
    import sys

    from gputui.pids import pid_exists

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert pid_exists(os.getpid()) is True
    assert pid_exists(child.pid) is False


def test_a_real_process_s_huge_command_line_is_bounded_where_it_is_read():
    # A process sets its own argv: 131,000 characters of argv[0] and 5,000 more arguments (issue 44 item 7,
    # command lines too). The collector keeps COMMAND_LIMIT characters of it, the cut said.
    import subprocess
    import time

    from gputui.untrusted import COMMAND_LIMIT

    huge = "x" * 131_000
    child = subprocess.Popen(["/bin/sh", "-c", "sleep 30", huge, *["arg"] * 5000])
    try:
        # Popen returns once the exec has begun; the kernel sets the new argv a moment later (the longer the
        # argv, the longer the moment), and until then /proc/PID/cmdline reads empty.
        deadline = time.monotonic() + 10
        while not psutil.Process(child.pid).cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(psutil.Process(child.pid).cmdline()) == 5004  # as the kernel has it
        inspector = ProcessInspector(psutil, time.monotonic)
        (found,) = inspector.inspect([child.pid]).values()
        assert found.command[:3] == ("/bin/sh", "-c", "sleep 30")
        kept = COMMAND_LIMIT - len("/bin/sh-csleep 30")
        assert found.command[3] == "x" * kept + f"...(cut {131_000 - kept} characters)"
        assert found.command[4:] == ("...(5000 more arguments)",)
        assert sum(map(len, found.command)) < COMMAND_LIMIT + 100
        (parent,) = [p for p in inspector.parents([child.pid], exclude=set()) if p.pid == child.pid]
        assert parent.command == found.command  # (read as a launcher parent: the same bound)
    finally:
        child.kill()
        child.wait()
