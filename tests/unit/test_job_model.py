"""What a command line and an environment say about a process's job: launcher_of, Placement."""

import pytest

from gputui.model import Placement
from gputui.model.job import launcher_of


@pytest.mark.parametrize("command, launcher", [
    (["torchrun", "--nproc-per-node=2", "train.py"], "torchrun"),
    (["/usr/bin/python3", "-m", "torch.distributed.run", "train.py"], "torchrun"),
    (["python3", "-mtorch.distributed.launch", "train.py"], "torchrun"),
    (["python", "/usr/local/bin/torchrun", "train.py"], "torchrun"),
    # what `python -m torch.distributed.run` leaves in sys.argv once runpy found the module
    (["/venv/lib/python3.11/site-packages/torch/distributed/run.py", "--standalone"], "torchrun"),
    (["/usr/bin/python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30="], "deepspeed"),
    (["accelerate", "launch", "train.py"], "accelerate"),
    (["accelerate", "config"], None),
    (["mpirun", "-n", "4", "python", "train.py"], "mpirun"),
    (["/usr/bin/python3", "-u", "train.py", "--nproc-per-node=2"], None),
    (["python3", "-m", "torch.utils.bottleneck", "train.py"], None),
    ([], None),
])
def test_launcher_of_reads_the_program_or_the_module(command, launcher):
    assert launcher_of(command) == launcher


def test_a_torchrun_worker_environment_gives_its_rank_and_run():
    environ = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "2",
               "TORCHELASTIC_RUN_ID": "7f3c", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
    assert Placement.from_environ(environ) == Placement(
        rank=5, local_rank=1, world_size=8, group_rank=2, rendezvous="torchelastic 7f3c")


def test_the_rendezvous_is_the_strongest_evidence_set():
    master = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    # torchrun's default run id is shared by every job started without one: not evidence
    assert Placement.from_environ({**master, "TORCHELASTIC_RUN_ID": "none"}).rendezvous == "master 10.0.0.1:29500"
    slurm = {**master, "TORCHELASTIC_RUN_ID": "abc", "SLURM_JOB_ID": "812", "SLURM_STEP_ID": "0"}
    assert Placement.from_environ(slurm).rendezvous == "slurm 812.0"
    assert Placement.from_environ({"SLURM_JOB_ID": "812"}) is None  # a job, no step: no rank, no key


def test_tasks_srun_or_mpirun_start_directly_have_their_ranks_too():
    srun = {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "3", "SLURM_PROCID": "6", "SLURM_LOCALID": "2",
            "SLURM_NTASKS": "8"}
    assert Placement.from_environ(srun) == Placement(rank=6, local_rank=2, world_size=8, rendezvous="slurm 812.3")
    # torch.distributed's own variables win where a launcher set both
    assert Placement.from_environ({**srun, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}).rank == 0
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}
    assert Placement.from_environ(mpi) == Placement(rank=1, local_rank=1, world_size=4)


def test_no_distributed_variables_no_placement():
    assert Placement.from_environ({"PATH": "/usr/bin", "RANK": "x"}) is None


def test_the_hook_leaves_launchers_unprobed(monkeypatch):
    from gputui.probe import hook

    # what `python -m torch.distributed.run` shows once runpy found the module
    monkeypatch.setattr("sys.orig_argv", ["python3", "-m", "torch.distributed.run", "--standalone", "t.py"])
    monkeypatch.setattr("sys.argv", ["/venv/lib/python3.11/site-packages/torch/distributed/run.py", "t.py"])
    assert hook.is_launcher()
    monkeypatch.setattr("sys.orig_argv", ["python3", "-u", "t.py", "--local-rank=1"])
    monkeypatch.setattr("sys.argv", ["t.py", "--local-rank=1"])
    assert not hook.is_launcher()
