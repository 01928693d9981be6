"""How the probe stays out of torch.compile's way: what a compiled module looks like, and the one
warning the probe's own hooks would cause.

torch.compile guards on the global module hooks: hooks present while a model is traced and removed
later make it recompile, and a compiled wrapper (``torch.compile(model)``) warns at every call while
any global hook exists. So the probe takes a compiled wrapper as the model's root the first time it
sees one, before its forward pass is traced, and watches it with hooks of its own, which run
outside the compiled code; the warning about the few calls before that is about the probe's hooks,
whose double firing the probe already handles (it counts nesting), so it is filtered.

Both things the probe needs of a compiled wrapper are private by name: its class
(``torch._dynamo.OptimizedModule``) and the model it runs (``_orig_mod``); this module is the only
place that reads them. Checked against torch 2.13 (CPU) and 2.11 (CUDA). Where either is missing, a
problem says so (once), a compiled model is watched like any other (it may then recompile when the
probe's hooks come and go) and nothing is raised.
"""

from __future__ import annotations

import sys
import warnings

WHERE = "torch.compile"
# The start of the message torch.compile's wrapper gives while global module hooks exist.
GLOBAL_HOOKS_WARNING = r"Using `torch.compile\(module\)` when there are global hooks on modules"


def is_compiled_wrapper(module, problems=None) -> bool:
    """Whether ``module`` is what ``torch.compile(model)`` returned (an OptimizedModule).

    torch names no public alias for the class; ``torch._dynamo`` lists it in its ``__all__`` since
    2.0. It is looked up only where torch.compile has been imported already: a job that never
    compiles pays nothing and imports nothing. Where ``torch._dynamo`` is loaded but has no such
    class, False, and a problem recorded on ``problems``.
    """
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return False
    cls = getattr(dynamo, "OptimizedModule", None)
    if not isinstance(cls, type):
        if problems is not None:
            problems.unavailable(WHERE, f"torch {_version()} has no torch._dynamo.OptimizedModule: a "
                                        f"compiled model is watched like any other and may recompile")
        return False
    return isinstance(module, cls)


def original(wrapper, problems=None):
    """The model a compiled wrapper runs (``_orig_mod``, the attribute torch.compile's own docs and
    error messages point users to); None, and a problem recorded on ``problems``, if this torch
    keeps it elsewhere."""
    model = getattr(wrapper, "_orig_mod", None)
    if model is None and problems is not None:
        problems.unavailable(WHERE, f"a compiled model of torch {_version()} has no _orig_mod: its "
                                    f"model may be watched inside the compiled code and recompile")
    return model


def _version() -> str:
    return str(getattr(sys.modules.get("torch"), "__version__", "?"))


def quiet_global_hooks_warning() -> None:
    """Filter the wrapper's warning about global hooks (once per process: the filter stays, it
    names only that message)."""
    warnings.filterwarnings("ignore", message=GLOBAL_HOOKS_WARNING, category=UserWarning)
