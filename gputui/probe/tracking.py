"""Watch a training loop from inside: the hooks that find the optimizers and models and mark the phases.

Global optimizer step hooks find the optimizers (and through them the parameters, gradients and
optimizer state); module forward hooks mark the forward pass and, only while a model's forward runs,
autograd's saved-tensor hooks see the activations kept for backward. The phases follow what runs: a
closure given to optimizer.step() (Lightning, LBFGS) runs its own forward and backward phases, and
the optimizer phase starts when it returns. Every hook catches everything: the probe never raises
into the user's code.

The Tracker installs, arms and removes the hooks; what happens at the step boundaries they mark (the
step state machine, its readings and entries) is the Stepping it is (stepping.py), and each part it
puts together keeps one account: what the tensors are (categories.py), the activations
(activations.py), the steps and their phases (steps.py) and the time the readings may take (budget.py).
"""

from __future__ import annotations

import functools
import threading
from typing import Callable

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from gputui.model.probe import (
    LIMIT_HOOKS_UNAVAILABLE,
    LIMIT_LOSS_OUTSIDE,
    LIMIT_NO_FORWARD,
    LIMIT_NOT_WATCHED,
)
from gputui.probe import compiled
from gputui.probe.activations import SavedTensor
from gputui.probe.backward_pass import BackwardPass
from gputui.probe.saved_tensor_hooks import SavedTensorHooks
from gputui.probe.sharded import fsdp_modules
from gputui.probe.stepping import Stepping
from gputui.probe.stepping import is_compiling as _is_compiling
from gputui.probe.steps import BACKWARD, FORWARD, IDLE, OPTIMIZER

LEARN_STEPS = 3  # steps with global module hooks, to learn which modules run the forward pass


def carries_loss(output) -> bool:
    """Whether a model's output holds a loss it computed itself: a one-element tensor with a graph, as
    the output, as its ``loss`` (Hugging Face's ModelOutput, a dict) or first item (``return_dict=False``)."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if loss is None:
        loss = output[0] if isinstance(output, (tuple, list)) and output else output
    return isinstance(loss, torch.Tensor) and loss.grad_fn is not None and loss.numel() == 1


class Tracker(Stepping):
    """The hooks. Runs on the training thread only: its hooks are called by torch from the job's own
    calls; the step boundaries they mark are its Stepping's (stepping.py), and what other threads may
    see it puts on the Board.
    """

    def __init__(self, **stepping) -> None:
        super().__init__(**stepping)  # (Stepping's keywords: activations, budget, clock, board ...)
        # callable(), set by the probe: publishes a fresh reading if a monitor asked for one. Called at
        # the start of a forward pass, so a job in long steps, before its first step or without an
        # optimizer still gets fresh figures, read here, on its own thread.
        self.on_forward: Callable[[], None] | None = None
        # A model's forward returned its own loss (a Hugging Face model given labels, a loss module): the
        # loss's saved tensors are seen, and the report need not say they may not be.
        self.loss_inside = False
        self._local = threading.local()
        self._handles: list = []
        self._module_handles: list = []
        self._pre_handles: list = []
        self._fsdp_hooked = False  # the FSDP modules of the models seen have their hooks (in _module_handles)
        self._roots_learned = False  # the top-level modules are known: hooked instead of every module
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

    def limits(self) -> tuple[str, ...]:
        """What the probe cannot see in this job, said in the report itself."""
        if not self.activations.watched:
            return (LIMIT_NOT_WATCHED if self.saved_hooks.available else LIMIT_HOOKS_UNAVAILABLE,)
        if not self.categories.modules:
            return (LIMIT_NO_FORWARD,) if self.step_count else ()
        return () if self.loss_inside else (LIMIT_LOSS_OUTSIDE,)

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
        phases = self.phases
        if depth <= 0 and phases.forward_base is not None and torch.is_grad_enabled():
            # (A pass without autograd saves nothing: an evaluation before the training pass leaves it its turn.)
            try:
                phases.forward_returned(self.activations.bytes_on(self.categories.torch_device))
            except Exception as exc:
                self.problems.record("forward hook", exc)
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

    def _rehook(self, measuring: bool) -> bool:
        """At a full step end: FSDP's modules hooked once the first step showed the models, the global
        module hooks swapped for the models' own after LEARN_STEPS, and the hooks that readings need
        armed for a measured step and removed after one. Whether they were armed or removed."""
        if not self._fsdp_hooked and self._armed:
            self._hook_fsdp()  # the models seen in the first step
        if not self._roots_learned and self.step_count >= LEARN_STEPS and self.categories.modules:
            self._hook_roots()
        toggle = self._roots_learned and measuring != self._armed and self.active
        if toggle:
            if measuring:
                self._arm()
            else:
                self._disarm()
        return toggle



def _closure_of(args: tuple, kwargs: dict):
    """The closure an optimizer.step() call was given (``args`` starts with the optimizer), or None."""
    closure = kwargs["closure"] if "closure" in kwargs else args[1] if len(args) > 1 else None
    return closure if callable(closure) else None


def _with_closure(args: tuple, kwargs: dict, closure) -> tuple[tuple, dict]:
    """The step's (args, kwargs) with ``closure`` in place of the one it was given."""
    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure}
    return (args[0], closure) + args[2:], kwargs
