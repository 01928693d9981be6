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


# -- /proc/PID/stat read in one go, against psutil's reading of the same processes ---------------------

def _stopped_children():
    """Real processes whose figures stand still while both ways read them: two that burned some CPU and
    stopped themselves (one named "a) b (c", as a process may name itself), one sleeping, one zombie."""
    import signal
    import subprocess
    import sys
    import time

    burn = ("import os, signal, sys\n"
            "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
            "x = sum(range(3_000_000)); keep = bytearray(20 << 20)\n"
            "os.kill(os.getpid(), signal.SIGSTOP)\n")
    burners = [subprocess.Popen([sys.executable, "-c", burn, name]) for name in ("burner", "a) b (c")]
    sleeper = subprocess.Popen(["sleep", "60"])
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for until the end: a zombie
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = [psutil.Process(p.pid).status() for p in burners] + [psutil.Process(zombie.pid).status()]
        if states == [psutil.STATUS_STOPPED] * 2 + [psutil.STATUS_ZOMBIE]:
            break
        time.sleep(0.02)
    children = [*burners, sleeper, zombie]

    def end():
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()
    return children, end


def test_stat_reads_what_psutil_reads_of_real_processes():
    import subprocess
    import sys

    from gputui.collect.processes import read_stat

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    children, end = _stopped_children()
    try:
        pids = [c.pid for c in children] + [gone.pid]
        now = [100.0]
        lean = ProcessInspector(psutil, lambda: now[0], stat=read_stat)
        plain = ProcessInspector(psutil, lambda: now[0])
        for _ in range(2):  # the first sample, then one with a CPU % (0: they all stand still)
            assert lean.inspect(pids) == plain.inspect(pids)
            now[0] += 1.0
        found = lean.inspect(pids)
        burner, named, sleeper, zombie = (found[c.pid] for c in children)
        assert burner.state == named.state == sleeper.state == "ok" and burner.cpu_percent == 0.0
        assert burner.host_memory > 20 << 20 and named.name == "a) b (c"
        assert zombie.state == "zombie" and zombie.note == NOTE_ZOMBIE
        assert found[gone.pid] == ProcessDetails(state="gone", note=NOTE_GONE)
        stat = read_stat(children[1].pid)  # the name's parentheses do not shift the fields
        times = psutil.Process(children[1].pid).cpu_times()
        assert stat == (("T", times.user + times.system, psutil.Process(children[1].pid).memory_info().rss,
                         stat.started)) and stat.cpu_seconds > 0
        # the launcher parents: read again only when a pid's start time changes (the same answers)
        assert lean.parents([c.pid for c in children], exclude=set()) == \
            plain.parents([c.pid for c in children], exclude=set())
    finally:
        end()


def test_stat_said_to_move_reads_as_psutil_says_it_moved():
    # A process that runs between samples: both ways measure its CPU % from their own readings.
    import os
    import time

    from gputui.collect.processes import read_stat

    ticks = [0.0]
    inspector = ProcessInspector(psutil, lambda: ticks[0], stat=read_stat)
    inspector.inspect([os.getpid()])
    before = time.process_time()
    while time.process_time() - before < 0.2:
        pass
    ticks[0] = 1.0
    percent = inspector.inspect([os.getpid()])[os.getpid()].cpu_percent
    assert 15.0 <= percent <= 100.0  # 0.2 s (and more) of CPU over the clock's 1 s, in 1/100 s ticks


def test_stat_a_hidden_process_file_reads_as_denied():
    # hidepid=1: the entry is listed but its files refuse another user. A real refusal from the kernel: a
    # forked child running as nobody inspects itself through a /proc of stat files only root may read.
    import functools
    import os
    import shutil
    import tempfile

    from gputui.collect.processes import read_stat

    root = tempfile.mkdtemp()  # (0700 directories above a pytest tmp_path would refuse nobody sooner)
    os.chmod(root, 0o755)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(reader)
            os.mkdir(f"{root}/{os.getpid()}", 0o755)
            for name in ("stat", "statm"):
                shutil.copy(f"/proc/self/{name}", f"{root}/{os.getpid()}/{name}")
                os.chmod(f"{root}/{os.getpid()}/{name}", 0o600)
            os.setgid(65534)
            os.setuid(65534)
            inspector = ProcessInspector(psutil, lambda: 0.0, stat=functools.partial(read_stat, proc_root=root))
            found = inspector.inspect([os.getpid()])[os.getpid()]
            os.write(writer, repr((found.state, found.cpu_percent, found.host_memory, found.note)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    said = os.read(reader, 4096).decode()
    os.waitpid(child, 0)
    shutil.rmtree(root)
    assert said == repr(("denied", None, None, NOTE_DENIED))


def test_the_collector_reads_stat_where_the_real_psutil_reads_and_asks_the_simulated_one():
    from gputui.collect import sim
    from gputui.collect.collector import _stat_reader

    reader = _stat_reader(psutil)
    assert reader is not None and reader.keywords == {"proc_root": psutil.PROCFS_PATH}
    machine = sim.install("workstation", clock=lambda: 0.0)
    try:
        assert _stat_reader(machine.psutil) is None
    finally:
        sim.uninstall()
