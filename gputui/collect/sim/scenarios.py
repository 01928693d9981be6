"""The named scenarios: which GPUs a simulated machine has and which programs run on them.

A scenario is static description; ``state.py`` turns it into readings at a given second. Programs
started before the scenario's clock began have negative start times.
"""

from __future__ import annotations

import json
import uuid as _uuid
from dataclasses import dataclass, replace
from typing import Any

from gputui.collect.sim import devices as hw
from gputui.collect.sim.devices import GiB, GpuModel, MiB, MigProfile
from gputui.collect.sim.jobs import Job, Layout
from gputui.collect.sim.signals import mix, stream
from gputui.options import SCENARIOS

# The scenario second `gputui --demo` starts at: the torchrun job has ramped up on every GPU, the
# leaking job has grown for a minute (its OOM comes a minute later). The others are steady from 0.
DEMO_START = {"training-node": 60.0, "leaky": 60.0, "dataparallel": 60.0, "torchrun": 60.0}

COMPUTE = "compute"
GRAPHICS = "graphics"
BOTH = "compute+graphics"

OK = "ok"
DENIED = "denied"  # another user's process under hidepid: psutil may not read it
VANISHED = "vanished"  # NVML still lists it, /proc no longer has it
ZOMBIE = "zombie"


@dataclass(frozen=True)
class MigSlot:
    """One MIG device on a GPU in MIG mode."""

    index: int
    profile: MigProfile
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str


@dataclass(frozen=True)
class Gpu:
    """One simulated physical GPU."""

    index: int
    model: GpuModel
    uuid: str
    bus: int  # PCI bus number
    lost: bool = False  # every call on its handle answers GPU_IS_LOST
    mig: tuple[MigSlot, ...] = ()  # non-empty: MIG mode is on
    compute_mode: int = 0  # NVML_COMPUTEMODE_*
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    base_memory: int = 4 * MiB  # used with no process at all

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{self.bus:02X}:00.0"


@dataclass(frozen=True)
class Use:
    """How one program uses one GPU."""

    device: int
    kind: str = COMPUTE
    memory: int = 0  # bytes (a job's memory comes from its allocator instead)
    sm: float = 0.0  # mean SM utilisation, percent; negative means mostly idle with bursts
    jitter: float = 0.0  # how far the noise swings it
    mem_ratio: float = 0.5  # memory-bandwidth utilisation relative to SM utilisation
    encoder: float = 0.0
    decoder: float = 0.0
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    share: float = 1.0  # of its job's allocator bytes on this device: DataParallel's replicas hold less


@dataclass(frozen=True)
class Program:
    """A host process; with ``job`` set, each run of the job is a process with its own pid."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    user: str
    started: float  # scenario seconds (negative: before the scenario began)
    cpu: float = 0.0  # cores it keeps busy
    rss: int = 0
    uses: tuple[Use, ...] = ()
    access: str = OK
    job: Job | None = None
    probed: bool = False  # a gputui probe runs inside it
    environ: tuple[tuple[str, str], ...] = ()  # its environment (rank variables), beside the usual ones
    cgroup: str = "/user.slice"  # its cgroup v2 path (/proc/PID/cgroup's "0::" line)

    @property
    def on_gpu(self) -> bool:
        return bool(self.uses)


@dataclass(frozen=True)
class Scenario:
    name: str
    hostname: str
    driver: hw.Driver
    gpus: tuple[Gpu, ...]
    programs: tuple[Program, ...]
    cpu_count: int
    memory_total: int
    swap_total: int
    host_memory_base: int  # used by everything that is not listed
    files: tuple[tuple[str, str], ...] = ()  # (path, text): the runtimes' state on disk (kubelet's log dirs)


def gpu_uuid(scenario: str, *where: object) -> str:
    return str(_uuid.UUID(int=mix(stream("gpu", scenario, *where)) << 64 | mix(stream("uuid", scenario, *where))))


def _gpu(scenario: str, index: int, model: GpuModel, bus: int, **kw: Any) -> Gpu:
    return Gpu(index, model, "GPU-" + gpu_uuid(scenario, index), bus, **kw)


def _system(*extra: Program) -> tuple[Program, ...]:
    base = (
        Program(1, 0, "systemd", ("/sbin/init",), "root", -864000.0, cpu=0.002, rss=13 * MiB),
        Program(1820, 1, "sshd", ("sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups",), "root",
                -864000.0, cpu=0.001, rss=9 * MiB),
    )
    return base + extra


def torchrun_environ(rank: int, world_size: int, *, local_rank: int | None = None, node: int = 0,
                     run_id: str = "none", master: str = "127.0.0.1:29500") -> tuple[tuple[str, str], ...]:
    """What torchrun puts in a worker's environment (the variables gputui groups and ranks by)."""
    addr, port = master.split(":")
    return (("RANK", str(rank)), ("LOCAL_RANK", str(rank if local_rank is None else local_rank)),
            ("WORLD_SIZE", str(world_size)), ("GROUP_RANK", str(node)), ("TORCHELASTIC_RUN_ID", run_id),
            ("MASTER_ADDR", addr), ("MASTER_PORT", port))


