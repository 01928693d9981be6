"""Before ``gputui attach``/``detach`` touch a process: can they, and how? One line per reason they cannot.

Everything here reads /proc and the PATH; nothing stops or traces the target. Each refusal says what
is wrong and what to do about it, so the person at the terminal never has to read a debugger's output.
The Target also says which process was chosen (its start time, its executable), so that the attach
can tell, later, one that exited or ran another program since (``changed``).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from gputui.errors import UserError
from gputui.untrusted import visible

OLDEST = (3, 10)  # the probe's own oldest Python (pyproject's requires-python)
CAP_SYS_PTRACE = 19
OTHER_WAYS = ("start the job under the probe instead: `gputui run -- python train.py`, "
              "`GPUTUI_PROBE=1 python train.py`, or `import gputui.probe; gputui.probe.start()` "
              "in the script")
INSTALL_GDB = ("install gdb (`apt-get install gdb`, `dnf install gdb`, `apk add gdb`, "
               "`conda install -c conda-forge gdb`)")
# NVIDIA's CUDA images ship cuda-gdb but no gdb. Its minimal build (no Python in the debugger) runs our
# batch script as gdb does (checked on an H200, CUDA 13.0). Not the `cuda-gdb` wrapper: it picks a build
# by probing which Python the machine has, and fails where it is linked from another folder.
CUDA_GDB = "cuda-gdb-minimal"
CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
CUDA_DEFAULT = "/usr/local/cuda"
# libpython3.12.so.1.0, python3.13t: the version and the free-threaded build's "t"
_PYTHON = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)(t?)(?:\.so|$|[^/\w])")


class Refused(UserError):
    """Attaching is impossible; the message says why and what to do, in one line."""


@dataclass(frozen=True)
class Target:
    """What the preflight learnt about the process to attach to."""

    pid: int
    version: tuple[int, int]
    uid: int
    torch_loaded: bool  # libtorch is mapped: the probe can start at once
    method: str  # "remote_exec" (PEP 768) or "gdb"
    debugger: str | None  # the gdb to run (method "gdb")
    # Which process this is, to tell it later from one that exited (its pid reused) or ran another
    # program (an exec keeps the pid and the start time, not the executable): its start time (clock
    # ticks after boot) and its executable's (device, inode).
    started: int
    program: tuple[int, int]


def check(pid: int, *, command: str = "attach", proc: Path = Path("/proc"),
          which: Callable[[str], str | None] = shutil.which) -> Target:
    """The target as far as reaching into it goes, or Refused with the first reason it cannot be done
    (``command``: the gputui command that asks, "attach" or "detach", as the reasons name it)."""
    status = _status(pid, proc)
    uid = _owner(pid, status, proc, command)
    tracer = int(status.get("TracerPid", "0") or 0)
    if tracer:
        raise Refused(f"process {pid} is already traced by process {tracer} ({_name(tracer, proc)}), "
                      f"a debugger or profiler: detach that first")
    if status.get("State", "").startswith("T"):
        raise Refused(f"process {pid} is stopped (Ctrl-Z or SIGSTOP) and would run nothing: continue it first "
                      f"(`fg`, or `kill -CONT {pid}`)")
    started, program = _identity(pid, proc)  # before the interpreter's check: what it checks is this program
    version = interpreter(pid, proc, command)
    if program is None:
        raise Refused(f"process {pid} exited")
    maps = _read(proc / str(pid) / "maps")
    method = "remote_exec" if _can_remote_exec(version) else "gdb"
    debugger = None
    if method == "gdb":
        debugger = find_gdb(which)
        if debugger is None:
            raise Refused(f"gputui {command} needs gdb to reach a Python {version[0]}.{version[1]} process, "
                          f"and there is none on the PATH (nor CUDA's {CUDA_GDB}): {INSTALL_GDB}, or {OTHER_WAYS}")
    check_ptrace_policy(_ptrace_scope(proc), has_cap_sys_ptrace(proc))
    return Target(pid=pid, version=version, uid=uid, torch_loaded="/libtorch" in maps, method=method,
                  debugger=debugger, started=started, program=program)


def changed(target: Target, proc: Path = Path("/proc")) -> str | None:
    """How process ``target.pid`` is no longer the process the preflight chose, in words ("exited",
    "now runs another program (...)"); None while it is the same."""
    try:
        fields = stat_fields(target.pid, proc)
        state, started = fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return "exited"
    if state in ("Z", "X") or started != target.started:
        return "exited"  # (a zombie; or its pid is another process's now)
    try:
        info = os.stat(proc / str(target.pid) / "exe")
    except PermissionError:  # an exec'd setuid program, to a user who is not root
        return "now runs a program you may not trace, not the Python chosen"
    except OSError:
        return "exited"
    if (info.st_dev, info.st_ino) != target.program:
        return f"now runs another program ({visible(_exe(target.pid, proc))}), not the Python chosen"
    return None


def stat_fields(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The fields of /proc/PID/stat from the third (the state) on: the command name before them, in
    parentheses, may hold anything, spaces and parentheses included. OSError when it is gone."""
    with open(proc / str(pid) / "stat", "rb") as f:
        text = f.read().decode("ascii", "replace")
    return text[text.rindex(")") + 1:].split()


