"""The CUDA caching allocator's out-of-memory observer: a call the allocator makes just before it
raises OutOfMemoryError, even where the job catches the error and carries on.

There is no public API for it: ``torch._C._cuda_attach_out_of_memory_observer`` is called here and
nowhere else. The allocator calls the observer with (device, bytes requested, device total, device
free) on the thread that asked for memory; whatever the observer raises replaces the job's
OutOfMemoryError (seen on torch 2.11), so the observer attached here takes any arguments, checks
them, and never raises.

Checked against torch 2.11 (CUDA, on an H100: four ints) and 2.13 (CPU build: the function is absent,
and CUDA never comes up). Where the function is missing or attaching fails, ``attach`` answers False
with a problem recorded, and the probe learns of OOMs from its excepthooks only; where the allocator
calls with other arguments, a problem says so and that OOM is left to the excepthooks.
"""

from __future__ import annotations

import torch

WHERE = "OOM observer"
_NAME = "torch._C._cuda_attach_out_of_memory_observer"


def attach(on_oom, problems) -> bool:
    """Have the allocator call ``on_oom(device, requested, total, free)`` (ints) before it raises.

    True when attached; False where not available (a problem recorded). Never raises, and neither
    does the observer it attaches.
    """
    version = getattr(torch, "__version__", "?")
    attach_observer = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if not callable(attach_observer):
        problems.unavailable(WHERE, f"torch {version} has no {_NAME}; OOMs are seen by the "
                                    f"excepthooks only")
        return False

    def observer(*args):
        try:
            if len(args) != 4 or not all(isinstance(a, int) for a in args):
                problems.unavailable(WHERE, f"the allocator of torch {version} called it with "
                                            f"({', '.join(type(a).__name__ for a in args)}), not "
                                            f"(device, requested, total, free)")
                return
            on_oom(*args)
        except Exception as exc:  # raised here, it would replace the job's OutOfMemoryError
            try:
                problems.record(WHERE, exc)
            except Exception:
                pass

    try:
        attach_observer(observer)
        return True
    except Exception as exc:
        problems.unavailable(WHERE, f"{_NAME} failed: {type(exc).__name__}: {exc}")
        return False