def _layout(model: GpuModel, **kw: Any) -> Layout:
    return Layout(context=model.context_memory, **kw)


# ---------------------------------------------------------------------------------------------- workstation

def workstation() -> Scenario:
    name = "workstation"
    gpus = (
        _gpu(name, 0, hw.RTX_4090, 0x01),
        _gpu(name, 1, hw.RTX_A6000, 0x41),
    )
    unet = Job(
        _layout(hw.RTX_4090, parameters=int(1.4 * GiB), gradients=int(1.4 * GiB), optimizer_state=int(2.8 * GiB),
                activations=int(9.5 * GiB), other=int(0.6 * GiB), step_time=0.31),
        start=-1800.0,
        pid=3120,
    )
    programs = _system(
        Program(1302, 1, "gdm3", ("/usr/sbin/gdm3",), "root", -172800.0, cpu=0.001, rss=11 * MiB),
        Program(1455, 1302, "Xorg", ("/usr/lib/xorg/Xorg", "vt2", "-displayfd", "3", "-auth",
                                     "/run/user/1000/gdm/Xauthority", "-nolisten", "tcp"), "root", -172790.0,
                cpu=0.03, rss=118 * MiB, uses=(Use(0, GRAPHICS, 312 * MiB, sm=1.0, jitter=1.0),)),
        Program(2210, 1302, "gnome-shell", ("/usr/bin/gnome-shell",), "alice", -172780.0, cpu=0.05,
                rss=402 * MiB, uses=(Use(0, GRAPHICS, 96 * MiB, sm=1.0, jitter=1.0),)),
        Program(2890, 2210, "gnome-terminal-", ("/usr/libexec/gnome-terminal-server",), "alice", -90000.0,
                cpu=0.004, rss=64 * MiB),
        Program(3050, 2890, "bash", ("bash",), "alice", -7200.0, cpu=0.0, rss=5 * MiB),
        Program(3120, 3050, "python", ("python", "train_unet.py", "--data", "/data/kvasir", "--epochs", "80"),
                "alice", -1800.0, cpu=1.3, rss=int(5.8 * GiB), uses=(Use(0, sm=96.0, jitter=3.0, mem_ratio=0.62),),
                job=unet),
        Program(4410, 1, "jupyter-lab", ("/home/bob/.venv/bin/python", "/home/bob/.venv/bin/jupyter-lab",
                                         "--no-browser", "--port=8890"), "bob", -250000.0, cpu=0.01, rss=180 * MiB),
        Program(4502, 4410, "python", ("/home/bob/.venv/bin/python", "-m", "ipykernel_launcher", "-f",
                                       "/home/bob/.local/share/jupyter/runtime/kernel-5c1e.json"), "bob",
                -21000.0, cpu=0.08, rss=int(3.1 * GiB),
                uses=(Use(1, memory=6348 * MiB, sm=-25.0, jitter=70.0, mem_ratio=0.4),)),
        Program(5001, 1820, "bash", ("-bash",), "carol", -5400.0, cpu=0.0, rss=5 * MiB),
        Program(5120, 5001, "ffmpeg", ("ffmpeg", "-hwaccel", "cuda", "-i", "lecture-04.mkv", "-c:v", "h264_nvenc",
                                       "-preset", "p5", "lecture-04.mp4"), "carol", -600.0, cpu=0.9, rss=220 * MiB,
                uses=(Use(1, memory=310 * MiB, sm=9.0, jitter=3.0, mem_ratio=1.0, encoder=46.0, decoder=31.0),)),
        Program(5230, 5001, "blender", ("blender", "-b", "atrium.blend", "-E", "CYCLES", "-a", "--",
                                        "--cycles-device", "OPTIX"), "carol", -3000.0, cpu=1.0, rss=int(2.2 * GiB),
                uses=(Use(1, BOTH, 3482 * MiB, sm=62.0, jitter=15.0, mem_ratio=0.35),)),
    )
    return Scenario(name, "ws-sim-01", hw.DRIVER_535, gpus, programs, cpu_count=32,
                    memory_total=128 * GiB, swap_total=8 * GiB, host_memory_base=int(9.5 * GiB))