def find_gdb(which: Callable[[str], str | None] = shutil.which,
             environ: Mapping[str, str] | None = None) -> str | None:
    """gdb on the PATH, else cuda-gdb-minimal on the PATH or in the CUDA toolkit's bin folder
    ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda), else None."""
    found = which("gdb") or which(CUDA_GDB)
    if found:
        return found
    where = os.environ if environ is None else environ
    homes = [where[name] for name in CUDA_HOMES if where.get(name)] + [CUDA_DEFAULT]
    for home in homes:
        candidate = Path(home) / "bin" / CUDA_GDB
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _identity(pid: int, proc: Path) -> tuple[int, tuple[int, int] | None]:
    """Its start time and its executable's (device, inode); None for the executable when it cannot be
    read (a kernel thread, which the interpreter's check refuses; or it exited)."""
    try:
        started = int(stat_fields(pid, proc)[19])
    except (OSError, IndexError, ValueError):
        raise Refused(f"no process {pid}") from None
    try:
        info = os.stat(proc / str(pid) / "exe")
    except OSError:
        return started, None
    return started, (info.st_dev, info.st_ino)


def _exe(pid: int, proc: Path) -> str:
    try:
        return os.readlink(proc / str(pid) / "exe")
    except OSError:
        return "?"


def _status(pid: int, proc: Path) -> dict[str, str]:
    text = _read(proc / str(pid) / "status")
    if not text:
        raise Refused(f"no process {pid}")
    fields = (line.partition(":") for line in text.splitlines())
    return {key: value.strip() for key, _, value in fields}


def _owner(pid: int, status: dict[str, str], proc: Path, command: str) -> int:
    """The target's user; Refused when it is another user's and we are not allowed to trace it."""
    uid = int((status.get("Uid", "") or "-1").split()[0])
    if uid != os.geteuid() and not has_cap_sys_ptrace(proc):
        raise Refused(f"process {pid} belongs to {visible(_user(uid))}: run gputui {command} as that user "
                      f"(or as root)")
    return uid


def interpreter(pid: int, proc: Path = Path("/proc"), command: str = "attach") -> tuple[int, int]:
    """The CPython version that process ``pid`` runs, from its executable and mapped libpython."""
    try:
        exe = os.readlink(proc / str(pid) / "exe")
    except OSError:
        exe = ""
    maps = _read(proc / str(pid) / "maps")
    names = [exe] + [line.rsplit(" ", 1)[-1] for line in maps.splitlines() if "libpython" in line]
    found = [m for m in (_PYTHON.search(name) for name in names) if m is not None]
    name = visible(_name(pid, proc))
    if "pypy" in exe.lower():
        raise Refused(f"process {pid} ({name}) runs PyPy: gputui {command} works on "
                      f"CPython {OLDEST[0]}.{OLDEST[1]} or newer")
    if not found:
        raise Refused(f"process {pid} ({name}) is not a Python process: gputui {command} works on "
                      f"CPython {OLDEST[0]}.{OLDEST[1]} or newer")
    major, minor, free_threaded = int(found[-1][1]), int(found[-1][2]), found[-1][3]
    if free_threaded:
        raise Refused(f"process {pid} runs a free-threaded CPython {major}.{minor}t build, which the probe "
                      f"does not support: {OTHER_WAYS} on the standard build")
    if (major, minor) < OLDEST:
        raise Refused(f"process {pid} runs Python {major}.{minor}; the probe needs {OLDEST[0]}.{OLDEST[1]} "
                      f"or newer")
    return major, minor


def check_ptrace_policy(scope: int | None, cap_sys_ptrace: bool) -> None:
    """Refused where the kernel's Yama policy forbids gdb to attach (gdb is no parent of the job)."""
    if scope == 3:
        raise Refused("the kernel forbids attaching to any process (kernel.yama.ptrace_scope = 3, fixed until "
                      f"reboot): {OTHER_WAYS}")
    if scope == 2 and not cap_sys_ptrace:
        raise Refused("the kernel lets only root attach to a process (kernel.yama.ptrace_scope = 2): run "
                      "gputui attach as root (sudo), with CAP_SYS_PTRACE (in a container: "
                      "--cap-add=SYS_PTRACE)")
    if scope == 1 and not cap_sys_ptrace:
        raise Refused("the kernel lets a process be traced only by its parent (kernel.yama.ptrace_scope = 1): "
                      "run gputui attach as root (sudo), or allow it with "
                      "`sudo sysctl kernel.yama.ptrace_scope=0` (in a container: --cap-add=SYS_PTRACE)")


def not_permitted(pid: int) -> Refused:
    """What to say when ptrace itself said EPERM though the preflight saw no policy against it."""
    return Refused(f"not permitted to trace process {pid}: ptrace is forbidden here (in a container, run it "
                   f"with --cap-add=SYS_PTRACE; otherwise run gputui attach as root)")


def has_cap_sys_ptrace(proc: Path = Path("/proc")) -> bool:
    """Whether this process may trace any process (root, unless a container took the capability away)."""
    for line in _read(proc / "self" / "status").splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
            except (IndexError, ValueError):
                return False
    return False


def _ptrace_scope(proc: Path) -> int | None:
    text = _read(proc / "sys" / "kernel" / "yama" / "ptrace_scope").strip()
    return int(text) if text.isdigit() else None


def _can_remote_exec(version: tuple[int, int]) -> bool:
    """PEP 768's sys.remote_exec: from 3.14, between interpreters of the same version."""
    return version >= (3, 14) and hasattr(sys, "remote_exec") and tuple(sys.version_info[:2]) == version


def _name(pid: int, proc: Path) -> str:
    return _read(proc / str(pid) / "comm").strip() or "?"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
