"""Activations: the tensors autograd saves for backward, counted once per storage while the graph holds them.

The pack hook (pushed by the Tracker only inside watched forward passes) hands the graph a ``SavedTensor``
in place of each tensor; its release tells when the graph lets go. ``Activations`` keeps the bytes
held now per device, their peak in the running step, the peak shown for the latest measured step,
and what a step saved and still held at its end (a graph kept past its step). Training thread only.
"""

from __future__ import annotations

from typing import Any, Callable

from gputui.probe.categories import ACTS, SLOTS


class SavedTensor:
    """What the graph holds instead of a saved tensor, so the probe knows when the graph lets go."""

    __slots__ = ("tensor", "key", "owner")
    tensor: Any  # the saved tensor (detached when it was an op's own output)
    key: tuple | None  # (storage, device) while counted; None when not counted
    owner: Activations

    def __del__(self):
        # The graph let go of this saved tensor (after backward, or when the graph was dropped).
        key = self.key
        if key is not None:
            try:
                self.owner.release(key)
            except Exception:
                pass


def computed_by_graph(tensor) -> bool:
    """Whether autograd computed ``tensor`` from a tensor it computed too, so its storage was made
    by this graph's forward pass; not when it is data (no grad_fn) or a view of a leaf (a weight or
    an input that requires grad: its node leads straight to AccumulateGrad, the leaf's own node)."""
    node = tensor.grad_fn
    return node is not None and not any(hasattr(before, "variable") for before, _ in node.next_functions)


