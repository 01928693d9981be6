"""The ledger: live tensor bytes by category while a training step runs, and the peak of each phase.

A TorchDispatchMode sees every tensor an operator returns, on the meta device as on a real one; each
storage is counted once, from the first tensor seen on it until torch frees it (a weakref finalizer on
the storage: torch keeps a storage's Python object alive as long as the storage itself). A storage
starts as ``other``; autograd's pack hook marks it ``activations`` (saved for backward) and, at each
phase's end, the model's parameters, buffers, gradients and the optimizer's state are marked as such;
state a GPU job keeps on the host (Adam's step counters) is marked ``host`` and leaves the device's count.
A DTensor (a sharded parameter, its gradient and state) counts as the rank's local shard's storage;
a storage resized in place (FSDP2 frees and re-makes its gathered parameters so) is told with ``resized``.
A phase's peak keeps which storages were live at its highest point, so its breakdown uses what those
storages turned out to be.
"""

from __future__ import annotations

import itertools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gputui.model import TENSOR_CATEGORIES

OTHER, ACTIVATIONS, HOST = "other", "activations", "host"


class Peak:
    """A phase's highest total and the storages (serial -> bytes) live at that moment."""

    def __init__(self):
        self.total = -1
        self.live: dict[int, int] = {}


class Ledger(TorchDispatchMode):
    """Counts live storages; ``phase(name)`` starts a phase whose peak is kept in ``peaks[name]``."""

    def __init__(self):
        super().__init__()
        self._serials = itertools.count(1)
        self._live: dict[int, int] = {}  # id(storage) -> serial, while it lives
        self._bytes: dict[int, int] = {}  # serial -> bytes, while it lives
        self.kind: dict[int, str] = {}  # serial -> category, kept after death for the peaks
        self.total = 0  # live bytes on the device: every storage but the host's
        self.host = 0  # live bytes marked HOST
        self.activations = 0  # bytes saved for backward, live now
        self.activations_peak = 0  # their most at once: the probe's activations_peak
        self.peaks: dict[str, Peak] = {}
        self._peak: Peak | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):  # an op returns tensors, or a few
            if isinstance(tensor, torch.Tensor):
                self.track(tensor)
        return out

    # -- counting

    def track(self, tensor: torch.Tensor) -> int:
        """The serial of ``tensor``'s storage, counting the storage if it is new."""
        to_local = getattr(tensor, "to_local", None)
        if to_local is not None:  # a DTensor (FSDP2's sharded parameter): the rank's own shard is what it holds
            tensor = to_local()
        storage = tensor.untyped_storage()
        serial = self._live.get(id(storage))
        if serial is not None:
            return serial
        serial = next(self._serials)
        nbytes = storage.nbytes()
        self._live[id(storage)] = serial
        self._bytes[serial] = nbytes
        self.kind[serial] = OTHER
        weakref.finalize(storage, self._free, id(storage), serial).atexit = False
        self.total += nbytes
        self._peaked()
        return serial

    def _peaked(self) -> None:
        peak = self._peak
        if peak is not None and self.total > peak.total:
            peak.total = self.total
            peak.live = dict(self._bytes)

    def resized(self, storage: torch.UntypedStorage) -> None:
        """``storage`` was resized in place (no operator returns it): counted at its new size, if counted.
        Told by whoever resizes (sharded.py), not found by reading every storage's size at each operator:
        that read made the 850M GPT's sharded step 35 s slower."""
        serial = self._live.get(id(storage))
        if serial is None:  # not seen yet: counted at its size when an operator first returns it
            return
        nbytes = storage.nbytes()
        self._count(serial, nbytes - self._bytes[serial])
        self._bytes[serial] = nbytes
        self._peaked()

    def _count(self, serial: int, nbytes: int) -> None:
        """``nbytes`` more (fewer, where negative) live in storage ``serial``'s category."""
        if self.kind[serial] == HOST:
            self.host += nbytes
            return
        self.total += nbytes
        if self.kind[serial] == ACTIVATIONS:
            self.activations += nbytes

    def _free(self, key: int, serial: int) -> None:
        self._live.pop(key, None)
        self._count(serial, -self._bytes.pop(serial, 0))

    def mark(self, tensor: torch.Tensor, category: str) -> None:
        """``tensor``'s storage is ``category``'s (a device category, or HOST: off the device's count)."""
        serial = self.track(tensor)
        kind, nbytes = self.kind[serial], self._bytes[serial]
        if kind == HOST:  # the host's stays the host's (classify marks it again at every phase's end)
            return
        if kind == ACTIVATIONS:
            self.activations -= nbytes
        if category == HOST:
            self.total -= nbytes
            self.host += nbytes
        self.kind[serial] = category

    def saved(self, tensor: torch.Tensor) -> torch.Tensor:
        """Autograd's pack hook: a tensor kept for backward is an activation, unless it is already
        something the model holds (a parameter, a buffer)."""
        serial = self.track(tensor)
        if self.kind[serial] == OTHER:
            self.kind[serial] = ACTIVATIONS
            self.activations += self._bytes[serial]
            self.activations_peak = max(self.activations_peak, self.activations)
        return tensor

    # -- phases

    def phase(self, name: str) -> None:
        """Start (or go on with) phase ``name``: its peak counts from what is live now."""
        peak = self.peaks.setdefault(name, Peak())
        if self.total > peak.total:
            peak.total, peak.live = self.total, dict(self._bytes)
        self._peak = peak

    def stop(self) -> None:
        self._peak = None

    def now(self) -> dict[str, int]:
        """Live bytes by category at this moment."""
        return self.breakdown(self._bytes)

    def peak(self, name: str) -> dict[str, int]:
        """Bytes by category at phase ``name``'s peak."""
        return self.breakdown(self.peaks[name].live)

    def breakdown(self, live: dict[int, int]) -> dict[str, int]:
        """The device's bytes by category: HOST storages left out (a peak taken before they were marked
        may hold some)."""
        out = dict.fromkeys(TENSOR_CATEGORIES, 0)
        for serial, nbytes in live.items():
            kind = self.kind[serial]
            if kind != HOST:
                out[kind] += nbytes
        return out
