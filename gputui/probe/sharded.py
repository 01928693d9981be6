"""Sharded training (FSDP2's ``fully_shard``, FSDP1's ``FullyShardedDataParallel``, DeepSpeed's ZeRO-3): each
rank's local shards, and the unsharded parameters gathered for forward and backward.

FSDP2's parameters, gradients and Adam's moments are DTensors: a rank holds only its local shard, which
``to_local()`` gives (a DTensor's own storage has no data pointer). For forward and backward FSDP2
all-gathers each module's parameters into plain unsharded ones and sets them on the module; FSDP1 points
its flat parameters at an unsharded storage, ZeRO-3 its parameters' ``data``. These are what runs a rank
out of memory, counted here apart from the parameters and from the activations. Training thread only;
torch.distributed and deepspeed are looked up only where the job has imported them.
"""

from __future__ import annotations

import sys
import weakref

import torch


def dtensor_class():
    """DTensor's class where the job has imported it, else None."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def local(tensor):
    """The part of ``tensor`` this rank holds: a DTensor's local shard, any other tensor itself."""
    dtensor = dtensor_class()
    if dtensor is not None and isinstance(tensor, dtensor):
        with torch.no_grad():  # a view, not a step in the job's graph
            return tensor.to_local()
    return tensor


def zero3_partitions(params) -> list:
    """DeepSpeed ZeRO-3's partitions of ``params`` (their ``ds_tensor``): the shards the rank keeps of
    parameters whose own ``data`` is empty between forward passes. [] where DeepSpeed is not loaded."""
    if "deepspeed" not in sys.modules:
        return []
    found = (getattr(p, "ds_tensor", None) for p in params)
    return [t for t in found if isinstance(t, torch.Tensor)]


def fsdp_modules(roots) -> list[tuple]:
    """(inside, around, recurse) for each sharding module in the trees of ``roots``: ``inside``'s forward
    pre-hook runs with the parameters gathered (``inside.parameters(recurse)``), ``around``'s forward hook
    after they were freed.

    FSDP2 gathers in its module's own pre-hook and frees in its forward hook, both run before or after
    the probe's; FSDP1 gathers inside its ``forward`` around the module it wraps. DeepSpeed's ZeRO-3
    does as FSDP2 on every module that owns parameters (they carry its ``ds_id``).
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    fsdp2 = getattr(fsdp, "FSDPModule", None)
    fsdp1 = getattr(fsdp, "FullyShardedDataParallel", None)
    zero3 = "deepspeed" in sys.modules
    found = []
    for root in roots:
        for m in root.modules():
            if fsdp2 is not None and isinstance(m, fsdp2):
                found.append((m, m, True))  # (its children's, unless FSDP modules of their own: DTensors)
            elif fsdp1 is not None and isinstance(m, fsdp1):
                found.append((m.module, m, False))  # (the flat parameters sit on the module it wraps)
            elif zero3 and any(hasattr(p, "ds_id") for p in m.parameters(recurse=False)):
                found.append((m, m, False))
    return found


class Gathered:
    """The unsharded parameters gathered, as seen on FSDP's modules inside their forward passes.

    FSDP2 keeps one unsharded parameter object per parameter and frees or refills its storage; FSDP1
    keeps its flat parameters and points them at a sharded or an unsharded storage. So the parameters
    seen once are weakly remembered and their storages read again: what is allocated now and is not
    the storage it had at the latest step's end (``settle``: the shard, or none) is gathered now.
    ``peak`` is the most seen at once since the running step started; ``shown`` the peak of the
    latest measured step.
    """

    __slots__ = ("_params", "_resting", "peak", "shown")

    def __init__(self):
        self._params: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> parameter
        self._resting: dict[int, tuple] = {}  # id -> (data_ptr, device) at the latest step's end
        self.peak = 0
        self.shown: int | None = None

    def note(self, module, recurse: bool) -> None:
        """Inside an FSDP module's forward: remember its parameters (not DTensors: those are shards)."""
        dtensor = dtensor_class()
        params = self._params
        for p in module.parameters(recurse=recurse):
            if id(p) not in params and (dtensor is None or not isinstance(p, dtensor)):
                params[id(p)] = p

    def settle(self) -> None:
        """At a step's end, everything resharded: the storages the parameters have now are not gathered."""
        resting = {}
        for key, p in list(self._params.items()):
            storage = p.untyped_storage()
            resting[key] = (storage.data_ptr(), p.device)
        self._resting = resting

    def keys(self) -> dict[tuple, int]:
        """(data_ptr, device) -> bytes of every gathered storage allocated now."""
        found: dict[tuple, int] = {}
        resting = self._resting
        for key, p in list(self._params.items()):
            storage = p.untyped_storage()
            where = (storage.data_ptr(), p.device)
            if where[0] and resting.get(key) != where:
                found[where] = storage.nbytes()
        return found

    def read(self) -> dict[tuple, int]:
        """What is gathered now (see keys), with the step's peak raised to it."""
        found = self.keys()
        now = sum(found.values())
        if now > self.peak:
            self.peak = now
        return found

    @property
    def seen(self) -> bool:
        """Whether any FSDP module's unsharded parameters were seen."""
        return bool(self._params)

    def start_step(self) -> None:
        self.peak = 0

    def show_peak(self) -> None:
        self.shown = self.peak if self._params else None