class Slices:
    """The views of one storage saved for backward, when the first one used less than half of it and
    was not computed by the graph (a batch sliced from a dataset).

    What the graph uses of it is the elements of its views: their bytes added up, but never more
    than the union of the byte ranges they span (two overlapping slices of a dataset: the
    inputs and the targets one token later), nor than the storage. q, k and v split out of one
    projection are three views of a third each: together, the whole storage.
    """

    __slots__ = ("nbytes", "views", "spans", "used")

    def __init__(self, nbytes: int, tensor):
        self.nbytes = nbytes
        self.views: set = set()
        self.spans: list[tuple[int, int]] = []
        self.used = 0
        self.add(tensor)

    def add(self, tensor) -> int:
        """Take in one more view; the bytes it adds to what is counted."""
        view = (tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
        if view in self.views:
            return 0
        self.views.add(view)
        size = tensor.element_size()
        start = view[0] * size
        reach = sum((n - 1) * abs(st) for n, st in zip(view[1], view[2]) if n > 0) + 1
        before = self.counted()
        self.used += tensor.numel() * size
        self.spans = _union(self.spans + [(start, start + reach * size)])
        return self.counted() - before

    def counted(self) -> int:
        if not self.views:
            return 0
        return min(self.used, sum(end - start for start, end in self.spans), self.nbytes)


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class Activations:
    """Bytes saved for backward and held now, per device and in all; their peaks; what a step kept.

    ``watched``: whether the probe looks at saved tensors at all. ``model_keys`` (set from each full
    tally): storages that are parameters, buffers or state, never counted here. ``saw_tensor``: a
    callable(tensor) told of each saved tensor while allocation sites are recorded.
    """

    __slots__ = ("problems", "watched", "model_keys", "saw_tensor", "packs", "_live", "_bytes", "_now", "_peak",
                 "_shown", "_saved_this_step")

    def __init__(self, problems, watched: bool = True):
        self.problems = problems
        self.watched = watched
        self.model_keys: frozenset = frozenset()
        self.saw_tensor: Callable[[Any], None] | None = None  # (set while allocation sites are recorded)
        self.packs = 0  # saved tensors seen since the count was last taken (see take_packs)
        # Live saved tensors, counted once per storage: (data_ptr, device) -> [wrappers, bytes(, Slices)].
        self._live: dict[tuple, list] = {}
        self._bytes: dict = {}  # torch.device -> bytes saved for backward, live
        self._now = 0  # the same on every device together
        self._peak = 0  # the most of it held at once since the running step started
        self._shown: tuple | None = None  # (bytes, step): the latest measured step's peak
        # Storages first saved during the running step: those still live at its end are a graph kept
        # past its step (StepRecord.activations_kept).
        self._saved_this_step: dict[tuple, None] = {}

    # -- the pack hook and the graph's release (hot: every tensor a watched forward pass saves) --------

    def pack(self, tensor):
        try:
            saved = SavedTensor()
            # An op's own output arrives still attached to the op's graph node: keeping it as is
            # would make node -> saved -> tensor -> node a cycle no collector can see.
            saved.tensor = tensor.detach() if tensor.requires_grad else tensor
            saved.key = None
            saved.owner = self
            self.packs += 1
            storage = tensor.untyped_storage()
            device = tensor.device
            key = (storage.data_ptr(), device)
            if key not in self.model_keys and key[0]:
                entry = self._live.get(key)
                if entry is None:
                    nbytes = storage.nbytes()
                    # A batch sliced out of a dataset tensor keeps the dataset alive, but the
                    # dataset is not an activation: count the slice the graph actually uses. A
                    # slice of what this forward pass computed (BERT's pooler: the first token of
                    # the last layer's output) keeps a storage only the graph holds: all of it.
                    used = tensor.numel() * tensor.element_size()
                    if used < nbytes // 2 and not computed_by_graph(tensor):
                        entry = [1, used, Slices(nbytes, tensor)]
                        whole = used * 4 >= nbytes
                    else:
                        entry, whole = [1, nbytes], True
                    self._live[key] = entry
                    # (inline: this runs for every tensor a watched forward pass saves)
                    self._bytes[device] = self._bytes.get(device, 0) + entry[1]
                    now = self._now = self._now + entry[1]
                    if now > self._peak:
                        self._peak = now
                    if whole:
                        # (A small slice of a big storage is data that was there before the step,
                        # first seen now: no memory this step kept.)
                        self._saved_this_step[key] = None
                else:
                    entry[0] += 1
                    if len(entry) > 2:  # another view of a sliced storage (q, k and v of one tensor)
                        grown = entry[2].add(tensor)
                        if grown:
                            entry[1] += grown
                            self._bytes[device] += grown
                            now = self._now = self._now + grown
                            self._peak = max(self._peak, now)
                saved.key = key
            if self.saw_tensor is not None:
                self.saw_tensor(tensor)
            return saved
        except Exception as exc:
            self.problems.record("saved-tensor hook", exc)
            return tensor

    def release(self, key) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self._live[key]
            device = key[1]
            self._bytes[device] = self._bytes.get(device, 0) - entry[1]
            self._now -= entry[1]

    # -- figures -----------------------------------------------------------------------------------

    def total(self) -> int:
        """Bytes held now on every device together."""
        return sum(self._bytes.values())

    def bytes_on(self, device) -> int:
        """Bytes held now on ``device`` (a torch.device)."""
        return self._bytes.get(device, 0)

    def add_to(self, counts: dict[str, list[int]]) -> None:
        """Add the bytes held now to a tally's rows (Categories.tally leaves them at 0)."""
        for device, nbytes in list(self._bytes.items()):
            if nbytes:
                counts.setdefault(str(device), [0] * SLOTS)[ACTS] += nbytes

    @property
    def peak(self) -> int:
        """The most held at once since the running step started."""
        return self._peak

    @property
    def shown(self) -> tuple[int, int] | None:
        """(bytes, step): the peak of the latest measured step (or forward pass), None before one."""
        return self._shown

    # -- step boundaries ---------------------------------------------------------------------------

    def take_packs(self) -> int:
        """Saved tensors seen since the last call (their hook calls are charged to the budget)."""
        packs, self.packs = self.packs, 0
        return packs

    def start_step(self) -> None:
        self._peak = self._now
        if self._saved_this_step:
            self._saved_this_step = {}

    def show_peak(self, step: int) -> None:
        """The running step's peak is the one to show, named by ``step``."""
        self._shown = (self._peak, step)

    def end_pass(self, step: int) -> None:
        """A job without an optimizer: a forward pass after a backward ends the pass before, whose
        peak is the one to show (named by ``step``, the steps counted so far)."""
        self._shown = (self._peak, step)
        self._peak = self._now

    def held_from_this_step(self) -> dict[tuple, list]:
        """What the running step saved and still holds: {key: live entry}, for kept_of() a step later."""
        live = self._live
        return {k: live[k] for k in self._saved_this_step if k in live}

    def kept_of(self, held: dict[tuple, list]) -> int:
        """Bytes of ``held`` (from held_from_this_step) still held now."""
        live = self._live
        # The same entry, not only the same key: a freed address is soon reused by the allocator.
        return sum(entry[1] for key, entry in held.items() if live.get(key) is entry)
