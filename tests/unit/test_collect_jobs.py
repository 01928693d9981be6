"""Grouping processes into jobs (collect/jobs.py): the evidence in order, names, totals, notes, and
environments read once per process life."""

import psutil
import pytest

from gputui.collect.jobs import DENIED, JobFinder, find_jobs, script_of
from gputui.model import GpuProcess, HostProcess, Placement, ProbeReport, Snapshot

GiB = 1 << 30
TRAIN = ("/usr/bin/python3", "-u", "train.py")
TORCHRUN = HostProcess(pid=100, ppid=1, command=("/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"))


def gpu(pid, device, memory=GiB, ppid=100, command=TRAIN):
    return GpuProcess(pid=pid, device_index=device, gpu_memory=memory, ppid=ppid, command=command)


def rank(r, world=4, key="torchelastic abc"):
    return Placement(rank=r, local_rank=r, world_size=world, rendezvous=key)


def test_children_of_a_launcher_are_one_job_by_rank_with_totals():
    processes = [gpu(203, 3, 2 * GiB), gpu(201, 1), gpu(200, 0, 5 * GiB), gpu(202, 2)]
    environments = {200 + r: rank(r) for r in range(4)}
    (job,) = find_jobs(processes, parents=[TORCHRUN], environments=environments)
    assert (job.key, job.name, job.grouped_by, job.launcher, job.launcher_pid) == (
        "launcher 100", "train.py (torchrun)", "launcher", "torchrun", 100)
    assert [(r.rank, r.pid, r.gpu_memory) for r in job.ranks] == [
        (0, 200, 5 * GiB), (1, 201, GiB), (2, 202, GiB), (3, 203, 2 * GiB)]
    assert (job.devices, job.gpu_memory, job.world_size, job.notes) == ((0, 1, 2, 3), 9 * GiB, 4, ())
    assert job.spread


def test_a_launcher_may_start_its_ranks_through_a_wrapper_but_a_ranks_own_child_is_no_rank():
    wrapper = HostProcess(pid=150, ppid=100, command=("bash", "run.sh"))
    (job,) = find_jobs([gpu(200, 0, ppid=150), gpu(201, 1, ppid=150)], parents=[TORCHRUN, wrapper])
    assert [r.pid for r in job.ranks] == [200, 201]
    # a process rank 300 started on its GPU (its ancestors known: rank 300 is probed, say)
    rank = HostProcess(pid=300, ppid=100, command=TRAIN)
    processes = [gpu(300, 0), gpu(301, 1), gpu(310, 0, 256 << 20, ppid=300)]
    (job,) = find_jobs(processes, parents=[TORCHRUN], probed=[rank])
    assert [r.pid for r in job.ranks] == [300, 301]


def test_without_a_launcher_the_shared_rendezvous_groups_ranks_of_other_parents():
    # two Slurm tasks, each its own parent (slurmstepd), one step
    processes = [gpu(300, 0, ppid=10, command=("python", "a.py")), gpu(301, 1, ppid=11, command=("python", "a.py")),
                 gpu(400, 2, ppid=12)]  # an unrelated process: no job
    environments = {300: rank(0, 2, "slurm 812.0"), 301: rank(1, 2, "slurm 812.0"), 400: None}
    (job,) = find_jobs(processes, environments=environments)
    assert (job.key, job.grouped_by, job.name, job.launcher) == ("slurm 812.0", "slurm", "a.py (slurm)", None)
    assert [r.pid for r in job.ranks] == [300, 301]


def test_one_process_on_several_gpus_is_a_job_of_one_process():
    processes = [gpu(500, d, (8 if d == 0 else 3) * GiB, ppid=1) for d in range(4)] + [gpu(501, 0, ppid=1)]
    (job,) = find_jobs(processes)
    assert (job.key, job.grouped_by, job.name) == ("devices 500", "devices", "train.py (one process, 4 GPUs)")
    (only,) = job.ranks
    assert [(d.index, d.gpu_memory) for d in only.devices] == [(0, 8 * GiB), (1, 3 * GiB), (2, 3 * GiB),
                                                                 (3, 3 * GiB)]
    assert only.gpu_memory == job.gpu_memory == 17 * GiB and only.rank is None