# ---------------------------------------------------------------------------------------------- training node

DGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
TRAIN_ARGS = ("/usr/bin/python3", "-u", "train.py", "--config", "configs/llama-7b.yaml")


def training_layout() -> Layout:
    """One FSDP rank of a 7B model on an H100: about 60 GiB reserved once warm."""
    return _layout(hw.H100_SXM, parameters=int(3.3 * GiB), gradients=int(3.3 * GiB),
                   optimizer_state=int(13.2 * GiB), activations=int(33.5 * GiB), other=int(1.4 * GiB),
                   step_time=0.62)


def training_node() -> Scenario:
    name = "training-node"
    gpus = tuple(_gpu(name, i, hw.H100_SXM, bus, ecc_corrected=2 if i == 5 else 0)
                 for i, bus in enumerate(DGX_BUSES))
    layout = training_layout()
    ranks = tuple(
        Program(48231 + r, 48210, "python3", TRAIN_ARGS, "lena", 0.0, cpu=1.15, rss=int(11.5 * GiB),
                uses=(Use(r, sm=95.0, jitter=3.0, mem_ratio=0.58),), job=Job(layout, 0.0, 48231 + r),
                probed=r == 0, environ=torchrun_environ(r, 8))
        for r in range(8)
    )
    programs = _system(
        Program(47990, 1820, "bash", ("-bash",), "lena", -3600.0, cpu=0.0, rss=5 * MiB),
        Program(48210, 47990, "torchrun", ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node=8",
                                           "train.py", "--config", "configs/llama-7b.yaml"), "lena", -1.5,
                cpu=0.02, rss=310 * MiB),
        *ranks,
        Program(52010, 1, "jupyter-lab", ("/opt/conda/bin/python", "/opt/conda/bin/jupyter-lab", "--no-browser"),
                "omar", -90000.0, cpu=0.01, rss=150 * MiB),
        Program(52044, 52010, "python", ("/opt/conda/bin/python", "-m", "ipykernel_launcher", "-f",
                                         "/home/omar/.local/share/jupyter/runtime/kernel-91a2.json"), "omar",
                -4000.0, cpu=0.05, rss=int(2.4 * GiB), uses=(Use(7, memory=3268 * MiB, sm=-30.0, jitter=60.0),)),
        Program(53100, 47990, "python3", ("/usr/bin/python3", "profile_kernels.py", "--iters", "50"), "jun",
                -240.0, cpu=0.6, rss=int(1.1 * GiB), uses=(Use(2, memory=914 * MiB, sm=3.0, jitter=2.0),)),
    )
    return Scenario(name, "dgx-sim-01", hw.DRIVER_560, gpus, programs, cpu_count=224,
                    memory_total=2015 * GiB, swap_total=0, host_memory_base=int(41 * GiB))


# ---------------------------------------------------------------------------------------------- leaky

