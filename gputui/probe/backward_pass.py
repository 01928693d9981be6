"""Whether autograd is running a backward pass on the calling thread.

A module called while backward runs is no new forward pass: it is reentrant activation checkpointing
(``torch.utils.checkpoint(..., use_reentrant=True)``) running a checkpointed block again to get its
saved tensors back. The probe must not take it for a top-level model, open a forward phase in the
middle of backward, nor count what it saves as activations a second time.

torch says so only through a private function, ``torch._C._current_graph_task_id`` (-1 outside a
backward pass, the running graph task's id inside one, on CPU and on autograd's device threads); this
module is the only place that calls it. Checked against torch 2.13 (CPU). Where it is missing or
answers anything but an int, a problem says why (once), a module called during backward is taken
for a forward pass as before, and nothing is raised.
"""

from __future__ import annotations

import torch

WHERE = "backward-pass check"
_NAME = "torch._C._current_graph_task_id"


class NotAvailable(Exception):
    """The check cannot be had in this torch (the message says why)."""


def graph_task_reader():
    """A function of no arguments that answers the running graph task's id, -1 outside backward.
    Raises NotAvailable where this torch has no such function as checked here."""
    version = getattr(torch, "__version__", "?")
    read = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
    if not callable(read):
        raise NotAvailable(f"torch {version} has no {_NAME}")
    try:
        answer = read()  # (outside a backward pass: -1)
    except Exception as exc:
        raise NotAvailable(f"{_NAME} of torch {version} raised {type(exc).__name__}: {exc}") from None
    if type(answer) is not int:
        raise NotAvailable(f"{_NAME} of torch {version} answered a {type(answer).__name__}, not an int")
    return read


class BackwardPass:
    """``running()``: whether a backward pass runs on this thread now. Never raises."""

    def __init__(self, problems):
        self.problems = problems
        try:
            self._read = graph_task_reader()
        except NotAvailable as exc:
            self._read = None
            problems.unavailable(WHERE, f"{exc}; reentrant checkpointing's recomputation is taken for a forward pass")

    def running(self) -> bool:
        read = self._read
        if read is None:
            return False
        try:
            return read() != -1
        except Exception as exc:
            self.problems.record(WHERE, exc)
            return False
