"""The simulated machine's files, for what gputui reads from files rather than psutil: each process's
/proc/PID/cgroup (from its program's cgroup path) and the scenario's runtime state (the kubelet's
/var/log/pods). The same ``Files`` interface collect/owners.py reads the real machine through."""

from __future__ import annotations

import errno
import os

from gputui.collect.sim.scenarios import VANISHED
from gputui.collect.sim.state import MachineView


class SimFiles:
    """``read`` and ``listdir`` over the simulated machine (collect.owners.Files)."""

    def __init__(self, machine: MachineView) -> None:
        self.machine = machine
        self.texts = dict(machine.plan.files)

    def read(self, path: str, limit: int) -> bytes:
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "proc" and parts[2] == "cgroup" and parts[1].isdigit():
            program = self.machine.program(int(parts[1]))
            if program is None or program.access == VANISHED:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            return f"0::{program.cgroup}\n".encode()[:limit]
        if path not in self.texts:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return self.texts[path].encode()[:limit]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = sorted({p[len(prefix):].split("/", 1)[0] for p in self.texts if p.startswith(prefix)})
        if not names:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return names
