"""Sharded training (FSDP2's ``fully_shard``): each rank's local shards, and the unsharded parameters it gathers.

FSDP2's parameters, gradients and Adam's moments are DTensors: a rank holds only its local shard, which
``to_local()`` gives (a DTensor's own storage has no data pointer). For forward and backward FSDP2
all-gathers each module's parameters into plain unsharded ones and sets them on the module; these are
what runs a rank out of memory, counted here apart from the parameters and from the activations.
Training thread only; torch.distributed is looked up only where the job has imported it.
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


def fsdp_modules(roots) -> list:
    """The FSDP2 modules (``fully_shard``) in the trees of ``roots``, outermost first."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    kind = getattr(fsdp, "FSDPModule", None) if fsdp is not None else None
    if kind is None:
        return []
    return [m for root in roots for m in root.modules() if isinstance(m, kind)]


class Gathered:
    """The unsharded parameters FSDP2 gathered, as seen on its modules inside their forward passes.

    FSDP2 keeps one unsharded parameter object per parameter and frees or refills its storage, so
    the ones seen once are weakly remembered and their storages read again: what is allocated now
    is what is gathered now. ``peak`` is the most seen at once since the running step started;
    ``shown`` the peak of the latest measured step.
    """

    __slots__ = ("_params", "peak", "shown")

    def __init__(self):
        self._params: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> parameter
        self.peak = 0
        self.shown: int | None = None

    def note(self, module) -> None:
        """Inside an FSDP module's forward: remember its unsharded (plain) parameters."""
        dtensor = dtensor_class()
        params = self._params
        for p in module.parameters():
            if id(p) not in params and (dtensor is None or not isinstance(p, dtensor)):
                params[id(p)] = p

    def keys(self) -> dict[tuple, int]:
        """(data_ptr, device) -> bytes of every gathered storage allocated now."""
        found: dict[tuple, int] = {}
        for p in list(self._params.values()):
            storage = p.untyped_storage()
            ptr = storage.data_ptr()
            if ptr:
                found[(ptr, p.device)] = storage.nbytes()
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
