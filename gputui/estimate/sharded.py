"""One rank of an FSDP2 job sharded N ways, measured: a fake process group (no other ranks, no
communication) and ``fully_shard`` on fake CPU tensors, so the rank's own shards (each parameter's dim 0
split N ways, padded as FSDP2 pads), its gradients' and optimizer state's shards and the unsharded
parameters it gathers for forward and backward are real tensors the ledger counts.

``torch.testing._internal.distributed.fake_pg`` is private: this module is the only place that uses it,
and says "not available" where this torch lacks it (checked on torch 2.13 CPU). It is torch's own way to
run one rank with no others, which is what makes the rank's figures measured rather than computed.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from gputui.errors import UserError


def available() -> str | None:
    """None where a rank's FSDP2 step can be measured here; else why not, in words."""
    try:
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401
    except ImportError as exc:
        return f"FSDP2 on a fake process group is not available in this torch ({exc})"
    if not dist.is_available():
        return "FSDP2 on a fake process group is not available: this torch has no torch.distributed"
    return None


@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[Any]:
    """A fake process group of ``world_size`` ranks, this process rank 0; its CPU device mesh."""
    why = available()
    if why is not None:
        raise UserError(why)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UserError("a process group is already set up in this process: the sharded step needs its own")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def resizes_told(ledger: Any) -> Iterator[None]:
    """While it runs, every ``UntypedStorage.resize_`` is told to ``ledger.resized``: FSDP2 frees its
    gathered parameters after each use with ``storage.resize_(0)`` and makes them again with
    ``resize_(size)``, which no operator (so no dispatch mode) sees. In ``gputui estimate``'s process
    only, the sharded step's run only; the class is as it was after it (the method is StorageBase's)."""
    own = vars(torch.UntypedStorage).get("resize_")  # None: inherited, as in torch 2.13
    original = torch.UntypedStorage.resize_

    def resize_(storage: torch.UntypedStorage, size: int) -> Any:
        result = original(storage, size)
        ledger.resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        if own is None:
            del torch.UntypedStorage.resize_
        else:
            torch.UntypedStorage.resize_ = own  # type: ignore[method-assign]


def cast(model: nn.Module, dtype: torch.dtype) -> None:
    """``model.to(dtype)`` on fake tensors: Module.to swaps fake parameters in place, which fails once
    the fake mode holds a weak reference to them; each floating-point parameter and buffer is replaced
    instead (a tied parameter once, still tied)."""
    done: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.is_floating_point():
                if id(param) not in done:
                    done[id(param)] = nn.Parameter(param.detach().to(dtype), requires_grad=param.requires_grad)
                setattr(module, name, done[id(param)])
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer.is_floating_point():
                setattr(module, name, buffer.to(dtype))  # a buffer's name: stays a buffer, persistent or not


def layers(model: nn.Module) -> list[nn.Module]:
    """The units FSDP2 recipes wrap: the items of the model's outermost ModuleLists, however deep (a
    transformer's layers: ``model.transformer.h``, ``model.model.layers``); none where it has none."""
    found: list[nn.Module] = []
    for child in model.children():
        found.extend(child.children() if isinstance(child, nn.ModuleList) else layers(child))
    return found


def shard(model: nn.Module, units: list[nn.Module], mesh: Any) -> None:
    """FSDP2 as a training script applies it: each unit (a block) that holds parameters its own
    FSDP module, then the model (the root, with what is left: units that share a parameter with
    another, a tied embedding and head, as FSDP2 wants tied parameters in one group)."""
    from torch.distributed.fsdp import fully_shard

    owners: dict[int, int] = {}
    for unit in units:
        for param in unit.parameters():
            owners[id(param)] = owners.get(id(param), 0) + 1
    try:
        for unit in units:
            params = list(unit.parameters())
            if params and all(owners[id(p)] == 1 for p in params):
                fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
    except Exception as exc:  # a model FSDP2 refuses (its own checks): no sharded figures, one line
        raise UserError(f"FSDP2 cannot shard this model: {type(exc).__name__}: {exc}") from None


def rebuilt(optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
    """The job's own optimizer, of its class and defaults, over the sharded parameters (the one it
    returned holds the unsharded ones, which FSDP2 replaced)."""
    # defaults also holds settings the constructor does not take (AdamW's decoupled_weight_decay)
    takes = inspect.signature(type(optimizer)).parameters
    defaults = {key: value for key, value in optimizer.defaults.items() if key in takes}
    return type(optimizer)([p for p in model.parameters() if p.requires_grad], **defaults)
