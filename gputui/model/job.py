"""A training job: the processes of one run across their ranks and GPUs, seen as one thing.

``Placement`` is where one process sits in its distributed job, read from its environment (the
variables torchrun, Slurm and friends set); the probe reports its own and the collector reads the
others'. ``Job`` is what the collector groups from them (gputui/collect/jobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.fielddoc import doc
from gputui.model.record import Record

# Job.grouped_by values: the evidence that put the processes together, strongest first.
GroupedBy = Literal["launcher", "slurm", "torchelastic", "master", "devices"]
GROUPED_BY: tuple[GroupedBy, ...] = ("launcher", "slurm", "torchelastic", "master", "devices")
BY_LAUNCHER: Final = "launcher"  # children of one torchrun/deepspeed/accelerate/mpirun process
BY_SLURM: Final = "slurm"  # one Slurm step: SLURM_JOB_ID and SLURM_STEP_ID
BY_TORCHELASTIC: Final = "torchelastic"  # the same TORCHELASTIC_RUN_ID
BY_MASTER: Final = "master"  # the same MASTER_ADDR:MASTER_PORT
BY_DEVICES: Final = "devices"  # one process on several GPUs (DataParallel)

LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "mpirun", "srun")
# How each launcher shows in a command line: its program's name, or the module `python -m` runs.
_LAUNCHER_PROGRAMS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "accelerate": "accelerate",
                      "mpirun": "mpirun", "mpiexec": "mpirun", "orterun": "mpirun", "srun": "srun"}
_LAUNCHER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
                     "deepspeed.launcher.launch": "deepspeed", "deepspeed.launcher.runner": "deepspeed",
                     "accelerate.commands.launch": "accelerate"}
_LAUNCHER_PATHS = {"torch/distributed/run.py": "torchrun", "torch/distributed/launch.py": "torchrun",
                   "deepspeed/launcher/launch.py": "deepspeed", "deepspeed/launcher/runner.py": "deepspeed"}


def launcher_of(command: Sequence[str]) -> str | None:
    """Which launcher a command line runs (one of LAUNCHERS), or None for any other program.

    Reads ``torchrun ...``, ``python -m torch.distributed.run ...``, ``python /usr/bin/torchrun ...``
    and the path ``python -m`` leaves in ``sys.argv[0]`` (``.../torch/distributed/run.py``).
    """
    args = list(command)
    if args and args[0].rsplit("/", 1)[-1].startswith("python"):
        options = args[1:]
        for i, arg in enumerate(options):
            if arg == "-m" and i + 1 < len(options):
                return _LAUNCHER_MODULES.get(options[i + 1])
            if arg.startswith("-m") and len(arg) > 2:
                return _LAUNCHER_MODULES.get(arg[2:])
            if not arg.startswith("-"):  # the script: the launcher's own file, or the user's
                args = options[i:]
                break
        else:
            return None
    if not args:
        return None
    program = args[0]
    for path, launcher in _LAUNCHER_PATHS.items():
        if program.endswith(path):
            return launcher
    found = _LAUNCHER_PROGRAMS.get(program.rsplit("/", 1)[-1])
    if found == "accelerate" and "launch" not in args[1:2]:
        return None  # `accelerate config`, `accelerate env`: not a launcher
    return found


# Where each figure is read, first found first: torch.distributed's own variables, then what srun and
# Open MPI's mpirun give each task (a job they start directly has no RANK).
_RANK = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
_LOCAL_RANK = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
_WORLD_SIZE = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


def _int(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        try:
            return int(environ[name])
        except (KeyError, ValueError):
            continue
    return None


@dataclass(frozen=True, eq=False, repr=False)
class Placement(Record):
    """Where a process sits in its distributed job, as its environment says."""

    rank: int | None = field(default=None, metadata=doc(
        "global rank (`RANK`, else Slurm's `SLURM_PROCID` or Open MPI's `OMPI_COMM_WORLD_RANK`)", minimum=0))
    local_rank: int | None = field(default=None, metadata=doc(
        "rank on this node (`LOCAL_RANK`, else `SLURM_LOCALID` or `OMPI_COMM_WORLD_LOCAL_RANK`)", minimum=0))
    world_size: int | None = field(default=None, metadata=doc(
        "ranks in the whole job, all nodes (`WORLD_SIZE`, else `SLURM_NTASKS` or `OMPI_COMM_WORLD_SIZE`)",
        minimum=1))
    group_rank: int | None = field(default=None, metadata=doc(
        "the node's rank among the job's nodes (`GROUP_RANK`, torchrun)", minimum=0))
    rendezvous: str | None = field(default=None, metadata=doc(
        'what ties the process to its job\'s other ranks, strongest first: `"slurm JOB.STEP"` '
        '(`SLURM_JOB_ID`, `SLURM_STEP_ID`), `"torchelastic RUN_ID"` (`TORCHELASTIC_RUN_ID`), '
        '`"master ADDR:PORT"` (`MASTER_ADDR`, `MASTER_PORT`); null when none is set'))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Placement | None:
        """The placement an environment gives; None outside a distributed job."""
        placement = cls(rank=_int(environ, *_RANK), local_rank=_int(environ, *_LOCAL_RANK),
                        world_size=_int(environ, *_WORLD_SIZE), group_rank=_int(environ, "GROUP_RANK"),
                        rendezvous=rendezvous_of(environ))
        return None if placement == cls() else placement


def rendezvous_of(environ: Mapping[str, str]) -> str | None:
    """The strongest key that one job's ranks share in their environments (see Placement)."""
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    if job and step:
        return f"{BY_SLURM} {job}.{step}"
    run_id = environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":  # torchrun's default run id is "none": shared by every job
        return f"{BY_TORCHELASTIC} {run_id}"
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr and port:
        return f"{BY_MASTER} {addr}:{port}"
    return None


