"""The user's job: ``SCRIPT:FUNCTION`` loaded, called, and what it returned checked.

FUNCTION builds and returns the model and an example batch, and optionally the optimizer and the loss:
a tuple ``(model, batch[, optimizer[, loss]])`` or a dict with those keys. ``batch`` is a tensor (the
model gets it as its one argument), a tuple or list (its items are the arguments) or a dict (keyword
arguments). ``loss``, called with the model's output, returns the scalar to backpropagate; without
one, the loss the model computed itself is taken (``output.loss`` or ``output["loss"]``, as a Hugging
Face model returns given labels, or a scalar output), else the mean of its first tensor (the logits).
FUNCTION accepts ``batch_size`` as a keyword where ``--batch-size`` or ``--max-batch`` is used.
Every problem is a UserError with one line; where the user's own code raised, its traceback follows.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from gputui.errors import UserError

_OURS = str(Path(__file__).resolve().parents[1])  # the gputui package's folder
CONTRACT = "return (model, batch[, optimizer[, loss]]) or a dict with those keys"


@dataclass
class Job:
    """What FUNCTION returned, checked."""

    model: torch.nn.Module
    batch: Any
    optimizer: torch.optim.Optimizer | None = None
    loss: Callable[[Any], torch.Tensor] | None = None
    precision: str = "fp32"  # set by step.prepare

    def forward(self) -> Any:
        batch = self.batch
        if isinstance(batch, dict):
            return self.model(**batch)
        if isinstance(batch, (tuple, list)):
            return self.model(*batch)
        return self.model(batch)

    def loss_of(self, output: Any) -> torch.Tensor:
        if self.loss is not None:
            return self.loss(output)
        found = _loss_in(output)
        if found is not None:
            return found
        first = _first_tensor(output)
        if first is None:
            raise UserError("the model's output is no tensor: return a loss function that takes it")
        return first.float().mean()


def _loss_in(output: Any) -> torch.Tensor | None:
    """The loss a model computed itself: its output's ``loss`` (a Hugging Face ModelOutput given labels,
    a dict's "loss"), else a scalar output, alone or in a tuple."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    items = output if isinstance(output, (tuple, list)) else (output,)
    return next((t for t in items if isinstance(t, torch.Tensor) and t.dim() == 0), None)


def _first_tensor(output: Any) -> torch.Tensor | None:
    """The output, or its first item or value that is a tensor (a ModelOutput without labels: logits)."""
    if isinstance(output, dict):
        output = list(output.values())
    items = output if isinstance(output, (tuple, list)) else (output,)
    return next((t for t in items if isinstance(t, torch.Tensor)), None)


class UserCodeError(UserError):
    """The user's code raised: the line says where, the traceback (their frames) follows."""

    multiline = True

    def __init__(self, what: str, exc: BaseException):
        # Their frames and torch's, not gputui's own that called them.
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_OURS)]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
                 *traceback.format_exception_only(exc)]
        super().__init__(f"{what} raised {type(exc).__name__}: {exc}\n" + "".join(lines).rstrip())


def load(spec: str) -> Callable[..., Any]:
    """FUNCTION from SCRIPT, for ``spec`` "SCRIPT:FUNCTION"."""
    script, sep, name = spec.rpartition(":")
    if not sep or not script or not name:
        raise UserError(f"{spec!r}: give SCRIPT:FUNCTION, e.g. examples/estimate_gpt.py:build")
    path = Path(script)
    if not path.is_file():
        raise UserError(f"{script}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"_gputui_estimate_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"{script}: not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.resolve().parent))  # its own imports of modules beside it
    try:
        module_spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:  # a library the script imports (transformers): one line, no traceback
        raise UserError(f"{script} imports {exc.name}, not installed in this Python ({sys.executable})") from None
    except Exception as exc:
        raise UserCodeError(f"{script}", exc) from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    function = getattr(module, name, None)
    if not callable(function):
        raise UserError(f"{script} has no function {name}")
    return function


def build(function: Callable[..., Any], batch_size: int | None) -> Job:
    """Call FUNCTION (with ``batch_size`` where one is asked for) and check what it returned."""
    name = getattr(function, "__name__", "FUNCTION")
    kwargs = {}
    if batch_size is not None:
        if "batch_size" not in inspect.signature(function).parameters:
            raise UserError(f"{name}() takes no batch_size: add a batch_size parameter to use "
                            "--batch-size or --max-batch")
        kwargs["batch_size"] = batch_size
    try:
        returned = function(**kwargs)
    except Exception as exc:
        raise UserCodeError(f"{name}()", exc) from None
    return _checked(name, returned)


def _checked(name: str, returned: Any) -> Job:
    if isinstance(returned, dict):
        unknown = set(returned) - {"model", "batch", "optimizer", "loss"}
        if unknown or "model" not in returned or "batch" not in returned:
            raise UserError(f"{name}() returned a dict with keys {sorted(returned)}: {CONTRACT}")
        job = Job(**returned)
    elif isinstance(returned, (tuple, list)) and 2 <= len(returned) <= 4:
        job = Job(*returned)
    else:
        raise UserError(f"{name}() returned {type(returned).__name__}: {CONTRACT}")
    if not isinstance(job.model, torch.nn.Module):
        raise UserError(f"{name}() returned a {type(job.model).__name__} as the model: {CONTRACT}")
    if job.optimizer is not None and not isinstance(job.optimizer, torch.optim.Optimizer):
        raise UserError(f"{name}() returned a {type(job.optimizer).__name__} as the optimizer: {CONTRACT}")
    if job.loss is not None and not callable(job.loss):
        raise UserError(f"{name}() returned a {type(job.loss).__name__} as the loss: {CONTRACT}")
    return job