def leaky_layout() -> Layout:
    """GPT-2 medium fine-tune whose loss history keeps every step's graph alive (48 MiB a step)."""
    return _layout(hw.A100_SXM_40, parameters=int(1.35 * GiB), gradients=int(1.35 * GiB),
                   optimizer_state=int(2.7 * GiB), activations=int(3.2 * GiB), other=int(0.3 * GiB),
                   step_time=0.4, leak_per_step=48 * MiB)


def leaky() -> Scenario:
    name = "leaky"
    gpus = (_gpu(name, 0, hw.A100_SXM_40, 0x07),)
    job = Job(leaky_layout(), start=-30.0, pid=51200)
    programs = _system(
        Program(50990, 1820, "bash", ("-bash",), "dev", -9000.0, cpu=0.0, rss=5 * MiB),
        Program(51010, 50990, "torchrun", ("/usr/bin/python3", "/usr/local/bin/torchrun", "--max-restarts=100",
                                           "--nproc-per-node=1", "train.py", "--model", "gpt2-medium"), "dev",
                -31.0, cpu=0.01, rss=290 * MiB),
        Program(51200, 51010, "python3", ("/usr/bin/python3", "-u", "train.py", "--model", "gpt2-medium"), "dev",
                -30.0, cpu=1.1, rss=int(4.2 * GiB), uses=(Use(0, sm=88.0, jitter=5.0, mem_ratio=0.5),), job=job,
                probed=True, environ=torchrun_environ(0, 1)),
        Program(52300, 1, "python", ("/home/sam/venv/bin/python", "-m", "ipykernel_launcher", "-f",
                                     "/home/sam/.local/share/jupyter/runtime/kernel-0b7d.json"), "sam", -40000.0,
                cpu=0.03, rss=int(1.9 * GiB), uses=(Use(0, memory=3572 * MiB, sm=-35.0, jitter=60.0),)),
        Program(52410, 1, "python", ("/home/sam/venv/bin/python", "serve_embeddings.py", "--port", "7001"), "sam",
                -80000.0, cpu=0.15, rss=int(1.2 * GiB), uses=(Use(0, memory=1536 * MiB, sm=4.0, jitter=4.0),)),
    )
    return Scenario(name, "gpu-sim-02", hw.DRIVER_560, gpus, programs, cpu_count=64,
                    memory_total=512 * GiB, swap_total=16 * GiB, host_memory_base=int(14 * GiB))


# ---------------------------------------------------------------------------------------------- mig

def mig() -> Scenario:
    name = "mig"
    profiles = {p.name: p for p in hw.H100_SXM.mig_profiles}
    placement = (("3g.40gb", 1), ("2g.20gb", 5), ("1g.10gb", 13), ("1g.10gb", 14))
    slots = tuple(
        MigSlot(i, profiles[prof], gi, 0, "MIG-" + gpu_uuid(name, 0, "mig", i))
        for i, (prof, gi) in enumerate(placement)
    )
    gpus = (
        _gpu(name, 0, hw.H100_SXM, 0x1B, mig=slots),
        _gpu(name, 1, hw.H100_SXM, 0x43, compute_mode=3),
    )
    finetune = Job(training_layout(), start=-600.0, pid=61500)

    def on(slot: int, **kw: Any) -> Use:
        return Use(0, gpu_instance_id=slots[slot].gpu_instance_id, compute_instance_id=0, **kw)

    programs = _system(
        Program(61000, 1820, "bash", ("-bash",), "priya", -8000.0, rss=5 * MiB),
        Program(61010, 61000, "python", ("python", "train.py", "--model", "vit-b16", "--batch", "256"), "priya",
                -3000.0, cpu=1.2, rss=int(6.1 * GiB), uses=(on(0, memory=31210 * MiB, sm=93.0, jitter=4.0),)),
        Program(61100, 1, "python", ("python", "serve.py", "--model", "mistral-7b-awq"), "tom", -50000.0,
                cpu=0.4, rss=int(3.3 * GiB), uses=(on(1, memory=14338 * MiB, sm=35.0, jitter=20.0),)),
        Program(61200, 1, "python", ("/opt/conda/bin/python", "-m", "ipykernel_launcher", "-f",
                                     "/home/li/.local/share/jupyter/runtime/kernel-44e0.json"), "li", -7000.0,
                cpu=0.05, rss=int(1.4 * GiB), uses=(on(2, memory=3174 * MiB, sm=-30.0, jitter=60.0),)),
        Program(61300, 1, "python", ("python", "eval.py", "--ckpt", "runs/vit/last.pt"), "li", -900.0, cpu=0.9,
                rss=int(2.0 * GiB), uses=(on(3, memory=5734 * MiB, sm=71.0, jitter=12.0),)),
        Program(61490, 1820, "bash", ("-bash",), "priya", -700.0, rss=5 * MiB),
        Program(61500, 61490, "python3", TRAIN_ARGS, "priya", -600.0, cpu=1.15, rss=int(11.2 * GiB),
                uses=(Use(1, sm=95.0, jitter=3.0, mem_ratio=0.58),), job=finetune),
    )
    return Scenario(name, "mig-sim-01", hw.DRIVER_560, gpus, programs, cpu_count=128,
                    memory_total=1024 * GiB, swap_total=0, host_memory_base=int(22 * GiB))


