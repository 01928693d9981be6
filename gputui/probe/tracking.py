"""Watch a training loop from inside: optimizer steps, forward/backward/optimizer phases, tensor categories.

Global optimizer step hooks find the optimizers (and through them the parameters, gradients and
optimizer state); module forward hooks mark the forward pass and, only while a model's forward runs,
autograd's saved-tensor hooks see the activations kept for backward. Every hook catches everything:
the probe never raises into the user's code.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from gputui.analysis.leaks import growth_floor
from gputui.model import MemoryCategories, StepRecord
from gputui.model.probe import (
    LIMIT_HOOKS_UNAVAILABLE,
    LIMIT_LOSS_OUTSIDE,
    LIMIT_NO_FORWARD,
    LIMIT_NOT_WATCHED,
)
from gputui.probe import allocator, compiled
from gputui.probe.board import (  # noqa: F401 - Problems: the hooks' error log
    LIGHT_FIGURES,
    Board,
    Problems,
    step_record,
)
from gputui.probe.host import MallocInUse, ResidentMemory
from gputui.probe.saved_tensor_hooks import SavedTensorHooks

IDLE, FORWARD, BACKWARD, OPTIMIZER = "idle", "forward", "backward", "optimizer"
# What one saved tensor costs the training thread with the hooks on (pack, unpack and release, each a
# call from C++ into Python), measured inside a real CPU training loop (torch 2.13, a shared 2-core
# machine: cold caches after each op make these calls cost far more than in a tight loop); counted
# against the readings budget.
PACK_COST = 12e-6
DEFAULT_BUDGET = 0.004  # share of step time the probe's readings may take
LEARN_STEPS = 3  # steps with global module hooks, to learn which modules run the forward pass
MEASURED_KEPT = 128  # measured steps kept beyond the window of recent steps
BASELINE_EVERY = 8  # measured steps in a row before one without readings (budgets below 1)
# A leak verdict can say what grows only from a measured step taken while it grows: once the per-step
# figure has grown past the verdict's noise floor since the latest measured step, the next step is
# measured whatever the budget, after at least this many steps, a gap that doubles while the growth
# lasts (up to EVIDENCE_MAX), so that a long leak costs a handful of extra steps, not one in sixteen.
EVIDENCE_STEPS = 16
EVIDENCE_MAX = 512
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


class _Saved:
    """What the graph holds instead of a saved tensor, so the probe knows when the graph lets go."""

    __slots__ = ("tensor", "key", "owner")

    def __del__(self):
        # The graph let go of this saved tensor (after backward, or when the graph was dropped).
        key = self.key
        if key is not None:
            try:
                self.owner._release(key)
            except Exception:
                pass


# Category slots in a tally: each storage is counted once, in the first category that claims it.
PARAMS, GRADS, STATE, ACTS, BUFFERS = range(5)
SLOTS = 5


def model_parameters(optimizers, modules=()) -> list:
    """The optimizers' parameters, then the ``modules``' (frozen ones too; repeats are the caller's
    to skip)."""
    params = [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
    return params + [p for module in modules for p in module.parameters()]


def tally(optimizers, saved_tensors=(), seen: set | None = None,
          lasting: set | None = None, modules=()) -> dict[str, list[int]]:
    """Bytes per device ("cpu", "cuda:0") and category, deduplicated by storage.

    Parameters are the optimizers' and the ``modules``' (the models the job calls: frozen weights
    no optimizer holds, and the models of a loop that updates them by hand); gradients those of
    any of them; buffers the modules' (BatchNorm statistics, positional encodings).
    ``seen``, when given, collects the (data_ptr, device) keys of the storages counted;
    ``lasting`` those of parameters, buffers and optimizer state only (gradients are freed and
    their addresses reused from one step to the next).
    """
    seen = set() if seen is None else seen
    totals: dict = {}

    def add(tensor, slot):
        if not isinstance(tensor, torch.Tensor):
            return
        try:
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
        except Exception:  # sparse, meta or exotic subclasses have no plain storage
            return
        if not ptr:
            return
        device = tensor.device
        key = (ptr, device)
        if key in seen:
            return
        seen.add(key)
        if lasting is not None and slot != GRADS:
            lasting.add(key)
        row = totals.get(device)
        if row is None:
            row = totals[device] = [0] * SLOTS
        row[slot] += storage.nbytes()

    params = model_parameters(optimizers, modules)
    for p in params:
        add(p, PARAMS)
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
                  activations: tuple[int, int] | None = None, seen: bool = True) -> MemoryCategories | None:
    """MemoryCategories from a tally row; ``other`` only where the allocator's total is known.

    ``activations``, (bytes, step), reports a measured step's peak in place of what is held now
    (see Tracker.activations_shown); ``other`` is still what the row leaves of ``allocated`` now.
    Not ``seen`` (no forward pass watched), the activations are unknown: None, not 0.
    """
    if row is None:
        return None
    other = None if allocated is None else max(0, allocated - sum(row))
    acts, step = (row[ACTS], None) if activations is None else activations
    if not seen:
        acts, step = None, None
    return MemoryCategories(row[PARAMS], row[GRADS], row[STATE], acts, other, buffers=row[BUFFERS],
                            activations_step=step)


class Slices:
    """The views of one storage saved for backward, when the first one used less than half of it.

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


