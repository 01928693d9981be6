"""Helpers for the tests that hold the probe's figures against the truth in the same process."""

from __future__ import annotations

import torch


def storage_bytes(tensors) -> int:
    """Bytes of the tensors' storages, each storage counted once, as the probe counts them."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def state_tensors(optimizer, device_type: str | None = None) -> list:
    """Every tensor in the optimizer's state, lists and tuples included (LBFGS keeps its history in
    lists); with ``device_type``, those on that kind of device alone (on CUDA, Adam keeps its step
    counts on the CPU, which the probe counts on the CPU's row, not the GPU's)."""
    found = []
    for state in optimizer.state.values():
        for value in state.values():
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if torch.is_tensor(item) and device_type in (None, item.device.type):
                    found.append(item)
    return found


def fresh_reading(probe, forward):
    """Ask for a reading as a monitor would, and let the job's next forward pass (``forward()``,
    run without autograd) take it; the categories it published."""
    probe.board.want_reading(probe.clock())
    with torch.no_grad():
        forward()
    return probe.report().devices[0].categories


def saved_bytes(model, forward) -> int:
    """Bytes autograd saves for backward while ``forward()`` runs, each storage once, the model's own
    parameters and buffers left out: the activations, counted as the probe counts them."""
    kept: list = []

    def pack(tensor):
        kept.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    own = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    return storage_bytes(t for t in kept if t.untyped_storage().data_ptr() not in own)
