"""How the probe stays out of torch.compile's way: what a compiled module looks like, and the one
warning the probe's own hooks would cause.

torch.compile guards on the global module hooks: hooks present while a model is traced and removed
later make it recompile, and a compiled wrapper (``torch.compile(model)``) warns at every call while
any global hook exists. So the probe takes a compiled wrapper as the model's root the first time it
sees one, before its forward pass is traced, and watches it with hooks of its own, which run
outside the compiled code; the warning about the few calls before that is about the probe's hooks,
whose double firing the probe already handles (it counts nesting), so it is filtered.
"""

from __future__ import annotations

import sys
import warnings

# The start of the message torch.compile's wrapper gives while global module hooks exist.
GLOBAL_HOOKS_WARNING = r"Using `torch.compile\(module\)` when there are global hooks on modules"


def is_compiled_wrapper(module) -> bool:
    """Whether ``module`` is what ``torch.compile(model)`` returned (an OptimizedModule).

    torch names no public alias for the class; ``torch._dynamo`` lists it in its ``__all__`` since
    2.0. It is looked up only where torch.compile has been imported already: a job that never
    compiles pays nothing and imports nothing.
    """
    dynamo = sys.modules.get("torch._dynamo")
    cls = getattr(dynamo, "OptimizedModule", None) if dynamo is not None else None
    return cls is not None and isinstance(module, cls)


def original(wrapper):
    """The model a compiled wrapper runs (``_orig_mod``, the attribute torch.compile's own docs and
    error messages point users to); None if this torch keeps it elsewhere."""
    return getattr(wrapper, "_orig_mod", None)


def quiet_global_hooks_warning() -> None:
    """Filter the wrapper's warning about global hooks (once per process: the filter stays, it
    names only that message)."""
    warnings.filterwarnings("ignore", message=GLOBAL_HOOKS_WARNING, category=UserWarning)