def test_a_denied_environment_is_said_in_the_job_not_guessed():
    processes = [gpu(200, 0), gpu(201, 1)]
    (job,) = find_jobs(processes, parents=[TORCHRUN], environments={200: rank(0), 201: DENIED})
    assert [r.rank for r in job.ranks] == [0, None]
    assert job.notes == ("process 201: its environment could not be read (another user's process), so its rank "
                         "is not known",)


def test_probed_cpu_ranks_are_grouped_by_their_reports_placements():
    probed = [HostProcess(pid=700, ppid=70, command=TRAIN), HostProcess(pid=701, ppid=71, command=TRAIN)]
    reports = [ProbeReport(pid=700 + r, taken_at=0.0, placement=rank(r, 2, "master 10.0.0.1:29500"))
               for r in range(2)]
    (job,) = find_jobs((), probed=probed, probes=reports)
    assert (job.grouped_by, job.devices, job.gpu_memory) == ("master", (), None)
    assert [(r.rank, r.probed, r.devices) for r in job.ranks] == [(0, True, ()), (1, True, ())]
    assert not find_jobs((), probed=probed[:1], probes=reports[:1])[0].spread  # one rank of two here


@pytest.mark.parametrize("command, script", [
    (("/usr/bin/python3", "-u", "train.py", "--lr", "3"), "train.py"),
    (("python", "-m", "trainer.main"), "trainer.main"),
    (("python", "-c", "import torch"), "python -c"),
    (("/opt/bin/llm-train", "--x"), "llm-train"),
    ((), None),
])
def test_script_of(command, script):
    assert script_of(command) == script


class CountingPsutil:
    """psutil whose environ() is counted; processes answer from a table."""

    NoSuchProcess, AccessDenied, ZombieProcess = psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess

    def __init__(self, environs):
        self.environs = environs
        self.reads = 0

    def Process(self, pid):  # noqa: N802
        outer = self

        class Proc:
            def environ(self):
                outer.reads += 1
                value = outer.environs[pid]
                if isinstance(value, Exception):
                    raise value
                return value

        return Proc()


def test_the_finder_reads_each_environment_once_per_process_life():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    fake = CountingPsutil({200: env, 201: {**env, "RANK": "1"}, 202: psutil.AccessDenied(202)})
    finder = JobFinder(fake)
    processes = (GpuProcess(pid=200, device_index=0, started_at=5.0, ppid=9),
                 GpuProcess(pid=201, device_index=1, started_at=5.0, ppid=9))
    snapshot = Snapshot(taken_at=0.0, processes=processes)
    for _ in range(3):
        (job,) = finder.add_to(snapshot).jobs
    assert fake.reads == 2 and [r.rank for r in job.ranks] == [0, 1] and job.key == "master h:1"
    # pid 201 is a new process now (another start time): read again
    restarted = Snapshot(taken_at=0.0, processes=(processes[0], GpuProcess(pid=201, device_index=1, started_at=9.0)))
    finder.add_to(restarted)
    assert fake.reads == 3
    denied = Snapshot(taken_at=0.0, processes=(GpuProcess(pid=202, device_index=0, ppid=9, started_at=1.0),
                                               GpuProcess(pid=202, device_index=1, ppid=9, started_at=1.0)))
    (job,) = finder.add_to(denied).jobs
    assert job.notes and "202" in job.notes[0]


def test_the_monitors_sampler_groups_after_its_filters():
    from gputui.collect import open_collector
    from gputui.ui.sources.sampler import Sampler

    now = [0.0]

    class NoProbes:
        unavailable, error = {}, None

        def poll(self):
            return {}

        def close(self):
            pass

    collector = open_collector("torchrun", clock=lambda: now[0])
    try:
        now[0] = 60.0
        (job,) = Sampler(collector, watcher=NoProbes()).sample().jobs
        assert len(job.ranks) == 8 and [r.pid for r in job.ranks if r.probed] == [70120, 70125]
        (job,) = Sampler(collector, pids=(70121, 70122), watcher=NoProbes()).sample().jobs
        assert [r.rank for r in job.ranks] == [9, 10]
    finally:
        collector.close()