# ---------------------------------------------------------------------------------------------- faults

def faults() -> Scenario:
    name = "faults"
    gpus = (
        _gpu(name, 0, hw.V100_SXM2, 0x06, ecc_corrected=17),
        _gpu(name, 1, hw.V100_SXM2, 0x07, lost=True),
        _gpu(name, 2, hw.GTX_1080_TI, 0x86, base_memory=2 * MiB),
    )
    programs = _system(
        Program(3000, 1820, "bash", ("-bash",), "ana", -20000.0, rss=5 * MiB),
        Program(3141, 3000, "python", ("python", "train_resnet.py", "--arch", "resnet152", "--amp"), "ana",
                -7200.0, cpu=1.4, rss=int(7.5 * GiB), uses=(Use(0, memory=24870 * MiB, sm=98.0, jitter=2.0),)),
        # Another user's job while /proc is mounted hidepid=1: psutil may read nothing about it.
        Program(2718, 1, "python", ("python", "/srv/jobs/etl_embed.py"), "svc-etl", -30000.0, cpu=0.7,
                rss=int(2.9 * GiB), uses=(Use(0, memory=2148 * MiB, sm=12.0, jitter=8.0),), access=DENIED),
        # Exited, but its GPU context has not been torn down yet: a zombie still holding memory.
        Program(1618, 3000, "python", ("python", "debug_loader.py"), "ana", -5000.0, rss=0,
                uses=(Use(0, memory=1126 * MiB),), access=ZOMBIE),
        # NVML still lists it but the process has already exited: psutil finds nothing.
        Program(4040, 3000, "python", ("python", "quick_check.py"), "ana", -20.0, cpu=0.9,
                rss=int(1.3 * GiB), uses=(Use(2, memory=806 * MiB, sm=40.0, jitter=10.0),), access=VANISHED),
        Program(4100, 3000, "python", ("python", "infer.py", "--batch", "8"), "ana", -3000.0, cpu=0.6,
                rss=int(2.2 * GiB), uses=(Use(2, memory=2568 * MiB, sm=37.0, jitter=9.0),)),
    )
    return Scenario(name, "lab-sim-03", hw.DRIVER_450, gpus, programs, cpu_count=48,
                    memory_total=256 * GiB, swap_total=4 * GiB, host_memory_base=int(12 * GiB))


# ---------------------------------------------------------------------------------------------- dataparallel

DP_SHARES = (1.0, 0.45, 0.45, 0.45)  # device 0 holds the master weights, gradients, optimizer and outputs


def dataparallel_layout() -> Layout:
    """A ViT-L fine-tune under nn.DataParallel on 4 A100s, as device 0 sees it: the weights, the gradients
    reduced onto it, Adam's state and every replica's outputs gathered for the loss. What grows (48 MiB a
    step: the gathered outputs of a batch whose padded length creeps up) grows there."""
    return _layout(hw.A100_SXM_40, parameters=int(1.2 * GiB), gradients=int(1.2 * GiB),
                   optimizer_state=int(2.4 * GiB), activations=int(14.0 * GiB), other=int(2.2 * GiB),
                   step_time=0.9, leak_per_step=48 * MiB)


