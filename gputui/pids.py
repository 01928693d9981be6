"""Whether a process exists: the one check the collector and the probe client both make."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Whether ``pid`` exists, even one /proc hides or another user owns: signal 0 is then refused
    (EPERM) rather than unknown."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True
