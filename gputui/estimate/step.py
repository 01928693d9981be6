"""One job's training step run twice, on the meta device (no real memory) or for real on the CPU.

The step is the usual loop's: ``zero_grad()``, forward and loss, ``backward()``, ``optimizer.step()``.
The first step allocates the optimizer's state; the second runs with it resident, as every later
step does. The ledger counts what lives at each phase's peak; the phases' figures are the higher of
the two steps'. Optimizers run their ``foreach`` implementation, as torch picks on a GPU (on the meta
device and the CPU it would pick the per-parameter loop, with far smaller temporaries); attention runs
the kernel torch would pick on the device the job trains on, ``Settings.device`` (attention.py).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gputui.errors import UserError
from gputui.estimate import attention, sharded
from gputui.estimate.fake import fake_tensors
from gputui.estimate.job import Job, UserCodeError, build
from gputui.estimate.ledger import HOST, Ledger
from gputui.model import MemoryCategories
from gputui.model.estimate import BACKWARD, CREATED, FORWARD, OPTIMIZER, STEADY, PhaseMemory, PhasePeak

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": functools.partial(torch.optim.SGD, lr=1e-3, momentum=0.9),  # one buffer per parameter
    "sgd-plain": functools.partial(torch.optim.SGD, lr=1e-3),  # no state at all
    "adagrad": torch.optim.Adagrad,
    "rmsprop": torch.optim.RMSprop,
}


@dataclass(frozen=True)
class Settings:
    """How to run the job: the command line's choices."""

    batch_size: int | None = None
    optimizer: str | None = None  # a key of OPTIMIZERS; None: the job's own, else Adam
    precision: str = "fp32"
    checkpointing: bool = False
    real: bool = False  # on the CPU with real memory (the accuracy check), not on the meta device
    world_size: int | None = None  # one rank of FSDP2 over this many GPUs (sharded.py), on fake tensors
    device: str = "cuda"  # what the job trains on, whose attention kernels it runs (attention.py): "cuda" or "cpu"


@dataclass(frozen=True)
class Measured:
    """The phases' peaks, the order they ran in, and the optimizer stepped."""

    phases: tuple[PhaseMemory, ...]
    timeline: tuple[PhasePeak, ...]
    optimizer: str
    activations_peak: int
    host_state: int  # optimizer state a GPU job keeps on the host, after the second step
    attention: dict[str, int]  # the attention kernels the step ran (attention.py), each with its calls


def measure(function: Callable[..., Any], settings: Settings) -> Measured:
    """Build the job with ``function`` and run two training steps, counting live tensors."""
    ledger = Ledger()
    device: Any = torch.device("meta")
    world: Any = contextlib.nullcontext()
    resizes: Any = contextlib.nullcontext()
    kernels = attention.Kernels(settings.device)
    in_kernels: Any = kernels  # entered for forward and backward only: it sees every torch call, at a cost
    if settings.real:  # the CPU's own kernels, for real
        device = in_kernels = contextlib.nullcontext()
    elif settings.precision == "amp" or settings.world_size:
        device = fake_tensors()  # FSDP2 refuses to train parameters on the meta device
    if settings.world_size:
        world = sharded.fake_world(settings.world_size)
        resizes = sharded.resizes_told(ledger)
    timeline: list[PhasePeak] = []

    def phase(name: str, step: int, part: Callable[[], Any]) -> Any:
        ledger.phase(f"{name} {step}")
        try:
            result = part()
        except UserError:
            raise
        except Exception as exc:
            raise UserCodeError(f"the training step's {name} phase", exc) from None
        ledger.stop()
        classify(ledger, job)
        timeline.append(PhasePeak(name, sum(ledger.peak(f"{name} {step}").values())))
        return result

    with world as mesh, device, ledger, resizes:
        job = prepare(build(function, settings.batch_size), settings, mesh)
        optimizer = job.optimizer
        assert optimizer is not None
        classify(ledger, job)
        created = ledger.now()
        for step in (1, 2):
            optimizer.zero_grad()
            loss = phase(FORWARD, step, functools.partial(_loss, job, ledger, in_kernels))
            phase(BACKWARD, step, functools.partial(_backward, loss, in_kernels))
            del loss
            phase(OPTIMIZER, step, functools.partial(_optimizer_step, optimizer))
        steady = ledger.now()
        host_state = ledger.host
    phases = [_memory(CREATED, created)]
    for name in (FORWARD, BACKWARD, OPTIMIZER):
        top = max((ledger.peaks[f"{name} {step}"] for step in (1, 2)), key=lambda p: p.total)
        phases.append(_memory(name, ledger.breakdown(top.live)))
    phases.append(_memory(STEADY, steady))
    return Measured(tuple(phases), tuple(timeline), type(optimizer).__name__, ledger.activations_peak, host_state,
                    dict(kernels.chosen))