@dataclass(frozen=True, eq=False, repr=False)
class JobDevice(Record):
    """One GPU a rank uses, with what NVML charges the rank there."""

    index: int = field(metadata=doc("NVML index of the GPU", minimum=0))
    gpu_memory: int | None = field(default=None, metadata=doc(
        "GPU memory NVML charges to the rank's process on this GPU (bytes)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class JobRank(Record):
    """One process of a job."""

    pid: int = field(metadata=doc("PID (gputui's PID namespace)", minimum=1))
    rank: int | None = field(default=None, metadata=doc("global rank; null where the environment does not say",
                                                        minimum=0))
    local_rank: int | None = field(default=None, metadata=doc("rank on its node", minimum=0))
    group_rank: int | None = field(default=None, metadata=doc("its node's rank (torchrun's `GROUP_RANK`)",
                                                              minimum=0))
    devices: tuple[JobDevice, ...] = field(default=(), metadata=doc(
        "the GPUs it holds memory on, in NVML order; `[]` for a CPU rank"))
    gpu_memory: int | None = field(default=None, metadata=doc(
        "GPU memory NVML charges to it on all its GPUs (bytes); null when none is known", minimum=0))
    probed: bool = field(default=False, metadata=doc("a gputui probe runs in it (its report is in `probes`)"))
    command: tuple[str, ...] = field(default=(), metadata=doc("command line (argv)"))


@dataclass(frozen=True, eq=False, repr=False)
class Job(Record):
    """Processes that belong to one training run, or one process on several GPUs."""

    key: str = field(metadata=doc(
        'what identifies the job while it lives, e.g. `"launcher 4242"`, `"torchelastic 7f3c"`, `"devices 913"`; '
        'where users\' environments name the same rendezvous, each user\'s job ends in the user: '
        '`"torchelastic 7f3c (alice)"`'))
    name: str = field(metadata=doc('for people: the script and its launcher, e.g. `"train.py (torchrun)"`'))
    grouped_by: GroupedBy = field(metadata=doc(
        "the evidence that grouped it: `launcher` (children of one launcher process), `slurm` (one Slurm step), "
        "`torchelastic` (one `TORCHELASTIC_RUN_ID`), `master` (one `MASTER_ADDR:MASTER_PORT`), `devices` (one "
        "process on several GPUs: DataParallel); the environments' three group processes of one user only",
        enum=GROUPED_BY))
    launcher: str | None = field(default=None, metadata=doc(
        "the launcher that started it, where one is seen", enum=LAUNCHERS))
    launcher_pid: int | None = field(default=None, metadata=doc("the launcher's PID, where it is on this host",
                                                                minimum=1))
    world_size: int | None = field(default=None, metadata=doc(
        "ranks in the whole job as its environment says (may exceed the ranks seen on this host)", minimum=1))
    ranks: tuple[JobRank, ...] = field(default=(), metadata=doc("its processes on this host, by rank"))
    devices: tuple[int, ...] = field(default=(), metadata=doc(
        "NVML indices of the GPUs its ranks hold memory on", minimum=0))
    gpu_memory: int | None = field(default=None, metadata=doc(
        "GPU memory NVML charges to all its ranks on this host (bytes); null when none is known", minimum=0))
    notes: tuple[str, ...] = field(default=(), metadata=doc(
        "what could not be read, for people (e.g. an environment access was denied for)"))

    @property
    def spread(self) -> bool:
        """More than one rank or more than one device: worth showing as a job."""
        return len(self.ranks) > 1 or len(self.devices) > 1
