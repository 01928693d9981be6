"""The simulated machine's files, for what gputui reads from files rather than psutil: each process's
/proc/PID/cgroup (from its program's cgroup path), the cgroup directories under /sys/fs/cgroup (a
cgroup v2 machine: root made them all, but what lies beneath a user's ``user@UID.service``, which
systemd hands to that user) and the scenario's runtime state (the kubelet's /var/log/pods). The same
``Files`` interface collect/owners.py reads the real machine through."""

from __future__ import annotations

import errno
import os
import re

from gputui.collect.owners import CGROUP_MOUNTS, FileStat
from gputui.collect.sim.scenarios import VANISHED
from gputui.collect.sim.state import MachineView

_USER_MANAGER = re.compile(r"^user@(\d+)\.service$")


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


class SimFiles:
    """``read``, ``listdir`` and ``lstat`` over the simulated machine (collect.owners.Files)."""

    def __init__(self, machine: MachineView) -> None:
        self.machine = machine
        self.texts = dict(machine.plan.files)

    def read(self, path: str, limit: int) -> bytes:
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "proc" and parts[2] == "cgroup" and parts[1].isdigit():
            program = self.machine.program(int(parts[1]))
            if program is None or program.access == VANISHED:
                raise _missing(path)
            return f"0::{program.cgroup}\n".encode()[:limit]
        if path not in self.texts:
            raise _missing(path)
        return self.texts[path].encode()[:limit]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = sorted({p[len(prefix):].split("/", 1)[0] for p in self.texts if p.startswith(prefix)})
        if not names:
            raise _missing(path)
        return names

    def lstat(self, path: str) -> FileStat:
        """A cgroup directory's owner, or a state file or directory of the scenario's (root's; they
        never change, so their times are the epoch's)."""
        if path.startswith(CGROUP_MOUNTS + "/"):
            return self._cgroup(path)
        prefix = path.rstrip("/") + "/"
        if path in self.texts or any(p.startswith(prefix) for p in self.texts):
            return FileStat(uid=0)
        raise _missing(path)

    def _cgroup(self, path: str) -> FileStat:
        inner = path[len(CGROUP_MOUNTS):]
        names = [n for n in inner.split("/") if n]
        paths = {p.cgroup for p in self.machine.plan.programs}
        if not any(cgroup == inner or cgroup.startswith(inner + "/") for cgroup in paths):
            raise _missing(path)  # "unified" too: v2 alone is mounted at /sys/fs/cgroup
        uid = 0
        for name in names:
            if (m := _USER_MANAGER.match(name)) is not None:
                uid = int(m[1])  # systemd chowns the manager's cgroup to its user, who makes what lies beneath
        return FileStat(uid=uid)