def _loss(job: Job, ledger: Ledger, kernels: Any) -> torch.Tensor:
    """The forward pass and the loss, with what autograd saves marked as activations."""
    with kernels, torch.autograd.graph.saved_tensors_hooks(ledger.saved, lambda tensor: tensor):
        if job.precision == "amp":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return job.loss_of(job.forward())
        return job.loss_of(job.forward())


def _backward(loss: torch.Tensor, kernels: Any) -> None:
    """The backward pass (``kernels`` sees it: a checkpoint's recomputed forward runs the same kernels)."""
    with kernels:
        loss.backward()


def _optimizer_step(optimizer: torch.optim.Optimizer) -> Any:
    """``optimizer.step()`` with tensors made without a device put on the CPU, as in a real GPU job.

    Torch before 2.13 (2.11 seen on an H100 machine) makes Adam's step counter with ``torch.tensor(0.0)``
    and reads it with ``.item()``: under the meta device that counter would be a meta tensor, and fail.
    """
    with torch.device("cpu"):
        return optimizer.step()


def _memory(phase: str, breakdown: dict[str, int]) -> PhaseMemory:
    return PhaseMemory(phase, MemoryCategories(**breakdown), sum(breakdown.values()))


# -- the job as asked for


def prepare(job: Job, settings: Settings, mesh: Any = None) -> Job:
    """The job in the precision, with the checkpointing and the optimizer asked for; sharded with FSDP2
    over ``mesh`` where one is given."""
    dtype = DTYPES.get(settings.precision)
    if dtype is not None and dtype != torch.float32:
        if mesh is None:
            job.model.to(dtype)
        else:
            sharded.cast(job.model, dtype)
        job.batch = _cast(job.batch, dtype)
    job.precision = settings.precision
    if settings.checkpointing:
        for block in blocks(job.model):
            block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
    if mesh is not None:
        sharded.shard(job.model, sharded.layers(job.model) or blocks(job.model), mesh)
        if job.optimizer is not None and settings.optimizer is None:
            job.optimizer = sharded.rebuilt(job.optimizer, job.model)
    if settings.optimizer is not None or job.optimizer is None:
        make = OPTIMIZERS[settings.optimizer or "adam"]
        # On the CPU by default, as in a GPU job: Adagrad makes its step counters here, with no device
        with torch.device("cpu"):
            job.optimizer = make([p for p in job.model.parameters() if p.requires_grad], foreach=True)
    else:
        for group in job.optimizer.param_groups:
            if group.get("foreach", False) is None:  # torch's default: foreach on a GPU
                group["foreach"] = True
    return job


def _cast(batch: Any, dtype: torch.dtype) -> Any:
    """The batch with its floating-point tensors in ``dtype`` (token ids and labels stay as they are)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {key: _cast(value, dtype) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_cast(value, dtype) for value in batch)
    return batch


def blocks(model: nn.Module) -> list[nn.Module]:
    """What checkpointing wraps: the model's top-level children, the items of a list or sequence of
    blocks (a transformer's layers) each on its own."""
    out: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            out.extend(child.children())
        else:
            out.append(child)
    return out


def classify(ledger: Ledger, job: Job) -> None:
    """Mark what the model and the optimizer hold now: parameters, buffers, gradients, state (the
    device's, or the host's)."""
    for buffer in job.model.buffers():
        ledger.mark(buffer, "buffers")
    for param in job.model.parameters():
        ledger.mark(param, "parameters")
        if param.grad is not None:
            ledger.mark(param.grad, "gradients")
    if job.optimizer is None:
        return
    group_of = {id(p): group for group in job.optimizer.param_groups for p in group["params"]}
    for owner, state in job.optimizer.state.items():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                on_host = kept_on_host(value, owner, group_of.get(id(owner), {}))
                ledger.mark(value, HOST if on_host else "optimizer_state")


def kept_on_host(state: torch.Tensor, param: torch.Tensor, group: dict) -> bool:
    """Whether a GPU job keeps this optimizer state on the host, not the device.

    Torch keeps its optimizers' step counters (and NAdam's mu_product) on the CPU unless the group is
    capturable or fused: a kernel launch per 4-byte counter costs more than it saves. On the meta
    device that shows (the counter is a CPU tensor, the parameter is not); where the step runs on CPU
    tensors (amp's fake ones, the accuracy check's real ones) a 0-dim state in such a group is one.
    """
    if state.device.type != "cpu":
        return False
    if param.device.type != "cpu":
        return True
    return state.dim() == 0 and not (group.get("capturable") or group.get("fused"))
