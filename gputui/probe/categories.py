"""Tensor categories: parameters, gradients, optimizer state, buffers and activations, tallied by storage.

The functions count what the optimizers and the models the job calls hold, each storage once, per
device; ``Categories`` keeps the optimizers and models found so far and the cheap path for CPU jobs
(parameters and state keep their size while the model keeps its shape). Training thread only.
"""

from __future__ import annotations

import weakref

import torch

from gputui.model import MemoryCategories
from gputui.probe.sharded import dtensor_class, local, zero3_partitions

# Category slots in a tally: each storage is counted once, in the first category that claims it.
PARAMS, GRADS, STATE, ACTS, BUFFERS = range(5)
SLOTS = 5


def model_parameters(optimizers, modules=()) -> list:
    """The optimizers' parameters, then the ``modules``' (frozen ones too; repeats are the caller's
    to skip)."""
    params = [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
    return params + [p for module in modules for p in module.parameters()]


def storage_of(tensor, dtensor=None) -> tuple[tuple, int] | None:
    """((data_ptr, device), bytes) of the storage a tensor keeps alive (a sharded DTensor's local shard,
    ``dtensor`` being the DTensor class where there is one); None for no tensor or no plain storage."""
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        if dtensor is not None and isinstance(tensor, dtensor):
            tensor = local(tensor)
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
    except Exception:  # sparse, meta or exotic subclasses have no plain storage
        return None
    return ((ptr, tensor.device), storage.nbytes()) if ptr else None


def tally(optimizers, saved_tensors=(), seen: set | None = None,
          lasting: set | None = None, modules=(), skip=()) -> dict[str, list[int]]:
    """Bytes per device ("cpu", "cuda:0") and category, deduplicated by storage.

    Parameters are the optimizers' and the ``modules``' (the models the job calls: frozen weights
    no optimizer holds, and the models of a loop that updates them by hand); gradients those of
    any of them; buffers the modules' (BatchNorm statistics, positional encodings).
    ``seen``, when given, collects the (data_ptr, device) keys of the storages counted;
    ``lasting`` those of parameters, buffers and optimizer state only (gradients are freed and
    their addresses reused from one step to the next). Sharded tensors (FSDP2's DTensors) count
    their local shard, DeepSpeed ZeRO-3's parameters their partition too; ``skip``: storage keys
    counted by none of them (the unsharded parameters FSDP gathered for forward and backward).
    """
    seen = set() if seen is None else seen
    seen.update(skip)
    totals: dict = {}
    dtensor = dtensor_class()

    def add(tensor, slot):
        found = storage_of(tensor, dtensor)
        if found is None or found[0] in seen:
            return
        key, nbytes = found
        seen.add(key)
        if lasting is not None and slot != GRADS:
            lasting.add(key)
        row = totals.get(key[1])
        if row is None:
            row = totals[key[1]] = [0] * SLOTS
        row[slot] += nbytes

    params = model_parameters(optimizers, modules)
    for p in params:
        add(p, PARAMS)
    for part in zero3_partitions(params):
        add(part, PARAMS)
    for p in params:
        if p.grad is not None:
            add(p.grad, GRADS)
    for opt in optimizers:
        for state in list(opt.state.values()):
            for value in list(state.values()) if isinstance(state, dict) else ():
                if isinstance(value, (list, tuple)):
                    for item in value:
                        add(item, STATE)
                else:
                    add(value, STATE)
    for module in modules:
        for buffer in module.buffers():
            add(buffer, BUFFERS)
    for tensor in saved_tensors:
        add(tensor, ACTS)
    return {str(device): row for device, row in totals.items()}


def categories_of(row: list[int] | None, allocated: int | None = None,
                  activations: tuple[int, int] | None = None, seen: bool = True,
                  gathered: int | None = None) -> MemoryCategories | None:
    """MemoryCategories from a tally row; ``other`` only where the allocator's total is known.

    ``activations``, (bytes, step), reports a measured step's peak in place of what is held now
    (see Tracker.activations_shown); ``other`` is still what the row leaves of ``allocated`` now.
    Not ``seen`` (no forward pass watched), the activations are unknown: None, not 0. ``gathered``:
    the unsharded parameters FSDP2 gathered at the latest measured step's peak (None: not sharded).
    """
    if row is None:
        return None
    other = None if allocated is None else max(0, allocated - sum(row))
    acts: int | None
    step: int | None
    acts, step = (row[ACTS], None) if activations is None else activations
    if not seen:
        acts, step = None, None
    return MemoryCategories(row[PARAMS], row[GRADS], row[STATE], acts, other, buffers=row[BUFFERS],
                            activations_step=step, gathered=gathered)


class Categories:
    """The optimizers and top-level models the hooks found: what a tally counts.

    ``optimizers`` and ``modules`` are weak sets the hooks add to. ``tally()`` counts them and
    remembers which storages are parameters, buffers or state (``model_keys``: saved tensors with
    those storages are not activations).
    """

    def __init__(self):
        self.optimizers: weakref.WeakSet = weakref.WeakSet()
        self.modules: weakref.WeakSet = weakref.WeakSet()  # modules called at the top level
        self.model_keys: frozenset = frozenset()  # storages of parameters, buffers, state
        # (device, parameter bytes, optimizer-state bytes there, torch.device, shape of the model,
        # buffer bytes) at the latest full tally on that device
        self._static: tuple | None = None

    def tally(self, skip=()) -> dict[str, list[int]]:
        """Bytes per device and category right now, activations left at 0 (see Activations.add_to);
        ``skip``: storage keys of no category (see tally)."""
        keys: set = set()
        counts = tally(list(self.optimizers), (), lasting=keys, modules=list(self.modules), skip=skip)
        self.model_keys = frozenset(keys)
        return counts

    def model_storages(self) -> set:
        """(data_ptr, device) of every parameter, gradient, buffer and optimizer-state storage."""
        keys: set = set()
        tally(list(self.optimizers), (), keys, modules=list(self.modules))
        return keys

    def quick_row(self, device: str | None, with_shape: bool) -> list[int] | None:
        """``device``'s row without a full tally, activations at 0, or None where one is needed.

        Parameters and optimizer state keep the size the last full tally counted while the model
        and the optimizer's state keep their shape (checked when ``with_shape``); gradients come and
        go and are summed now. A full tally costs a few microseconds per tensor.
        """
        static = self._static
        if static is None or device is None or static[0] != device:
            return None
        if with_shape and static[4] != self._shape_of_model():
            return None
        return [static[1], self._gradient_bytes(device), static[2], 0, static[5]]

    @property
    def torch_device(self):
        """The device of the latest full tally's remembered row, as a torch.device (None before one)."""
        return None if self._static is None else self._static[3]

    @staticmethod
    def main_device(counts: dict[str, list[int]]) -> str | None:
        """The device that holds most parameter bytes in a tally (None in an empty one)."""
        return max(counts, key=lambda d: counts[d][PARAMS]) if counts else None

    def settle(self, device: str | None, counts: dict[str, list[int]]) -> list[int] | None:
        """After a full tally: remember ``device``'s row for quick_row(), and return it."""
        row = counts.get(device) if device else None
        if row is not None and device is not None:
            self._static = (device, row[PARAMS], row[STATE], torch.device(device), self._shape_of_model(),
                            row[BUFFERS])
        return row

    def _shape_of_model(self) -> tuple:
        """Changes when parameters, optimizer state or models are added or dropped (then a full tally)."""
        return tuple((id(opt), len(opt.state), sum(len(g["params"]) for g in opt.param_groups),
                      _entry_shape(opt.state)) for opt in list(self.optimizers)) + tuple(
            sorted(id(m) for m in list(self.modules)))

    def _gradient_bytes(self, device: str) -> int:
        """Gradients on ``device`` now, each storage once, as tally() counts them: a gradient that is a view
        of a bigger storage keeps all of it (a ZeRO-1/2 rank's partition of the gradients, when it lies
        inside one parameter's gradient)."""
        total = 0
        seen: set = set()
        dtensor = dtensor_class()
        for p in model_parameters(list(self.optimizers), list(self.modules)):
            found = storage_of(p.grad, dtensor)
            if found is None or found[0] in seen or str(found[0][1]) != device:
                continue
            seen.add(found[0])
            total += found[1]
        return total


def _entry_shape(state) -> tuple:
    """The keys of an optimizer's first state entry and the length of its lists: LBFGS keeps all its
    state, its history lists included, in one entry whose count never changes."""
    entry = next(iter(state.values()), None)
    if not isinstance(entry, dict):
        return ()
    return tuple(len(v) if isinstance(v, (list, tuple)) else -1 for v in entry.values())
