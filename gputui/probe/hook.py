"""Start the probe in any Python process that imports torch, when GPUTUI_PROBE is set.

Imported by the ``gputui-probe.pth`` line (and by ``gputui run``'s sitecustomize) only when the
variable is set. It waits for torch to finish importing (a one-shot meta path finder wraps torch's
loader), so a process that never imports torch never pays for it. Importing this module does not
import torch.
"""

from __future__ import annotations

import os
import sys

ENV = "GPUTUI_PROBE"
_OFF = ("", "0", "false", "no", "off")
# Python helpers torch starts for itself: they import torch but train nothing.
_HELPERS = ("torch._inductor.compile_worker", "torch.distributed.run", "torchrun",
            "--multiprocessing-fork")


def wanted(environ=None) -> bool:
    """True when the environment asks for the probe."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() not in _OFF


def is_helper_process(argv=None) -> bool:
    """A multiprocessing child or one of torch's helper processes: serve only if it trains.

    DataLoader workers and compile workers import torch too; they must not open sockets, while a
    ``torch.multiprocessing.spawn`` rank that steps an optimizer should.
    """
    argv = sys.argv if argv is None else argv
    if any(any(h in str(arg) for h in _HELPERS) for arg in (argv or ())[:3]):
        return True
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        if mp.parent_process() is not None or getattr(mp.current_process(), "_inheriting", False):
            return True
    return False


def is_launcher() -> bool:
    """torchrun, deepspeed's or accelerate's launcher: it imports torch to start the ranks, which
    get the probe themselves (they inherit GPUTUI_PROBE), and trains nothing."""
    from gputui.model.job import launcher_of

    return any(launcher_of(argv) is not None
               for argv in (getattr(sys, "orig_argv", None) or (), sys.argv or ()))


def start_probe(via: str = "env") -> None:
    """Start the probe now (torch is imported); never raises into the importing code."""
    try:
        if is_launcher():
            return
        from gputui.probe import runtime

        runtime.start(via=via, serve=not is_helper_process())
    except Exception as exc:  # the training job comes first: say so once and carry on
        try:
            sys.stderr.write(f"gputui: the probe could not start: {type(exc).__name__}: {exc}\n")
        except Exception:
            pass


class _WaitForTorch:
    """A meta path finder that lets torch import as usual, then starts the probe."""

    def __init__(self, via: str):
        self.via = via

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        remove_watch()
        try:
            spec = _find_elsewhere(name, path, target)
        except Exception:
            return None
        loader = getattr(spec, "loader", None) if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        via = self.via

        def exec_module(module):
            run(module)  # torch's own import; its errors are the user's, unchanged
            try:
                del loader.exec_module  # the per-file loader goes back to its class's method
            except AttributeError:
                pass
            start_probe(via)

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        return None


def _find_elsewhere(name, path, target):
    for finder in list(sys.meta_path):
        if isinstance(finder, _WaitForTorch):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            return spec
    return None


def remove_watch() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WaitForTorch)]


def start_when_torch_imported(via: str = "env") -> None:
    """Start the probe as soon as torch is imported (at once if it already is)."""
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
        start_probe(via)
        return
    remove_watch()
    sys.meta_path.insert(0, _WaitForTorch(via))


if wanted():
    start_when_torch_imported(os.environ.get("GPUTUI_PROBE_VIA", "env"))
