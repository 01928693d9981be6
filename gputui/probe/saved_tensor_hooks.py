"""Autograd's saved-tensor hooks, pushed by the probe for one forward pass at a time.

The probe's pack/unpack pair goes on and off through the public context manager
``torch.autograd.graph.saved_tensors_hooks``, entered in a model's forward pre-hook and exited in its
forward hook. What torch offers no public way to do is look at the top of the thread's hook stack,
and the probe must, both ways: it pushes only where no other pair is on (pushed over a user's
``save_on_cpu`` or non-reentrant checkpointing, its pair would be the one applied, and would quietly
turn theirs off), and it pops only its own pair (exiting the context manager pops whatever is on
top). That look, ``torch._C._autograd._top_saved_tensors_default_hooks``, is private: this module is
the only place that calls it.

Checked against torch 2.13 (CPU) and 2.11 (CUDA, on an H100), where it takes one argument
(``ignore_is_tracing``); older torch took none, so both forms are tried once, at the start. Where the
function is missing, accepts neither form, or answers anything but None or a pair, the probe does not
watch activations (its report says so among its limits), a problem says why, and nothing is raised.
"""

from __future__ import annotations

import functools

import torch

WHERE = "saved-tensor hooks"
_NAME = "torch._C._autograd._top_saved_tensors_default_hooks"


class NotAvailable(Exception):
    """The look at the hook stack cannot be had in this torch (the message says why)."""


def top_of_stack_reader():
    """A function of no arguments that answers the pair on top of this thread's saved-tensor hook
    stack, or None. Raises NotAvailable where this torch has no such function as checked here."""
    version = getattr(torch, "__version__", "?")
    top = getattr(getattr(getattr(torch, "_C", None), "_autograd", None),
                  "_top_saved_tensors_default_hooks", None)
    if not callable(top):
        raise NotAvailable(f"torch {version} has no {_NAME}")
    for args in ((False,), ()):  # (ignore_is_tracing): 2.11, 2.13; no argument: older torch
        try:
            answer = top(*args)
        except TypeError:
            continue
        if answer is None or (isinstance(answer, tuple) and len(answer) == 2):
            return functools.partial(top, *args) if args else top
        raise NotAvailable(f"{_NAME} of torch {version} answered a {type(answer).__name__}, "
                           f"not None or a (pack, unpack) pair")
    raise NotAvailable(f"{_NAME} of torch {version} takes neither (ignore_is_tracing) nor no argument")


class SavedTensorHooks:
    """The probe's pair on autograd's stack of saved-tensor hooks, for the thread that calls.

    ``available`` is False where this torch gives no look at the stack (a problem is recorded once,
    here); then ``push`` does nothing. Neither method ever raises: what goes wrong is recorded.
    """

    def __init__(self, pack, unpack, problems):
        self.problems = problems
        self.available = False
        self._top = None
        try:
            self._context = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
            # The pair as torch keeps it: the top of the stack answers these very objects.
            self._pair = (self._context.pack_hook, self._context.unpack_hook)
            self._top = top_of_stack_reader()
            self.available = True
        except NotAvailable as exc:
            problems.unavailable(WHERE, f"{exc}; activations are not watched")
        except Exception as exc:  # (a saved_tensors_hooks of another shape)
            problems.unavailable(WHERE, f"{type(exc).__name__}: {exc}; activations are not watched")

    def push(self) -> bool:
        """Put the probe's pair on, unless another pair is on already (theirs is the one applied);
        True when it was put on."""
        if self._top is None:
            return False
        try:
            if self._top() is not None:
                return False
            self._context.__enter__()
            return True
        except Exception as exc:  # hooks disabled where the forward pass runs (torch.func), say
            self.problems.record(f"{WHERE} (push)", exc)
            return False

    def pop(self) -> None:
        """Take the probe's pair off, if it is the one on top."""
        if self._top is None:
            return
        try:
            if self._top() == self._pair:
                self._context.__exit__(None, None, None)
        except Exception as exc:
            self.problems.record(f"{WHERE} (pop)", exc)

    def on_top(self) -> bool:
        """Whether the probe's pair is the one on top of this thread's stack (tests)."""
        try:
            return self._top is not None and self._top() == self._pair
        except Exception:
            return False


def any_on_top() -> bool | None:
    """Whether any pair is on this thread's stack (tests, diagnostics); None where not available."""
    try:
        return top_of_stack_reader()() is not None
    except Exception:
        return None
