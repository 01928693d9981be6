"""The machine around the GPUs: its name, and CPU %, memory, swap, load average and boot time, read
through psutil.

CPU % is psutil's non-blocking form (since the previous call), so the first sample has none.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Mapping, TypeVar

from gputui.collect.interfaces import Psutil
from gputui.model import Host
from gputui.untrusted import visible

T = TypeVar("T")

# The machine's name where the kernel's is not it: in a Kubernetes pod the host name is the pod's
# (gputui-x7k2p), so the DaemonSet (deploy/kubernetes) sets this to the node's name.
HOSTNAME_ENV = "GPUTUI_HOSTNAME"


def host_name(environ: Mapping[str, str] | None = None) -> str:
    """$GPUTUI_HOSTNAME where it is set, else the kernel's host name."""
    env = os.environ if environ is None else environ
    given = env.get(HOSTNAME_ENV, "").strip()
    return visible(given) if given else socket.gethostname()


class HostReader:
    """Reads host figures; each one in its own guard, since containers hide some of them."""

    def __init__(self, psutil: Psutil, hostname: str) -> None:
        self.psutil = psutil
        self.hostname = hostname
        self._cpu_count = _ask(psutil.cpu_count)
        self._primed = False

    def read(self) -> Host:
        ps = self.psutil
        cpu = _ask(ps.cpu_percent, None)
        if not self._primed:  # psutil's first answer covers no interval: meaningless
            self._primed, cpu = True, None
        memory = _ask(ps.virtual_memory)
        swap = _ask(ps.swap_memory)
        load = _ask(ps.getloadavg)
        boot = _ask(ps.boot_time)
        return Host(
            hostname=self.hostname,
            cpu_count=self._cpu_count,
            cpu_percent=cpu,
            # "used" as total - available, the figure free(1) and htop users expect
            memory_total=memory.total if memory is not None else None,
            memory_used=memory.total - memory.available if memory is not None else None,
            swap_total=swap.total if swap is not None else None,
            swap_used=swap.used if swap is not None else None,
            load_average=load,
            boot_time=boot,
        )


def _ask(fn: Callable[..., T], *args: object) -> T | None:
    try:
        return fn(*args)
    except (OSError, RuntimeError, AttributeError):
        return None
