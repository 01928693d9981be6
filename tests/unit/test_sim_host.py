"""The psutil stand-in: simulated processes and host figures, with psutil's own exceptions."""

import psutil
import pytest

from gputui.collect import sim
from gputui.collect.sim import EPOCH

GiB = 1 << 30


@pytest.fixture
def at():
    made = []

    def make(scenario: str, seconds: float, **kw):
        now = [10.0]
        machine = sim.install(scenario, clock=lambda: now[0], **kw)
        now[0] = 10.0 + seconds
        made.append(machine)
        return machine

    yield make
    sim.uninstall()


def test_machine_clocks(at):
    machine = at("training-node", 42.5)
    assert machine.clock() == 52.5
    assert machine.wallclock() == EPOCH + 42.5
    assert EPOCH == 1767603600.0  # 2026-01-05 09:00:00 UTC
    assert machine.hostname == "dgx-sim-01"
    assert (machine.scenario, machine.seed) == ("training-node", 0)


def test_a_training_rank_and_its_parents(at):
    ps = at("training-node", 100.0).psutil
    rank = ps.Process(48231)
    with rank.oneshot():
        assert rank.name() == "python3"
        assert rank.cmdline() == ["/usr/bin/python3", "-u", "train.py", "--config", "configs/llama-7b.yaml"]
        assert rank.username() == "lena"
        assert rank.ppid() == 48210
        assert rank.create_time() == EPOCH
        assert rank.status() == psutil.STATUS_RUNNING
        times = rank.cpu_times()
        assert (times.user, times.system) == (106.12, 11.5)
        assert rank.memory_info().rss == int(11.5 * GiB)
    launcher = ps.Process(48210)
    assert launcher.name() == "torchrun"
    assert launcher.create_time() == EPOCH - 1.5
    shell = ps.Process(launcher.ppid())
    assert (shell.name(), shell.username(), shell.ppid()) == ("bash", "lena", 1820)
    assert ps.Process(1).name() == "systemd"


def test_cpu_times_only_rise(at):
    now = [0.0]
    machine = sim.install("workstation", clock=lambda: now[0])
    try:
        proc = machine.psutil.Process(3120)
        seen = []
        for k in range(60):
            now[0] = k * 0.7
            seen.append(proc.cpu_times().user)
        assert seen == sorted(seen) and seen[-1] > seen[0]
    finally:
        sim.uninstall()


def test_unknown_pid_raises_the_real_no_such_process(at):
    ps = at("workstation", 10.0).psutil
    with pytest.raises(psutil.NoSuchProcess):
        ps.Process(999999)
    assert ps.NoSuchProcess is psutil.NoSuchProcess
    assert ps.AccessDenied is psutil.AccessDenied
    assert ps.ZombieProcess is psutil.ZombieProcess
    assert ps.STATUS_ZOMBIE == psutil.STATUS_ZOMBIE
    assert not ps.pid_exists(999999)
    assert ps.pid_exists(3120)


def test_vanished_process(at):
    ps = at("faults", 10.0).psutil
    with pytest.raises(psutil.NoSuchProcess):
        ps.Process(4040)
    assert not ps.pid_exists(4040)


def test_other_users_process_under_hidepid(at):
    ps = at("faults", 10.0).psutil
    proc = ps.Process(2718)  # the directory is there ...
    for read in (proc.cmdline, proc.name, proc.username, proc.cpu_times, proc.memory_info, proc.status,
                 proc.create_time, proc.ppid):
        with pytest.raises(psutil.AccessDenied):  # ... but nothing inside may be read
            read()


def test_zombie(at):
    ps = at("faults", 10.0).psutil
    proc = ps.Process(1618)
    assert proc.status() == psutil.STATUS_ZOMBIE
    assert proc.name() == "python"
    assert proc.username() == "ana"
    with pytest.raises(psutil.ZombieProcess):
        proc.cmdline()
    assert proc.memory_info().rss == 0


def test_restarted_job_gets_a_new_pid(at):
    machine = at("leaky", 200.0)  # the first run died of OOM at 189.36 s and was restarted
    with pytest.raises(psutil.NoSuchProcess):
        machine.psutil.Process(51200)
    proc = machine.psutil.Process(51217)
    assert proc.create_time() == round(EPOCH + 196.36, 2)
    assert proc.ppid() == 51010


def test_process_that_exits_after_lookup(at):
    now = [0.0]
    machine = sim.install("leaky", clock=lambda: now[0])
    try:
        proc = machine.psutil.Process(51200)
        assert proc.is_running()
        now[0] = 193.0
        assert not proc.is_running()
        with pytest.raises(psutil.NoSuchProcess):
            proc.name()
    finally:
        sim.uninstall()


def test_host_figures(at):
    ps = at("training-node", 100.0).psutil
    assert ps.cpu_count() == 224
    assert ps.cpu_percent() == 4.7
    assert ps.cpu_percent(interval=None) == ps.cpu_percent()
    vm = ps.virtual_memory()
    assert vm.total == 2015 * GiB
    assert vm.used == 147076415487  # 41 GiB of system use plus every process's RSS
    assert vm.percent == 6.8
    assert vm.available == vm.free + vm.cached + vm.buffers
    assert vm.percent == round((vm.total - vm.available) / vm.total * 100, 1)
    swap = ps.swap_memory()
    assert (swap.total, swap.used, swap.percent) == (0, 0, 0.0)
    load = ps.getloadavg()
    assert load == (10.28, 10.57, 10.41)  # about ten busy cores: eight ranks and their helpers


def test_pids_include_parents_and_gpu_processes(at):
    machine = at("training-node", 100.0, processes=64)
    pids = machine.psutil.pids()
    assert {1, 1820, 47990, 48210, 59990} <= set(pids)
    assert set(range(48231, 48239)) <= set(pids)
    assert len([p for p in pids if p >= 60000]) == 54  # 8 ranks + 2 small processes + 54 = 64
