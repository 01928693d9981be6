"""Put first on PYTHONPATH by ``gputui run``: arm the probe, then run the sitecustomize it shadows.

Works without the gputui .pth file being installed (and in another virtual environment), because
``gputui run`` also passes where gputui lives; that path is used for this import only.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_home = os.environ.get("GPUTUI_HOME")


def _arm():
    added = False
    if _home and _home not in sys.path:
        sys.path.append(_home)
        added = True
    try:
        import gputui.probe.hook  # noqa: F401  (acts on GPUTUI_PROBE)
    except Exception as exc:
        sys.stderr.write(f"gputui: the probe could not be armed: {type(exc).__name__}: {exc}\n")
    finally:
        if added and _home is not None:
            sys.path.remove(_home)


def _chain():
    """Run the next sitecustomize on the path, as Python would have without us."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm()
_chain()
