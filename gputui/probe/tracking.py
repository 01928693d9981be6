"""Watch a training loop from inside: optimizer steps, forward/backward/optimizer phases, tensor categories.

Global optimizer step hooks find the optimizers (and through them the parameters, gradients and
optimizer state); module forward hooks mark the forward pass and, only while a model's forward runs,
autograd's saved-tensor hooks see the activations kept for backward. The phases follow what runs: a
closure given to optimizer.step() (Lightning, LBFGS) runs its own forward and backward phases, and
the optimizer phase starts when it returns. Every hook catches everything: the probe never raises
into the user's code.

The Tracker installs the hooks and puts together the parts that each keep one account: what the
tensors are (categories.py), the activations (activations.py), the steps and their phases
(steps.py) and the time the readings may take (budget.py).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import weakref
from typing import Callable

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from gputui.model import StepRecord
from gputui.model.probe import (
    LIMIT_HOOKS_UNAVAILABLE,
    LIMIT_LOSS_OUTSIDE,
    LIMIT_NO_FORWARD,
    LIMIT_NOT_WATCHED,
)
from gputui.probe import allocator, compiled
from gputui.probe.activations import Activations, SavedTensor
from gputui.probe.backward_pass import BackwardPass
from gputui.probe.board import Board, Problems  # noqa: F401 - Problems: the hooks' error log
from gputui.probe.budget import DEFAULT_BUDGET, HookCost, ReadingsBudget
from gputui.probe.categories import Categories, categories_of
from gputui.probe.host import MallocInUse, ResidentMemory
from gputui.probe.saved_tensor_hooks import SavedTensorHooks
from gputui.probe.sharded import Gathered, fsdp_modules
from gputui.probe.steps import (
    BACKWARD,
    FORWARD,
    IDLE,
    LIGHT_FIGURES,
    NO_LIGHT,
    OPTIMIZER,
    Evidence,
    PhasePeaks,
    PhaseReading,
    StepEntry,
    light_entry,
)

# What one saved tensor costs the training thread with the hooks on (pack, unpack and release, each a
# call from C++ into Python), measured inside a real CPU training loop (torch 2.13, a shared 2-core
# machine: cold caches after each op make these calls cost far more than in a tight loop); counted
# against the readings budget.
PACK_COST = 12e-6
LEARN_STEPS = 3  # steps with global module hooks, to learn which modules run the forward pass
MEASURED_KEPT = 128  # measured steps kept beyond the window of recent steps
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


def carries_loss(output) -> bool:
    """Whether a model's output holds a loss it computed itself: a one-element tensor with a graph, as
    the output, as its ``loss`` (Hugging Face's ModelOutput, a dict) or first item (``return_dict=False``)."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if loss is None:
        loss = output[0] if isinstance(output, (tuple, list)) and output else output
    return isinstance(loss, torch.Tensor) and loss.grad_fn is not None and loss.numel() == 1


class Tracker:
    """The hooks and the step boundaries. Runs on the training thread only: its hooks are called by
    torch from the job's own calls; what other threads may see it puts on the Board.

    Its parts, each with its own account: ``categories`` (the optimizers and models found, tallies),
    ``activations`` (saved tensors), ``phases`` and ``evidence`` (steps), ``budget`` (readings).
    """

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
        self.clock = clock
        self.wallclock = wallclock
        self.board = board if board is not None else Board(max_steps=max_steps, measured_kept=MEASURED_KEPT)
        self.problems = self.board.problems
        self.budget = ReadingsBudget(budget, clock)
        self.hook_cost = HookCost()  # the step hook's own cost, beside the readings budget
        self.categories = Categories()
        self.activations = Activations(self.problems, watched=activations)
        self.gathered = Gathered()  # the unsharded parameters FSDP2 gathers (sharded.py)
        self.phase = IDLE  # where the running step is: idle, forward, backward, optimizer
        self.device: str | None = None  # the step's device: the one that holds most parameter bytes
        self.phases = PhasePeaks()
        self.evidence = Evidence()
        self.step_count = 0
        self.active = False
        self.on_step_end: Callable[[int], None] | None = None  # set by the probe (site recording, re-arming)
        # callable(), set by the probe: publishes a fresh reading if a monitor asked for one. Called at
        # the start of a forward pass, so a job in long steps, before its first step or without an
        # optimizer still gets fresh figures, read here, on its own thread.
        self.on_forward: Callable[[], None] | None = None
        self.last_reading: PhaseReading | None = None  # the latest measured step's end reading
        # A model's forward returned its own loss (a Hugging Face model given labels, a loss module): the
        # loss's saved tensors are seen, and the report need not say they may not be.
        self.loss_inside = False
        self.last_measured = False  # the latest step has a full StepRecord
        self._primary: weakref.ref | None = None  # the optimizer whose step() ends a training step
        # Its id while it lives (None once it is gone): the step hook knows it without calling the weakref.
        self._primary_id: int | None = None
        # (the latest measured step's entry, {key: live entry} of what it saved and held at its end):
        # checked again at the next step's end (see _revise_kept)
        self._kept_check: tuple | None = None
        self._tracked = 0  # tracked bytes at the latest measured step (CPU: heap figures below it are not ours)
        self._local = threading.local()
        self._handles: list = []
        self._module_handles: list = []
        self._pre_handles: list = []
        self._fsdp_hooked = False  # the FSDP modules of the models seen have their hooks (in _module_handles)
        self._armed = False  # the hooks that readings need are installed
        self._roots_learned = False  # the top-level modules are known: hooked instead of every module
        self._step_started: float | None = None
        self._measuring = True
        self._lean = False  # the next step end may take the lean path (see _optimizer_post)
        self._lean_steps = 0  # steps that took it since the budget last saw one (see _add_lean_steps)
        self._calibrating = True  # the lean steps' cost is still being timed (HookCost)
        self._wall_offset = 0.0  # wall clock less the step clock, at the latest full step end
        self.resident = ResidentMemory()
        self.malloc = MallocInUse()
        # The pack/unpack pair, pushed only inside watched forward passes. Where this torch gives
        # no look at autograd's hook stack, activations are not watched (a problem says why).
        self.saved_hooks = SavedTensorHooks(self.activations.pack, self._unpack, self.problems)
        if not self.saved_hooks.available:
            self.activations.watched = False
        self.backward_pass = BackwardPass(self.problems)

    # -- installing -------------------------------------------------------------------------------

    def install(self) -> None:
        if self.active:
            return  # installed twice, its hooks would run twice: every step counted twice
        self._step_started = None  # time without the hooks is no step of ours
        self._lean = False
        self.budget.restart(self.clock())
        self.phase = IDLE
        # Only the optimizer post-hook stays for good: it counts steps. The hooks that readings need
        # (optimizer pre-hook, module hooks, saved tensors) are armed only for measured steps, so
        # the other steps pay for one hook call and nothing else: the model's own calls take
        # nn.Module's fast path.
        self._handles = [register_optimizer_step_post_hook(self._optimizer_post)]
        if self._roots_learned:
            # Installed again (a Probe stopped and started again, a bench's blocks): the models are known,
            # and the first step after has no start to measure from; the step end that ends it arms the
            # hooks if the next is measured. (Armed now, that step would pay for them for nothing.)
            self._measuring = False
        else:
            self._arm()  # (the global module hooks that find the models)
        self.active = True

    def uninstall(self) -> None:
        self.active = False
        if self._lean_steps and self._step_started is not None:
            self._add_lean_steps(self._step_started)
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
            self._fsdp_hooked = False
            self._hook_fsdp()
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
        roots = list(self.categories.modules)
        problems = self.problems
        wrapped = {id(compiled.original(m, problems)) for m in roots
                   if compiled.is_compiled_wrapper(m, problems)}
        for module in roots:
            if id(module) in wrapped:
                continue  # runs inside a compiled wrapper: hooks there would be traced
            self._module_handles.append(module.register_forward_pre_hook(self._module_pre))
            self._module_handles.append(
                module.register_forward_hook(self._module_post, always_call=True))
        self._fsdp_hooked = False
        self._hook_fsdp()

    def _hook_fsdp(self) -> None:
        """Forward hooks on each sharding module of the models seen (FSDP2, FSDP1, ZeRO-3; see
        sharded.fsdp_modules), run after the framework's own: the pre-hook once it gathered the
        module's parameters, the post-hook once it freed them."""
        if self._fsdp_hooked or not self.categories.modules:
            return
        self._fsdp_hooked = True
        for inside, around, recurse in fsdp_modules(list(self.categories.modules)):
            pre = functools.partial(self._fsdp_pre, recurse=recurse)
            self._module_handles.append(inside.register_forward_pre_hook(pre))
            self._module_handles.append(around.register_forward_hook(self._fsdp_post))

    # -- reading memory ---------------------------------------------------------------------------

    def tally(self) -> dict[str, list[int]]:
        """Bytes per device and category right now: parameters, gradients, state, activations."""
        gathered = self.gathered.read() if self.gathered.seen else {}
        counts = self.categories.tally(skip=gathered)
        self._exclude(gathered)
        self.activations.add_to(counts)
        return counts

    def _exclude(self, gathered: dict) -> None:
        # Saved tensors with these storages are parameters, state or gathered parameters, not activations.
        keys = self.categories.model_keys
        self.activations.model_keys = keys.union(gathered) if gathered else keys

    def may_spend(self) -> bool:
        """Whether a reading now keeps the probe inside its readings budget (see ReadingsBudget)."""
        return self.budget.may_spend()

    def activation_bytes(self) -> int:
        return self.activations.total()

    @property
    def forward_seen(self) -> bool:
        """Whether the hooks see the models' forward passes, and so the activations they save."""
        return self.activations.watched and bool(self.categories.modules)

    def limits(self) -> tuple[str, ...]:
        """What the probe cannot see in this job, said in the report itself."""
        if not self.activations.watched:
            return (LIMIT_NOT_WATCHED if self.saved_hooks.available else LIMIT_HOOKS_UNAVAILABLE,)
        if not self.categories.modules:
            return (LIMIT_NO_FORWARD,) if self.step_count else ()
        return () if self.loss_inside else (LIMIT_LOSS_OUTSIDE,)

    def activations_shown(self) -> tuple[int, int] | None:
        """(bytes, step) to report as activations instead of what is held now, or None for "now".

        Inside a measured step's forward or backward the saved tensors held now are the figure;
        anywhere else (a step's end, after backward freed its graph, or a step the hooks do not
        watch) it is the latest measured step's peak, named by its step, never a 0 that only
        means "not watched".
        """
        if self._measuring and self.phase in (FORWARD, BACKWARD):
            return None
        return self.activations.shown

    def model_storages(self) -> set:
        """(data_ptr, device) of every parameter, gradient, buffer and optimizer-state storage."""
        return self.categories.model_storages()

    def _read(self, with_tally: bool) -> PhaseReading:
        """Memory on the step's device now: the allocator's counters on CUDA, tracked bytes on CPU."""
        categories = self.categories
        device = self.device
        if device is not None and device.startswith("cuda") and allocator.cuda_ready():
            stats = torch.cuda.memory_stats(torch.device(device))
            return PhaseReading(
                allocated=int(stats.get("allocated_bytes.all.current", 0)),
                peak=int(stats.get("allocated_bytes.all.peak", 0)),
                stats=stats,
                tally=self.tally() if with_tally else None,
            )
        row = categories.quick_row(device, with_shape=with_tally)
        if row is not None:
            row[3] = self.activations.bytes_on(categories.torch_device)  # (ACTS)
            return PhaseReading(allocated=sum(row), tally={device: row} if with_tally else None)
        counts = self.tally()
        if device is None:
            device = self.device = categories.main_device(counts)
        row = categories.settle(device, counts)
        return PhaseReading(allocated=sum(row) if row else 0, tally=counts)

    def _mark(self, phase: str) -> None:
        """Close the running phase at a boundary and open ``phase``."""
        previous, self.phase = self.phase, phase
        if not self._measuring:
            return
        started = self.clock()
        try:
            if self.gathered.seen:
                if phase == IDLE:
                    self.gathered.settle()  # (resharded: FSDP1's flat parameters hold their shards again)
                self.gathered.read()  # (backward gathers again: its start is one of the peaks looked at)
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
            self.phases.close(previous, phase, reading)
        finally:
            self.budget.charge(self.clock() - started)

    # -- hooks (never raise) ----------------------------------------------------------------------

    def _module_pre(self, module, args):
        if _is_compiling():
            return None
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth or not self.active:
            return None
        if self.backward_pass.running():
            # Reentrant checkpointing runs a block again inside backward: no forward pass, no model
            # of the job's, and what the block saves again is backward's transient, not activations.
            return None
        if not self._roots_learned:
            self.categories.modules.add(module)
            if not self.board.limits:  # (said as soon as a model is seen, not at the next reading)
                self.board.limits = self.limits()
            if compiled.is_compiled_wrapper(module, self.problems):
                # Before torch.compile traces its forward pass: watch it from outside from now on
                # (global hooks seen while tracing, removed later, would make it recompile).
                self._hook_roots()
        if self.phase == BACKWARD and self._primary is None:
            # No optimizer (yet): a forward pass after a backward is the only boundary there is.
            # The pass that ended shows its peak, as a step would (step 0: no step counted).
            self.activations.end_pass(self.step_count)
            self.phase = IDLE
        if self.on_forward is not None:
            try:
                self.on_forward()
            except Exception as exc:
                self.problems.record("reading on request", exc)
        if self.phase != FORWARD:
            try:
                self._enter_forward()
            except Exception as exc:
                self.problems.record("forward pre-hook", exc)
        # Saved-tensor hooks only while a model's forward runs: outside it they would get in the
        # way of torch.func transforms, and a user's own hooks (save_on_cpu, checkpointing) win.
        # (push and pop never raise: saved_tensor_hooks records what goes wrong.)
        if self.activations.watched and self._measuring and torch.is_grad_enabled():
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
        if depth <= 0 and not self.loss_inside:
            try:
                if carries_loss(output):
                    self.loss_inside = True
                    self.board.limits = self.limits()  # (said now, not at the next reading)
            except Exception as exc:
                self.problems.record("forward hook", exc)
        return None

    def _fsdp_pre(self, module, args, recurse: bool):
        """Inside a sharding module's forward, its parameters gathered: note them, raise the step's peak
        of gathered bytes, and keep the saved tensors that are these weights out of the activations."""
        if not (self.active and self._measuring) or _is_compiling():
            return None
        started = self.clock()
        try:
            self.gathered.note(module, recurse)
            self._exclude(self.gathered.read())
        except Exception as exc:
            self.problems.record("FSDP forward pre-hook", exc)
        self.budget.charge(self.clock() - started)
        return None

    def _fsdp_post(self, module, args, output):
        """After FSDP freed a module's gathered parameters: their addresses are free for the next
        tensors, which may well be activations."""
        if not (self.active and self._measuring) or _is_compiling():
            return None
        started = self.clock()
        try:
            self._exclude(self.gathered.keys())
        except Exception as exc:
            self.problems.record("FSDP forward hook", exc)
        self.budget.charge(self.clock() - started)
        return None

    def _unpack(self, saved):
        if type(saved) is not SavedTensor:
            return saved
        if self.phase != BACKWARD and self.active:  # (inside optimizer.step() too: a closure's backward)
            try:
                self._mark(BACKWARD)
            except Exception as exc:
                self.problems.record("backward hook", exc)
        return saved.tensor

    def _enter_forward(self) -> None:
        if self._step_started is None:
            self._start_step()
        self._mark(FORWARD)  # (inside optimizer.step() too: a closure's forward pass)

    def _start_step(self) -> None:
        """A step starts where none was running (the first, or after the hooks were installed);
        at a step end, _end_step starts the next one itself."""
        budget = self.budget
        packs = self.activations.packs
        if packs:
            budget.charge(self.activations.take_packs() * PACK_COST)
        now = self._step_started = self.clock()
        self.activations.start_step()
        self.gathered.start_step()
        measuring = budget.start_step(now, first=not self.board.steps)
        if self.evidence.start_step():
            measuring = True
        self._measuring = measuring
        self.phases.reset(measuring)

    def _optimizer_pre(self, optimizer, args, kwargs):
        if _is_compiling() or not self.active:
            return None
        try:
            primary = self._primary() if self._primary is not None else None
            if primary is not optimizer:
                self.categories.optimizers.add(optimizer)  # (the primary one is in there already)
                if primary is None:
                    self._make_primary(optimizer)
                    primary = optimizer
            if primary is optimizer:
                if self._step_started is None:
                    self._start_step()
                closure = _closure_of(args, kwargs)
                if closure is None:
                    self._mark(OPTIMIZER)
                else:
                    # optimizer.step(closure) (Lightning, LBFGS): the closure's forward and backward
                    # are phases of their own; optimizer.step()'s own work starts when it returns.
                    return _with_closure(args, kwargs, self._marking(closure))
        except Exception as exc:
            self.problems.record("optimizer pre-hook", exc)
        return None

    def _marking(self, closure):
        """``closure`` as the optimizer calls it: its result and exceptions are the job's own; once it
        returns, the optimizer phase starts."""

        def marked(*args, **kwargs):
            result = closure(*args, **kwargs)
            if self.active and self.phase != OPTIMIZER and not _is_compiling():
                try:
                    self._mark(OPTIMIZER)
                except Exception as exc:
                    self.problems.record("optimizer closure", exc)
            return result

        return marked

    def _optimizer_post(self, optimizer, args, kwargs):
        now = self.clock()  # (first: the step ends here, and all this hook does is the probe's cost)
        if not self.active or _is_compiling():
            return None
        try:
            if id(optimizer) != self._primary_id:
                primary = self._primary and self._primary()
                if primary is None:  # the first one seen, or the old one is gone (a new optimizer)
                    self.categories.optimizers.add(optimizer)
                    self._make_primary(optimizer)
                elif primary is not optimizer:
                    return None
            budget = self.budget
            # (A step's light reading is judged on the time seen up to its start, as light_ok.)
            started = self._step_started
            if self._lean and now < budget.measure_from and started is not None and started < budget.light_from:
                self._lean_step_end(now, started, budget)
            else:
                self._end_step(now)
        except Exception as exc:
            self.problems.record("optimizer post-hook", exc)
        return None

    def _make_primary(self, optimizer) -> None:
        self._primary = weakref.ref(optimizer, self._primary_gone)
        self._primary_id = id(optimizer)

    def _primary_gone(self, _ref) -> None:
        # (Before its id can be another object's.)
        self._primary_id = None

    def _end_step(self, now: float) -> None:
        """The primary optimizer's step ended at ``now``: its entry, and whether the next is measured."""
        # At every step, right after the step's own work has pushed the probe's objects out of the
        # CPU caches. Most steps take the lean path instead (_lean_step_end, chosen in _optimizer_post).
        count = self.step_count + 1
        budget = self.budget
        self._lean = False
        self._wall_offset = self.wallclock() - now
        started = self._step_started
        self.step_count = count
        duration = None if started is None else now - started
        if self._lean_steps and started is not None:
            self._add_lean_steps(started)
        measured, timed = self._measuring, budget.hook_seconds
        if self._kept_check is not None:
            self._revise_kept()
        if measured:
            self._mark(IDLE)
            end = self.phases.mark(IDLE)
            entry = self._entry(duration, end)
            self.last_reading = end
            self.board.steps.append(entry)
            if end is not None:
                self.board.add_measured(entry)
            self.last_measured = end is not None
            light, light_seconds, light_path = None, 0.0, 0.0
            # Saved tensors are seen only in measured steps (the hooks are pushed only then): their
            # calls are charged to the step that starts now, as its readings' own.
            carried = self.activations.take_packs() * PACK_COST
        else:
            self.phase = IDLE
            if budget.light_ok:
                light_started = self.clock()
                light = self._light_reading()
                light_seconds = self.clock() - light_started
                light_path = self.hook_cost.beyond_lean  # (a light reading's step end is never lean)
            else:
                light, light_seconds, light_path = NO_LIGHT, 0.0, 0.0
            self.board.steps.append(light_entry(StepEntry, (count, self._wall_offset + now, duration,
                                                            self.device) + light + (None,)))
            self.last_measured = False
            carried = 0.0
        # The next step starts where this one ends (data loading included).
        measuring = budget.next_step(duration, measured, now, light_seconds, carried, light_path, timed)
        if self.evidence.next_step(count, light):
            measuring = True
        self._step_started = now
        self._measuring = measuring
        if measuring:
            self.activations.start_step()
            self.gathered.start_step()
        if not self._fsdp_hooked and self._armed:
            self._hook_fsdp()  # the models seen in the first step
        if measuring or measured:
            self.phases.reset(measuring)
        if not self._roots_learned and self.step_count >= LEARN_STEPS and self.categories.modules:
            self._hook_roots()
        toggle = self._roots_learned and measuring != self._armed and self.active
        if toggle:
            if measuring:
                self._arm()
            else:
                self._disarm()
        hook_cost = self.hook_cost
        if measured or toggle:
            # A measured step's record, arming or removing the hooks: after its end, on the next
            # step's clock, charged as the next step's own readings (what charged itself inside left
            # out; ``carried`` is no time spent here: the ending step's saved tensors, estimated).
            budget.charge(self.clock() - now - (budget.hook_seconds - timed - carried))
            if self.on_step_end is not None:
                # The probe's step-end work beyond what it charged itself: one-off (the socket started,
                # the OOM observer attached) or the same at every step. Charged to the budget, it could
                # starve the measured steps for minutes; it is in the account (HookCost) instead.
                started, timed = self.clock(), budget.hook_seconds
                self.on_step_end(count)
                took = self.clock() - started - (budget.hook_seconds - timed)
                hook_cost.add(took)
                # (the next step's time holds it, where a typical one holds a lean step end's)
                budget.in_account(took - (hook_cost.lean.per_step or 0.0))
            return
        # An unmeasured step's end: in the account, not in the readings budget (see HookCost). The next
        # may take the lean path if it is not measured either and nothing is to be undone.
        self._lean = not measuring and not self._armed and self._kept_check is None
        if self.on_step_end is not None:
            self.on_step_end(count)
        unmeasured = hook_cost.unmeasured
        unmeasured.steps += 1
        own = unmeasured.per_step
        if own is None:
            own = self.clock() - now - (budget.hook_seconds - timed)
            unmeasured.sample(own)
        # (The next step holds it, where a typical one holds a lean step end's: in the account already.)
        budget.in_account(own - (hook_cost.lean.per_step or own))

    def _lean_step_end(self, now: float, started: float, budget: ReadingsBudget) -> None:
        """The end of a step that was not measured, after one that was not either, whose end reads
        nothing and leaves the next unmeasured, as worked out in advance (_lean, the budget's
        measure_from and light_from) so that the step hook only compares them: its entry, counted for
        the budget and the account later (_add_lean_steps), and the probe's step end only where the
        board wants something of it or its now-and-then work is due (every 32 steps)."""
        timed = budget.hook_seconds
        self.step_count = count = self.step_count + 1
        self.phase = IDLE
        # (ended_at from the wall clock's offset, read at the latest full step end: one clock read less)
        duration = now - started
        self.board.steps.append(light_entry(StepEntry, (count, self._wall_offset + now, duration,
                                                        self.device, None, None, None, None)))
        budget.lean_step(duration, timed)
        self._step_started = now
        self._lean_steps += 1
        if self.on_step_end is not None and (self.board.wanted or count & 31 == 1):
            self.on_step_end(count)
        if self._calibrating:
            # The hook's fixed cost, in the probe's account but not in the readings budget, where it
            # would starve the measured steps (see HookCost).
            lean = self.hook_cost.lean
            lean.sample(self.clock() - now - (budget.hook_seconds - timed))
            self._calibrating = lean.per_step is None

    def _add_lean_steps(self, until: float) -> None:
        """The steps that took the lean path since the budget last saw one, the last ending at ``until``:
        their time given to the budget, and their count to the account."""
        self.budget.skipped(until)
        self.hook_cost.lean.steps += self._lean_steps
        self._lean_steps = 0

    def _entry(self, duration: float | None, end: PhaseReading | None) -> StepEntry:
        """A measured step's entry, with its full StepRecord (none where the reading failed)."""
        device = self.device
        if end is None:
            return StepEntry(self.step_count, self.wallclock(), duration, device)
        row = (end.tally or {}).get(device) if device else None
        stats = end.stats or {}
        cuda = end.stats is not None
        self._tracked = end.allocated
        figure = LIGHT_FIGURES.index("allocated" if cuda else "host_allocated")
        value = end.allocated if cuda else end.heap
        if value is not None:
            self.evidence.set_base(figure, value, self.step_count)
        activations, phases = self.activations, self.phases
        held = activations.held_from_this_step() if activations.watched else None
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
            peak_forward=phases.peak(FORWARD),
            peak_backward=phases.peak(BACKWARD),
            peak_optimizer=phases.peak(OPTIMIZER),
            allocated_at_start=start.allocated if (start := phases.mark(FORWARD)) else None,
            categories=categories_of(row, end.allocated if cuda else None, seen=self.forward_seen,
                                     gathered=self.gathered.peak if self.gathered.seen else None),
            host_memory=end.host,
            host_allocated=end.heap,
            activations_kept=kept,
            activations_peak=activations.peak if self.forward_seen else None,
        )
        if activations.watched:
            activations.show_peak(self.step_count)
        self.gathered.show_peak()
        entry = StepEntry.measured(record)
        if held:
            self._kept_check = (entry, held)
        return entry

    def _revise_kept(self) -> None:
        """A step after a measured one: of what it saved and held at its end, what is still held.

        Tensors saved for a backward that has not freed them (``retain_graph=True``, a loss still
        named by the loop) are held at the step's end and let go in the next step; only what a
        whole step later is still held was kept, so the record is revised to that.
        """
        started = self.clock()
        if self._kept_check is None:
            return
        entry, held = self._kept_check
        self._kept_check = None
        try:
            kept = self.activations.kept_of(held)
            record = entry.record
            if kept != record.activations_kept:
                revised = entry._replace(record=dataclasses.replace(record, activations_kept=kept))
                self.board.revise_latest(entry, revised)
        except Exception as exc:
            self.problems.record("activations kept", exc)
        self.budget.charge(self.clock() - started)

    def _light_reading(self) -> tuple:
        """The LIGHT_FIGURES of an unmeasured step: the one figure a leak verdict is judged on, read
        at nearly every step so that a leak is seen within dozens of steps. It takes at most half
        the readings budget (ReadingsBudget.light_ok), so measured steps keep the rest: where it
        costs more than that (CUDA's counters in very short steps), every few steps only."""
        try:
            device = self.device
            if device is None:
                return NO_LIGHT
            if device.startswith("cuda"):
                if not allocator.cuda_ready():
                    return NO_LIGHT
                stats = torch.cuda.memory_stats_as_nested_dict(torch.device(device))
                return (int(stats["allocated_bytes"]["all"]["current"]), None, None)
            heap = self.malloc.read()
            if heap is not None and heap >= self._tracked:
                return (None, heap, None)
            return (None, None, self.resident.read())
        except Exception as exc:
            self.problems.record("step-end reading", exc)
            return NO_LIGHT

    # -- what the probe reads of it ---------------------------------------------------------------

    @property
    def charged(self) -> float:
        """Seconds charged to the readings budget: timed readings plus their estimated untimed cost."""
        return self.budget.charged

    @property
    def cost(self) -> float:
        """Seconds the probe took on the training thread by its own account: what was charged to the
        readings budget and the step hook's own cost at the other steps."""
        hook_cost = self.hook_cost
        return self.budget.charged + hook_cost.seconds + (hook_cost.lean.per_step or 0.0) * self._lean_steps

    @property
    def hook_seconds(self) -> float:
        """Seconds the readings took on the training thread, as they timed themselves."""
        return self.budget.hook_seconds

    @property
    def elapsed(self) -> float:
        """Step time seen so far."""
        budget, started = self.budget, self._step_started
        return budget.seen_until(started) if self._lean_steps and started is not None else budget.elapsed

    @property
    def evidence_steps(self) -> int:
        """Steps measured because the judged figure grew, so far."""
        return self.evidence.steps

    @property
    def last_evidence(self) -> bool:
        """Whether the latest step that ended was measured because the judged figure grew."""
        return self.evidence.last

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """The recent steps, oldest first."""
        return self.board.records()

    def entries(self) -> list[StepEntry]:
        """The recent steps as kept on the board, oldest first (see Board.entries)."""
        return self.board.entries()

    def recent_durations(self, count: int) -> list[float | None]:
        """The durations of the latest ``count`` steps, oldest first."""
        return [s.duration for s in list(self.board.steps)[-count:]]

    def forget_steps(self) -> None:
        """Count steps anew (a forked child): no steps kept, none counted."""
        self.board.clear_steps()
        self.step_count = 0

    @property
    def saw_tensor(self):
        """A callable(tensor) told of each saved tensor (set while allocation sites are recorded)."""
        return self.activations.saw_tensor

    @saw_tensor.setter
    def saw_tensor(self, callback) -> None:
        self.activations.saw_tensor = callback


def _closure_of(args: tuple, kwargs: dict):
    """The closure an optimizer.step() call was given (``args`` starts with the optimizer), or None."""
    closure = kwargs["closure"] if "closure" in kwargs else args[1] if len(args) > 1 else None
    return closure if callable(closure) else None


def _with_closure(args: tuple, kwargs: dict, closure) -> tuple[tuple, dict]:
    """The step's (args, kwargs) with ``closure`` in place of the one it was given."""
    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure}
    return (args[0], closure) + args[2:], kwargs


def _get(stats: dict, key: str) -> int | None:
    value = stats.get(key)
    return None if value is None else int(value)