def dataparallel() -> Scenario:
    """One process drives 4 GPUs with nn.DataParallel: device 0 fills first and runs out of memory while
    the replicas have room (then its launcher script starts it again)."""
    name = "dataparallel"
    gpus = tuple(_gpu(name, i, hw.A100_SXM_40, bus) for i, bus in enumerate((0x07, 0x0F, 0x47, 0x4E)))
    uses = tuple(Use(i, sm=(92.0 if i == 0 else 61.0), jitter=4.0, mem_ratio=0.5, share=share)
                 for i, share in enumerate(DP_SHARES))
    programs = _system(
        Program(61000, 1820, "bash", ("-bash",), "ines", -7200.0, cpu=0.0, rss=5 * MiB),
        Program(61010, 61000, "bash", ("bash", "retry.sh", "python", "train_dp.py"), "ines", -100.0, cpu=0.0,
                rss=4 * MiB),
        Program(61042, 61010, "python", ("python", "train_dp.py", "--batch-size", "256", "--model", "vit-l"),
                "ines", -100.0, cpu=1.6, rss=int(6.5 * GiB), uses=uses,
                job=Job(dataparallel_layout(), start=-100.0, pid=61042)),
    )
    return Scenario(name, "gpu-sim-03", hw.DRIVER_560, gpus, programs, cpu_count=96,
                    memory_total=1007 * GiB, swap_total=0, host_memory_base=int(12 * GiB))


# ---------------------------------------------------------------------------------------------- torchrun

TORCHRUN_ARGS = ("/usr/bin/python3", "-u", "pretrain.py", "--config", "configs/gpt-1.3b.yaml")
STRAGGLER = 5  # the local rank whose GPU is starved (its data loader cannot keep up)


def torchrun_layout(step_time: float = 0.48) -> Layout:
    """One DDP rank of a 1.3B model on an H100."""
    return _layout(hw.H100_SXM, parameters=int(2.6 * GiB), gradients=int(2.6 * GiB),
                   optimizer_state=int(10.4 * GiB), activations=int(38.0 * GiB), other=int(1.1 * GiB),
                   step_time=step_time)


def torchrun() -> Scenario:
    """The second node of a 2-node torchrun job (16 ranks), seen from this node: ranks 8-15 on its 8 GPUs,
    grouped by their launcher and their environments. Local rank 5 is a straggler: its utilisation and
    step time lag the others'."""
    name = "torchrun"
    gpus = tuple(_gpu(name, i, hw.H100_SXM, bus) for i, bus in enumerate(DGX_BUSES))
    ranks = []
    for local in range(8):
        slow = local == STRAGGLER
        layout = torchrun_layout(0.71 if slow else 0.48)
        ranks.append(Program(
            70120 + local, 70100, "python3", TORCHRUN_ARGS, "kai", 0.0, cpu=2.8 if slow else 1.2, rss=int(9 * GiB),
            uses=(Use(local, sm=58.0 if slow else 94.0, jitter=3.0, mem_ratio=0.6),),
            job=Job(layout, 0.0, 70120 + local), probed=local in (0, STRAGGLER),
            environ=torchrun_environ(8 + local, 16, local_rank=local, node=1, run_id="gpt13b-0412",
                                     master="node-a:29400")))
    programs = _system(
        Program(70050, 1820, "bash", ("-bash",), "kai", -1800.0, cpu=0.0, rss=5 * MiB),
        Program(70100, 70050, "torchrun", ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=2",
                                           "--node-rank=1", "--nproc-per-node=8", "--rdzv-backend=c10d",
                                           "--rdzv-endpoint=node-a:29400", "--rdzv-id=gpt13b-0412",
                                           "pretrain.py", "--config", "configs/gpt-1.3b.yaml"), "kai", -2.0,
                cpu=0.02, rss=300 * MiB),
        *ranks,
    )
    return Scenario(name, "dgx-sim-02", hw.DRIVER_560, gpus, programs, cpu_count=224,
                    memory_total=2015 * GiB, swap_total=0, host_memory_base=int(38 * GiB))


