"""Container PID namespaces: NVML reports host PIDs, but a monitor in a container sees other PIDs.

When this monitor runs in the host's PID namespace, NVML's PIDs are its own. Inside a namespace, a
host PID is mapped through /proc/<pid>/status "NSpid" lines where the procfs shows the host's PIDs;
otherwise it cannot be mapped, and we say so rather than show whatever local process has that number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gputui.model.record import Record

# The initial (host) PID namespace always has this inode number (PROC_PID_INIT_INO in the kernel).
HOST_PID_NAMESPACE = "pid:[4026531836]"

NOTE_INVISIBLE = "host process"  # short: each row says it; HOST_PROCESSES says why, once
# Said once for the whole sample (Snapshot.problems) rather than on every row: the rows keep what NVML
# knows (GPU, memory, the driver's name), the device figures are whole, and probed processes of this
# container still show through their probes.
HOST_PROCESSES = "NVML's processes are the host's; this container cannot see them (run with --pid=host)"
NOTE_OUTSIDE = "runs outside this container's PID namespace"


@dataclass(frozen=True, eq=False, repr=False)
class Located(Record):
    """Where one NVML (host) PID can be found from here."""

    procfs_pid: int | None  # the PID to read through /proc (psutil); None: not visible at all
    local_pid: int | None  # the PID in this monitor's namespace (for signals); None: not in it
    note: str | None = None


class PidNamespace:
    """Maps NVML's host PIDs to PIDs this monitor can see, reading ``proc_root`` (normally /proc)."""

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc") -> None:
        self.root = Path(proc_root)
        self.own_namespace = _readlink(self.root / "self" / "ns" / "pid")
        self.own_nspid = _nspid(self.root / "self" / "status")
        # Unreadable: no procfs (not Linux) or a locked-down one; assume the simple case.
        self.in_namespace = self.own_namespace is not None and self.own_namespace != HOST_PID_NAMESPACE
        # Several NSpid levels for ourselves mean this procfs was mounted by an outer namespace,
        # so its directory names are outer PIDs: the ones NVML reports.
        self.procfs_is_outer = len(self.own_nspid) > 1

    def locate(self, host_pid: int) -> Located:
        if not self.in_namespace:
            return Located(host_pid, host_pid)
        if not self.procfs_is_outer:
            return Located(None, None, NOTE_INVISIBLE)
        nspid = _nspid(self.root / str(host_pid) / "status")
        if not nspid:
            return Located(None, None, NOTE_INVISIBLE)
        depth = len(self.own_nspid) - 1  # our level in its NSpid list
        theirs = _readlink(self.root / str(host_pid) / "ns" / "pid")
        same_namespace = theirs == self.own_namespace if theirs is not None else (
            len(nspid) == len(self.own_nspid))
        if same_namespace and len(nspid) > depth:
            return Located(host_pid, nspid[depth])
        return Located(host_pid, None, NOTE_OUTSIDE)


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _nspid(path: Path) -> tuple[int, ...]:
    """The NSpid line of a status file: the PID in each namespace, outermost (procfs's) first."""
    try:
        with open(path, encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return tuple(int(part) for part in line.split()[1:])
    except (OSError, ValueError):
        pass
    return ()
