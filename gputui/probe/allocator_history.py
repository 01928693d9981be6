"""The CUDA caching allocator's history: switched on while allocation sites are recorded.

With it on, every block the allocator hands out carries the Python frames that asked for it, and the
public ``torch.cuda.memory_snapshot()`` returns them with the blocks. Switching it on and off has no
public API: ``torch.cuda.memory._record_memory_history`` (documented in PyTorch's "Understanding CUDA
Memory Usage" notes, but private by name) is called here and nowhere else.

Checked against torch 2.13 (CPU build: the function is there, CUDA is not) and 2.11 (CUDA, on an
H100), whose signature takes ``enabled``, ``context``, ``stacks`` and ``max_entries`` by name (torch
2.1 and later; 2.0 had another form). Where the function is missing, its signature lacks one of those
names, or the call fails, ``start`` answers False with a problem recorded and site recording falls
back to watching tensors being made, as on CPU; nothing is raised.
"""

from __future__ import annotations

import inspect

import torch

WHERE = "CUDA allocator history"
_NAME = "torch.cuda.memory._record_memory_history"
_NEEDED = ("enabled", "context", "stacks", "max_entries")


def _record_function(problems):
    """The function, if it takes what the probe passes; else None, with a problem recorded."""
    version = getattr(torch, "__version__", "?")
    record = getattr(getattr(getattr(torch, "cuda", None), "memory", None), "_record_memory_history", None)
    if not callable(record):
        problems.unavailable(WHERE, f"torch {version} has no {_NAME}; sites are found by watching "
                                    f"tensors being made")
        return None
    try:
        parameters = inspect.signature(record).parameters
    except (TypeError, ValueError):  # no signature to read: the call itself will tell
        return record
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [name for name in _NEEDED if name not in parameters]
    if missing and not takes_any:
        problems.unavailable(WHERE, f"{_NAME} of torch {version} takes no {', '.join(missing)}; sites "
                                    f"are found by watching tensors being made")
        return None
    return record


def start(max_entries: int, problems) -> bool:
    """Record each live block's Python frames (no C++ frames, no event log beyond ``max_entries``).
    True when recording; False where not available (a problem recorded)."""
    record = _record_function(problems)
    if record is None:
        return False
    try:
        record(enabled="state", context="state", stacks="python", max_entries=max_entries)
        return True
    except Exception as exc:
        problems.unavailable(WHERE, f"{_NAME} failed: {type(exc).__name__}: {exc}")
        return False


def stop(problems) -> None:
    """Switch the history off again (process-wide)."""
    record = getattr(getattr(getattr(torch, "cuda", None), "memory", None), "_record_memory_history", None)
    if record is None:
        return  # never switched on here: start() said it was not available
    try:
        record(enabled=None)
    except Exception as exc:
        problems.record(f"{WHERE} (off)", exc)