@dataclass
class _Reading:
    """Memory on the step's device at one phase boundary."""

    allocated: int
    peak: int | None = None  # the allocator's all-time peak (CUDA), None on CPU
    stats: dict | None = None  # the full memory_stats (CUDA)
    tally: dict | None = None  # the category tally (CPU)
    host: int | None = None  # the process's resident memory (at step ends)
    heap: int | None = None  # bytes the C allocator has handed out (at step ends)


def _phase_peak(start: _Reading | None, end: _Reading | None) -> int | None:
    """Highest allocation between two readings, without resetting the allocator's peak counter.

    If the all-time peak rose between the readings, it rose inside this phase, so it is the phase's
    exact peak; otherwise the best lower bound is the larger of the two readings.
    """
    if start is None or end is None:
        return None
    if start.peak is not None and end.peak is not None and end.peak > start.peak:
        return end.peak
    return max(start.allocated, end.allocated)


class Tracker:
    """The hooks and the per-step bookkeeping. Runs on the training thread only: its hooks are called
    by torch from the job's own calls; what other threads may see it puts on the Board."""

    def __init__(
        self,
        *,
        activations: bool = True,
        budget: float = DEFAULT_BUDGET,
        max_steps: int = 600,
        clock=time.perf_counter,
        wallclock=time.time,
        board: Board | None = None,
    ):
        self.activations = activations
        self.budget = budget  # fraction of step time the per-step readings may cost
        self.clock = clock
        self.wallclock = wallclock
        self.board = board if board is not None else Board(max_steps=max_steps, measured_kept=MEASURED_KEPT)
        self.problems = self.board.problems
        self.optimizers: weakref.WeakSet = weakref.WeakSet()
        # StepRecords of measured steps, and (step, ended_at, duration, device) tuples of the others:
        # a frozen dataclass per step costs the training thread more than the tuple. The logs live on
        # the board, where the socket thread reads them.
        self._steps: deque = self.board.steps
        self.step_count = 0
        self.active = False
        self.hook_seconds = 0.0  # time spent in readings on the training thread
        self.on_step_end = None  # callable(step_number), set by the probe (site recording, re-arming)
        # callable(), set by the probe: publishes a fresh reading if a monitor asked for one. Called at
        # the start of a forward pass, so a job in long steps, before its first step or without an
        # optimizer still gets fresh figures, read here, on its own thread.
        self.on_forward = None
        self.last_reading: _Reading | None = None  # the latest measured step's end reading
        self._installed_at = clock()
        self.saw_tensor = None  # callable(tensor), set while allocation sites are recorded
        self._primary = None  # weakref to the optimizer whose step() ends a training step
        self._device: str | None = None  # the device that holds most parameter bytes
        # Live saved tensors, counted once per storage: (data_ptr, device) -> [wrappers, bytes].
        self._live: dict[tuple, list] = {}
        # Storages first saved during the running step: those still live at its end are a graph kept
        # past its step (StepRecord.activations_kept).
        self._saved_this_step: dict[tuple, None] = {}
        # (the latest measured step's record, {key: live entry} of what it saved and held at its end):
        # checked again at the next step's end (see _revise_kept)
        self._kept_check: tuple | None = None
        self._light_spent = 0.0  # seconds the readings of unmeasured steps have cost
        self._tracked = 0  # tracked bytes at the latest measured step (CPU: heap figures below it are not ours)
        self._activation_bytes: dict = {}  # torch.device -> bytes saved for backward, live
        self._acts_now = 0  # the same on every device together
        self._acts_peak = 0  # the most of it held at once since the running step started
        self._peak_shown: tuple | None = None  # (bytes, step): the latest measured step's peak
        self._model_keys: frozenset = frozenset()  # storages of parameters, buffers, state
        # (device, parameter bytes, optimizer-state bytes there, torch.device, shape of the model,
        # buffer bytes) at the latest full tally
        self._static: tuple | None = None
        self._local = threading.local()
        self._handles: list = []
        self._module_handles: list = []
        self._pre_handles: list = []
        self._armed = False  # the hooks that readings need are installed
        self.last_measured = False  # the latest step has a full StepRecord
        self._typical: float | None = None  # smoothed duration of unmeasured steps
        self._hook_at_start = 0.0  # hook_seconds when the running step started
        self._excess = 0.0  # measured steps' untimed cost, estimated (see _end_step)
        self._in_a_row = 0  # measured steps in a row
        # (which light figure, its value, step) at the latest measured step, and the steps to wait
        # before growth past it asks for a measured step (see EVIDENCE_STEPS)
        self._evidence_base: tuple | None = None
        self._evidence_gap = EVIDENCE_STEPS
        self._evidence_wanted = False
        self.evidence_steps = 0  # steps measured because the judged figure grew, so far
        self._evidence_now = False  # the running step is measured because the judged figure grew
        self.last_evidence = False  # ... and the latest step that ended was
        self._roots: weakref.WeakSet = weakref.WeakSet()  # modules called at the top level
        self._roots_learned = False
        self._phase = IDLE
        self._step_started: float | None = None
        self._measuring = True
        self._marks: dict[str, _Reading] = {}
        self._peaks: dict[str, int] = {}
        self._phase_start: _Reading | None = None
        self._elapsed = 0.0  # total step time seen, for the budget
        self._packs = 0  # saved tensors seen since the last step started
        self.resident = ResidentMemory()
        self.malloc = MallocInUse()
        # The pack/unpack pair, pushed only inside watched forward passes. Where this torch gives
        # no look at autograd's hook stack, activations are not watched (a problem says why).
        self.saved_hooks = SavedTensorHooks(self._pack, self._unpack, self.problems)
        if not self.saved_hooks.available:
            self.activations = False

    # -- installing -------------------------------------------------------------------------------

    def install(self) -> None:
        if self.active:
            return  # installed twice, its hooks would run twice: every step counted twice
        self._step_started = None  # time without the hooks is no step of ours
        self._installed_at = self.clock()
        self._phase = IDLE
        # Only the optimizer post-hook stays for good: it counts steps. The hooks that readings need
        # (optimizer pre-hook, module hooks, saved tensors) are armed only for measured steps, so
        # the other steps pay for one hook call and nothing else: the model's own calls take
        # nn.Module's fast path.
        self._handles = [register_optimizer_step_post_hook(self._optimizer_post)]
        self._arm()
        self.active = True

    def uninstall(self) -> None:
        self.active = False
        self._disarm()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _arm(self) -> None:
        if self._armed:
            return
        self._pre_handles = [register_optimizer_step_pre_hook(self._optimizer_pre)]
        if self._roots_learned:
            self._hook_module_roots()
        else:
            compiled.quiet_global_hooks_warning()
            self._module_handles = [
                torch.nn.modules.module.register_module_forward_pre_hook(self._module_pre),
                torch.nn.modules.module.register_module_forward_hook(
                    self._module_post, always_call=True),
            ]
        self._armed = True

    def _disarm(self) -> None:
        if not self._armed:
            return
        for handle in self._pre_handles + self._module_handles:
            handle.remove()
        self._pre_handles, self._module_handles = [], []
        self._armed = False
        local = self._local
        local.depth = 0
        if getattr(local, "pushed", False):  # a step ended inside a forward pass: leave no hooks behind
            local.pushed = False
            self.saved_hooks.pop()

    def _hook_roots(self) -> None:
        """Swap the global module hooks for hooks on the top-level modules seen so far.

        Global hooks send every module call through nn.Module's slow path; after a few steps the
        probe knows which modules start a forward pass and watches only those.
        """
        self._roots_learned = True
        if self._armed:
            self._hook_module_roots()

    def _hook_module_roots(self) -> None:
        for handle in self._module_handles:
            handle.remove()
        self._module_handles = []
        roots = list(self._roots)
        problems = self.problems
        wrapped = {id(compiled.original(m, problems)) for m in roots
                   if compiled.is_compiled_wrapper(m, problems)}
        for module in roots:
            if id(module) in wrapped:
                continue  # runs inside a compiled wrapper: hooks there would be traced
            self._module_handles.append(module.register_forward_pre_hook(self._module_pre))
            self._module_handles.append(
                module.register_forward_hook(self._module_post, always_call=True))

    # -- reading memory ---------------------------------------------------------------------------

    def tally(self) -> dict[str, list[int]]:
        """Bytes per device and category right now: parameters, gradients, state, activations."""
        keys: set = set()
        counts = tally(list(self.optimizers), (), lasting=keys, modules=list(self._roots))
        # Saved tensors with these storages are parameters or state, not activations.
        self._model_keys = frozenset(keys)
        for device, nbytes in list(self._activation_bytes.items()):
            if nbytes:
                counts.setdefault(str(device), [0] * SLOTS)[ACTS] += nbytes
        return counts

    def may_spend(self) -> bool:
        """Whether a reading now keeps the probe inside its share of the time seen so far.

        The running step counts, so a job stuck in a long step, or one that never steps, earns its
        readings as time passes.
        """
        now = self.clock()
        since = self._step_started if self._step_started is not None else self._installed_at
        return self.hook_seconds + self._excess <= self.budget * (self._elapsed + now - since)

    def activation_bytes(self) -> int:
        return sum(self._activation_bytes.values())

    @property
    def forward_seen(self) -> bool:
        """Whether the hooks see the models' forward passes, and so the activations they save."""
        return self.activations and bool(self._roots)

    def limits(self) -> tuple[str, ...]:
        """What the probe cannot see in this job, said in the report itself."""
        if not self.activations:
            return (LIMIT_NOT_WATCHED if self.saved_hooks.available else LIMIT_HOOKS_UNAVAILABLE,)
        if not self._roots:
            return (LIMIT_NO_FORWARD,) if self.step_count else ()
        return (LIMIT_LOSS_OUTSIDE,)

    def activations_shown(self) -> tuple[int, int] | None:
        """(bytes, step) to report as activations instead of what is held now, or None for "now".

        Inside a measured step's forward or backward the saved tensors held now are the figure;
        anywhere else (a step's end, after backward freed its graph, or a step the hooks do not
        watch) it is the latest measured step's peak, named by its step, never a 0 that only
        means "not watched".
        """
        if self._measuring and self._phase in (FORWARD, BACKWARD):
            return None
        return self._peak_shown

    def _release(self, key) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self._live[key]
            device = key[1]
            self._activation_bytes[device] = self._activation_bytes.get(device, 0) - entry[1]
            self._acts_now -= entry[1]

    def model_storages(self) -> set:
        """(data_ptr, device) of every parameter, gradient, buffer and optimizer-state storage."""
        keys: set = set()
        tally(list(self.optimizers), (), keys, modules=list(self._roots))
        return keys

    def _read(self, with_tally: bool) -> _Reading | None:
        """Memory on the step's device now: the allocator's counters on CUDA, tracked bytes on CPU."""
        device = self._device
        if device is not None and device.startswith("cuda") and allocator.cuda_ready():
            stats = torch.cuda.memory_stats(torch.device(device))
            return _Reading(
                allocated=int(stats.get("allocated_bytes.all.current", 0)),
                peak=int(stats.get("allocated_bytes.all.peak", 0)),
                stats=stats,
                tally=self.tally() if with_tally else None,
            )
        static = self._static
        if static is not None and static[0] == device and (
                not with_tally or static[4] == self._shape_of_model()):
            # Parameters and optimizer state keep the size the last full tally counted while the
            # model and the optimizer's state keep their shape; gradients come and go, activations
            # are counted as they are saved. A full tally costs a few microseconds per tensor.
            grads = self._gradient_bytes(device)
            acts = self._activation_bytes.get(static[3], 0)
            row = [static[1], grads, static[2], acts, static[5]]
            counts = {device: row} if with_tally else None
            return _Reading(allocated=sum(row), tally=counts)
        counts = self.tally()
        if device is None:
            device = self._choose_device(counts)
        row = counts.get(device) if device else None
        if row is not None:
            self._static = (device, row[PARAMS], row[STATE], torch.device(device), self._shape_of_model(),
                            row[BUFFERS])
        return _Reading(allocated=sum(row) if row else 0, tally=counts)

    def _shape_of_model(self) -> tuple:
        """Changes when parameters, optimizer state or models are added or dropped (then a full tally)."""
        return tuple((id(opt), len(opt.state), sum(len(g["params"]) for g in opt.param_groups))
                     for opt in list(self.optimizers)) + tuple(sorted(id(m) for m in list(self._roots)))

    def _gradient_bytes(self, device: str) -> int:
        total = 0
        on_cpu = device == "cpu"
        seen: set = set()
        for p in model_parameters(list(self.optimizers), list(self._roots)):
            g = p.grad
            if g is not None and id(g) not in seen and (g.is_cpu if on_cpu else str(g.device) == device):
                seen.add(id(g))
                total += g.nbytes
        return total

    def _choose_device(self, counts: dict[str, list[int]]) -> str | None:
        if counts:
            self._device = max(counts, key=lambda d: counts[d][PARAMS])
        return self._device

    def _mark(self, phase: str) -> None:
        """Close the running phase at a boundary and open ``phase``."""
        previous = self._phase
        self._phase = phase
        if not self._measuring:
            return
        started = self.clock()
        try:
            reading = self._read(with_tally=phase == IDLE)
            if phase == IDLE and reading.stats is None:
                # CPU jobs only (a CUDA job's verdict stands on the allocator): the C allocator's
                # bytes in use, else resident memory. Each read costs tens of microseconds in a
                # real loop, so only the one the verdict will use.
                heap = self.malloc.read()
                if heap is not None and heap >= reading.allocated:
                    reading.heap = heap
                else:
                    reading.host = self.resident.read()
            if previous != IDLE and self._phase_start is not None:
                peak = _phase_peak(self._phase_start, reading)
                if peak is not None:
                    self._peaks[previous] = max(self._peaks.get(previous, 0), peak)
            self._phase_start = reading
            self._marks.setdefault(phase, reading)  # a phase's first boundary: where the step started
        finally:
            self.hook_seconds += self.clock() - started

    # -- hooks (never raise) ----------------------------------------------------------------------

    def _module_pre(self, module, args):
        if _is_compiling():
            return None
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth or not self.active:
            return None
        if not self._roots_learned:
            self._roots.add(module)
            if not self.board.limits:  # (said as soon as a model is seen, not at the next reading)
                self.board.limits = self.limits()
            if compiled.is_compiled_wrapper(module, self.problems):
                # Before torch.compile traces its forward pass: watch it from outside from now on
                # (global hooks seen while tracing, removed later, would make it recompile).
                self._hook_roots()
        if self._phase == BACKWARD and self._primary is None:
            # No optimizer (yet): a forward pass after a backward is the only boundary there is.
            # The pass that ended shows its peak, as a step would (step 0: no step counted).
            self._peak_shown = (self._acts_peak, self.step_count)
            self._acts_peak = self._acts_now
            self._phase = IDLE
        if self.on_forward is not None:
            try:
                self.on_forward()
            except Exception as exc:
                self.problems.record("reading on request", exc)
        if self._phase != FORWARD:
            try:
                self._enter_forward()
            except Exception as exc:
                self.problems.record("forward pre-hook", exc)
        # Saved-tensor hooks only while a model's forward runs: outside it they would get in the
        # way of torch.func transforms, and a user's own hooks (save_on_cpu, checkpointing) win.
        # (push and pop never raise: saved_tensor_hooks records what goes wrong.)
        if self.activations and self._measuring and torch.is_grad_enabled():
            local.pushed = self.saved_hooks.push()
        return None

    def _module_post(self, module, args, output):
        if _is_compiling():
            return None
        local = self._local
        depth = getattr(local, "depth", 1) - 1
        local.depth = max(depth, 0)
        if depth <= 0 and getattr(local, "pushed", False):
            local.pushed = False
            self.saved_hooks.pop()
        return None

    def _pack(self, tensor):
        try:
            saved = _Saved()
            # An op's own output arrives still attached to the op's graph node: keeping it as is
            # would make node -> saved -> tensor -> node a cycle no collector can see.
            saved.tensor = tensor.detach() if tensor.requires_grad else tensor
            saved.key = None
            saved.owner = self
            self._packs += 1
            storage = tensor.untyped_storage()
            device = tensor.device
            key = (storage.data_ptr(), device)
            if key not in self._model_keys and key[0]:
                entry = self._live.get(key)
                if entry is None:
                    nbytes = storage.nbytes()
                    # A batch sliced out of a dataset tensor keeps the dataset alive, but the
                    # dataset is not an activation: count the slice the graph actually uses.
                    used = tensor.numel() * tensor.element_size()
                    if used < nbytes // 2:
                        entry = [1, used, Slices(nbytes, tensor)]
                        whole = used * 4 >= nbytes
                    else:
                        entry, whole = [1, nbytes], True
                    self._live[key] = entry
                    # (inline: this runs for every tensor a watched forward pass saves)
                    self._activation_bytes[device] = self._activation_bytes.get(device, 0) + entry[1]
                    now = self._acts_now = self._acts_now + entry[1]
                    if now > self._acts_peak:
                        self._acts_peak = now
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
                            self._activation_bytes[device] += grown
                            now = self._acts_now = self._acts_now + grown
                            self._acts_peak = max(self._acts_peak, now)
                saved.key = key
            if self.saw_tensor is not None:
                self.saw_tensor(tensor)
            return saved
        except Exception as exc:
            self.problems.record("saved-tensor hook", exc)
            return tensor

    def _unpack(self, saved):
        if type(saved) is not _Saved:
            return saved
        if self._phase not in (BACKWARD, OPTIMIZER) and self.active:
            try:
                self._mark(BACKWARD)
            except Exception as exc:
                self.problems.record("backward hook", exc)
        return saved.tensor

    def _enter_forward(self) -> None:
        if self._step_started is None:
            self._start_step()
        if self._phase == OPTIMIZER:
            return  # a closure's forward pass (LBFGS): part of optimizer.step(), and its peak
        self._mark(FORWARD)

    def _start_step(self, now: float | None = None) -> None:
        if self._packs:
            self.hook_seconds += self._packs * PACK_COST
            self._packs = 0
        self._step_started = self.clock() if now is None else now
        self._hook_at_start = self.hook_seconds
        self._acts_peak = self._acts_now
        if self._saved_this_step:
            self._saved_this_step = {}
        # Readings cost time on the training thread: take them only while the probe's share of
        # step time stays inside its budget (every step when steps are long or readings cheap).
        measuring = self.hook_seconds + self._excess <= self.budget * self._elapsed or not self._steps
        if measuring and self._in_a_row >= BASELINE_EVERY and self.budget < 1.0:
            measuring = False  # now and then a step without readings, to know what one costs
        self._evidence_now = self._evidence_wanted
        if self._evidence_wanted:
            measuring, self._evidence_wanted = True, False
        self._measuring = measuring
        if measuring or self._peaks:
            self._peaks = {}
            self._marks = {}

    def _optimizer_pre(self, optimizer, args, kwargs):
        if _is_compiling() or not self.active:
            return None
        try:
            primary = self._primary() if self._primary is not None else None
            if primary is not optimizer:
                self.optimizers.add(optimizer)  # (the primary one is in there already)
                if primary is None:
                    self._primary = weakref.ref(optimizer)
                    primary = optimizer
            if primary is optimizer:
                if self._step_started is None:
                    self._start_step()
                self._mark(OPTIMIZER)
        except Exception as exc:
            self.problems.record("optimizer pre-hook", exc)
        return None

    def _optimizer_post(self, optimizer, args, kwargs):
        if not self.active or _is_compiling():
            return None
        try:
            primary = self._primary and self._primary()
            if primary is None:  # the first one seen, or the old one is gone (a new optimizer)
                self.optimizers.add(optimizer)
                self._primary = weakref.ref(optimizer)
                primary = optimizer
            if primary is optimizer:
                self._end_step()
        except Exception as exc:
            self.problems.record("optimizer post-hook", exc)
        return None

    def _end_step(self) -> None:
        # At every step, right after the step's own work has pushed the probe's objects out of the
        # CPU caches: the unmeasured path touches as little as it can.
        now = self.clock()
        started = self._step_started
        self.step_count = count = self.step_count + 1
        duration = None if started is None else now - started
        measured, timed = self._measuring, self.hook_seconds
        self.last_evidence = self._evidence_now
        if self._kept_check is not None:
            self._revise_kept()
        self._in_a_row = self._in_a_row + 1 if measured else 0
        if measured:
            self._mark(IDLE)
            end = self._marks.get(IDLE)
            record = self._record(duration, end)
            self.last_reading = end
            self._steps.append(record)
            if end is not None:
                self.board.add_measured(record)
            self.last_measured = end is not None
            if duration is not None and self._typical is not None:
                # What the readings cost beyond what they timed themselves: module hooks sending
                # the model through nn.Module's slow path, calls from C++ into Python, hooks
                # armed and removed. Estimated from the measured steps' excess over a typical
                # step, summed with its sign so that noise cancels (clamping each step at zero
                # would charge noise), and never below zero, so a slow spell of the machine
                # before cannot hide a real cost later.
                extra = duration - self._typical - (self.hook_seconds - self._hook_at_start)
                self._excess = max(0.0, self._excess + max(-0.5 * duration, min(extra, 0.5 * duration)))
        else:
            self._phase = IDLE
            light = self._light_reading()
            self._steps.append((count, self.wallclock(), duration, self._device) + light)
            self.last_measured = False
            if self._evidence_base is not None:
                self._ask_for_evidence(count, light)
            if duration is not None:
                typical = self._typical
                # Smoothed duration of unmeasured steps; a long step (evaluation, a stall) moves
                # it only a little.
                self._typical = duration if typical is None else (
                    typical + 0.05 * (min(duration, 2 * typical) - typical))
        if duration is not None:
            self._elapsed += duration
        # The next step starts where this one ends (data loading included).
        self._start_step(now)
        if not self._roots_learned and self.step_count >= LEARN_STEPS and self._roots:
            self._hook_roots()
        toggle = self._roots_learned and self._measuring != self._armed and self.active
        if toggle:
            if self._measuring:
                self._arm()
            else:
                self._disarm()
        if measured or toggle:
            # A measured step's record and arming or removing the hooks happen after its end, on
            # the next step's clock: charged here, as the next step's own readings.
            self.hook_seconds += self.clock() - now - (self.hook_seconds - timed)
        if self.on_step_end is not None:
            self.on_step_end(self.step_count)

    def _record(self, duration: float | None, end: _Reading | None) -> StepRecord:
        device = self._device
        if end is None:
            return (self.step_count, self.wallclock(), duration, device, None, None, None)
        row = (end.tally or {}).get(device) if device else None
        stats = end.stats or {}
        cuda = end.stats is not None
        self._tracked = end.allocated
        figure = LIGHT_FIGURES.index("allocated" if cuda else "host_allocated")
        value = end.allocated if cuda else end.heap
        if value is not None:
            self._evidence_base = (figure, value, self.step_count)
        live = self._live
        held = {k: live[k] for k in self._saved_this_step if k in live} if self.activations else None
        kept = sum(entry[1] for entry in held.values()) if held is not None else None
        record = StepRecord(
            step=self.step_count,
            ended_at=self.wallclock(),
            duration=duration,
            device=device,
            allocated=end.allocated,
            reserved=_get(stats, "reserved_bytes.all.current") if cuda else None,
            inactive_split=_get(stats, "inactive_split_bytes.all.current") if cuda else None,
            alloc_retries=_get(stats, "num_alloc_retries") if cuda else None,
            peak_forward=self._peaks.get(FORWARD),
            peak_backward=self._peaks.get(BACKWARD),
            peak_optimizer=self._peaks.get(OPTIMIZER),
            allocated_at_start=start.allocated if (start := self._marks.get(FORWARD)) else None,
            categories=categories_of(row, end.allocated if cuda else None, seen=self.forward_seen),
            host_memory=end.host,
            host_allocated=end.heap,
            activations_kept=kept,
            activations_peak=self._acts_peak if self.forward_seen else None,
        )
        if self.activations:
            self._peak_shown = (self._acts_peak, self.step_count)
        if held:
            self._kept_check = (record, held)
        return record

    def _revise_kept(self) -> None:
        """A step after a measured one: of what it saved and held at its end, what is still held.

        Tensors saved for a backward that has not freed them (``retain_graph=True``, a loss still
        named by the loop) are held at the step's end and let go in the next step; only what a
        whole step later is still held was kept, so the record is revised to that.
        """
        started = self.clock()
        record, held = self._kept_check
        self._kept_check = None
        try:
            live = self._live
            # The same entry, not only the same key: a freed address is soon reused by the allocator.
            kept = sum(entry[1] for key, entry in held.items() if live.get(key) is entry)
            if kept != record.activations_kept:
                self.board.revise_latest(record, dataclasses.replace(record, activations_kept=kept))
        except Exception as exc:
            self.problems.record("activations kept", exc)
        self.hook_seconds += self.clock() - started

    def _ask_for_evidence(self, step: int, light: tuple) -> None:
        """Measure the next step if the judged figure grew past noise since the latest measured one."""
        figure, base, at = self._evidence_base
        now = light[figure]
        if now is None or step - at < self._evidence_gap:
            return
        floor = growth_floor(LIGHT_FIGURES[figure], base)
        if now - base >= floor:
            self._evidence_wanted = True
            self.evidence_steps += 1
            self._evidence_gap = min(2 * self._evidence_gap, EVIDENCE_MAX)
        elif abs(now - base) < floor:
            self._evidence_gap = EVIDENCE_STEPS  # flat again: a new growth is news

    def _light_reading(self) -> tuple:
        """The LIGHT_FIGURES of an unmeasured step: the one figure a leak verdict is judged on, read
        at nearly every step so that a leak is seen within dozens of steps. It takes at most half
        the readings budget, so measured steps keep the rest: where it costs more than that (CUDA's
        counters in very short steps), every few steps only."""
        if self._light_spent > 0.5 * self.budget * self._elapsed:
            return (None, None, None)
        started = self.clock()
        try:
            device = self._device
            if device is None:
                return (None, None, None)
            if device.startswith("cuda"):
                if not allocator.cuda_ready():
                    return (None, None, None)
                stats = torch.cuda.memory_stats_as_nested_dict(torch.device(device))
                return (int(stats["allocated_bytes"]["all"]["current"]), None, None)
            heap = self.malloc.read()
            if heap is not None and heap >= self._tracked:
                return (None, heap, None)
            return (None, None, self.resident.read())
        except Exception as exc:
            self.problems.record("step-end reading", exc)
            return (None, None, None)
        finally:
            spent = self.clock() - started
            self._light_spent += spent
            self.hook_seconds += spent

    @property
    def charged(self) -> float:
        """Seconds charged to the readings budget: timed readings plus their estimated untimed cost."""
        return self.hook_seconds + self._excess

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """The recent steps, oldest first."""
        return tuple(step_record(s) for s in self.board.entries())

    def entries(self) -> list:
        return self.board.entries()

    def clear_steps(self) -> None:
        self.board.clear_steps()

    @property
    def device(self) -> str | None:
        return self._device

    @property
    def phase(self) -> str:
        return self._phase


def _get(stats: dict, key: str) -> int | None:
    value = stats.get(key)
    return None if value is None else int(value)