# ---------------------------------------------------------------------------------------------- shared k8s

def _pod_cgroup(uid: str, container_id: str, qos: str = "burstable") -> str:
    """The cgroup v2 path the kubelet's systemd driver and containerd give a pod's container."""
    return (f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{container_id}.scope")


def _pod_files(namespace: str, pod: str, uid: str, container: str, container_id: str) -> tuple[tuple[str, str], ...]:
    """What the kubelet writes on disk for a pod's container: its log directory and the link naming it."""
    return ((f"/var/log/pods/{namespace}_{pod}_{uid}/{container}/0.log", ""),
            (f"/var/log/containers/{pod}_{namespace}_{container}-{container_id}.log", ""))


def shared_k8s() -> Scenario:
    """A shared Kubernetes GPU node: pods from several namespaces; one of them (a forgotten notebook)
    holds memory on two GPUs and does nothing."""
    name = "shared-k8s"
    gpus = tuple(_gpu(name, i, hw.A100_SXM_40, bus) for i, bus in enumerate(DGX_BUSES))
    # (namespace, pod, pod uid, container, container id, pid, user, command, uses)
    pods = (
        ("ml-research", "llama-ft-0", "0c6a2f10-5b7e-4c1d-9a3e-7f2b8d4e6a10", "trainer", 81001, "1000",
         ("python", "finetune.py", "--model", "llama-7b"),
         tuple(Use(i, memory=int(31.5 * GiB), sm=93.0, jitter=4.0) for i in range(4))),
        ("inference", "vllm-mistral-7d9f", "4e8b1c22-0d3f-4a5b-8c6d-1e2f3a4b5c20", "server", 82001, "1001",
         ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "mistral-7b"),
         (Use(4, memory=int(34 * GiB), sm=41.0, jitter=25.0),)),
        ("team-vision", "notebook-sam", "9d3e5f30-7a1b-4c2d-8e9f-0a1b2c3d4e30", "notebook", 83001, "1002",
         ("/opt/conda/bin/python", "-m", "ipykernel_launcher", "-f", "/root/.local/share/jupyter/kernel-1.json"),
         (Use(5, memory=int(21 * GiB), sm=0.0), Use(6, memory=int(19 * GiB), sm=0.0))),
        ("batch", "embed-nightly-x2k4p", "b1f2e3d4-c5b6-4a79-8d8e-9f0a1b2c3d40", "embedder", 84001, "1003",
         ("python", "embed.py", "--shard", "3"), (Use(7, memory=int(12 * GiB), sm=68.0, jitter=10.0),)),
    )
    programs = []
    files: list[tuple[str, str]] = []
    assigned = []  # the kubelet's device-plugin checkpoint: which GPUs each pod's container was given
    for namespace, pod, uid, container, pid, user, command, uses in pods:
        cid = gpu_uuid(name, pod).replace("-", "")[:32] * 2  # 64 hex digits, as runtimes' ids are
        cgroup = _pod_cgroup(uid, cid, "guaranteed" if namespace == "inference" else "burstable")
        programs.append(Program(pid, 1, command[0].rsplit("/", 1)[-1], command, user, -7200.0, cpu=0.9,
                                rss=int(6 * GiB), uses=uses, cgroup=cgroup))
        files += _pod_files(namespace, pod, uid, container, cid)
        assigned.append({"PodUID": uid, "ContainerName": container, "ResourceName": "nvidia.com/gpu",
                         "DeviceIDs": {"0": [gpus[u.device].uuid for u in uses]}})
    files.append(("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
                  json.dumps({"Data": {"PodDeviceEntries": assigned, "RegisteredDevices": {}}, "Checksum": 0})))
    programs.append(Program(85001, 1, "nvidia-smi-exporter", ("/usr/bin/dcgm-exporter",), "root", -86400.0,
                            cpu=0.02, rss=90 * MiB, cgroup="/system.slice/dcgm-exporter.service"))
    return Scenario(name, "k8s-gpu-node-07", hw.DRIVER_560, gpus, _system(*programs), cpu_count=128,
                    memory_total=1007 * GiB, swap_total=0, host_memory_base=int(24 * GiB), files=tuple(files))


BUILDERS = {
    "workstation": workstation,
    "training-node": training_node,
    "leaky": leaky,
    "mig": mig,
    "faults": faults,
    "dataparallel": dataparallel,
    "torchrun": torchrun,
    "shared-k8s": shared_k8s,
}


# ---------------------------------------------------------------------------------------------- sizing

FILLER_PARENT = 59990
FILLER_BASE_PID = 60000
FILLER_MAX = 256 * MiB


def _peak(program: Program, gpu: Gpu) -> int:
    """The most memory a program's use of ``gpu`` ever reaches (jobs: their warm step peak)."""
    total = 0
    for use in program.uses:
        if use.device != gpu.index:
            continue
        if program.job is not None:
            lay = program.job.layout
            total += lay.context + int(lay.reserved(0, lay.warm_until) * use.share)
        else:
            total += use.memory
    return total


def build(name: str, processes: int | None = None) -> Scenario:
    """The scenario ``name``, with its GPU processes trimmed or padded to ``processes``."""
    if name not in BUILDERS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    scenario = BUILDERS[name]()
    if processes is not None:
        scenario = _resize(scenario, max(0, int(processes)))
    return _size_leaks(scenario)


def _resize(scenario: Scenario, count: int) -> Scenario:
    on_gpu = [p for p in scenario.programs if p.on_gpu]
    if count <= len(on_gpu):
        drop = {p.pid for p in on_gpu[count:]}
        return replace(scenario, programs=tuple(p for p in scenario.programs if p.pid not in drop))
    targets = [g for g in scenario.gpus if not g.lost]
    extra = count - len(on_gpu)
    # Each filler goes to the GPU with the fewest processes so far, so the load spreads evenly.
    load = {g.index: sum(1 for p in on_gpu for u in p.uses if u.device == g.index) for g in targets}
    placed = []
    for _ in range(extra):
        index = min(load, key=lambda i: (load[i], i))
        load[index] += 1
        placed.append(scenario.gpus[index])
    per_gpu = {g.index: sum(1 for x in placed if x.index == g.index) for g in targets}
    sizes = {}
    for g in targets:
        usable = g.model.memory_total - g.model.memory_reserved - g.base_memory
        taken = sum(_peak(p, g) for p in scenario.programs)
        room = max(0, usable - taken) * 8 // 10  # leave the jobs some headroom
        sizes[g.index] = max(2 * MiB, min(FILLER_MAX, room // max(1, per_gpu[g.index])) // (2 * MiB) * (2 * MiB))
    fillers = [
        Program(FILLER_PARENT, 1, "python", ("python", "sweep.py", "--workers", str(extra)), "svc-sweep", -600.0,
                cpu=0.05, rss=200 * MiB)
    ]
    for i, g in enumerate(placed):
        slot = g.mig[i % len(g.mig)] if g.mig else None
        use = Use(g.index, memory=sizes[g.index], sm=1.0,  # no noise: benchmarks time the collector
                  gpu_instance_id=slot.gpu_instance_id if slot else None,
                  compute_instance_id=slot.compute_instance_id if slot else None)
        fillers.append(Program(FILLER_BASE_PID + i, FILLER_PARENT, "python",
                               ("python", "worker.py", "--task", str(i)), "svc-sweep", -590.0 + i * 0.01,
                               cpu=0.02, rss=350 * MiB, uses=(use,)))
    return replace(scenario, programs=scenario.programs + tuple(fillers))


def _size_leaks(scenario: Scenario) -> Scenario:
    """Give each leaking job the bytes its GPU has left once everything else is counted."""
    programs = []
    for p in scenario.programs:
        if p.job is not None and p.job.layout.leak_per_step > 0:
            gpu = scenario.gpus[p.uses[0].device]
            usable = gpu.model.memory_total - gpu.model.memory_reserved - gpu.base_memory
            others = sum(_peak(q, gpu) for q in scenario.programs if q is not p)
            p = replace(p, job=replace(p.job, budget=usable - others - p.job.layout.context))
        programs.append(p)
    return replace(scenario, programs=tuple(programs))
