"""How Python code gets into another running CPython: PEP 768's ``sys.remote_exec`` (3.14+), or gdb.

With gdb the code is queued, never run from the debugger: gdb stops the process for a moment, maps
one page for the code's text (``mmap``: a system call, no lock that a stopped thread could hold, as
``malloc`` has), writes the text there and hands ``PyRun_SimpleString`` to ``Py_AddPendingCall``,
then detaches. The interpreter runs pending calls on the main thread between two bytecodes, holding
the GIL, so the code never runs in the middle of a C call of torch: a job busy in one gets it when it
next runs Python. Only CPython's and libc's exported symbols are used (no debug symbols needed), found
in their files before gdb attaches (elf.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gputui.launch import elf
from gputui.launch.preflight import Refused, Target, not_permitted
from gputui.untrusted import visible

NOWHERE = "/nonexistent/gputui-no-sysroot"
GDB_SECONDS = 20.0  # gdb's whole run: attach, queue, detach (about 0.5 s; more on a loaded box)
QUEUED = "gputui-queued"


def run_code(target: Target, code: str) -> None:
    """Have ``code`` run in the target's main thread at its next safe point, or raise Refused."""
    if target.method == "remote_exec":
        _remote_exec(target.pid, code)
    else:
        _through_gdb(target, code)


def pending_call_text(code: str) -> bytes:
    """The text PyRun_SimpleString runs in the job's ``__main__``: exec the code in a namespace of its
    own (it binds no name in the job's module) and never let an error out (a pending call that fails
    would raise it in the job's code)."""
    text = f"try:\n exec({code!r}, {{'__name__': '__gputui_attach__'}})\nexcept BaseException:\n pass\n"
    return text.encode() + b"\0"


def gdb_script(code: str, where: dict[str, int]) -> str:
    """gdb's commands: map a page, write the text into it, queue the pending call, detach. ``where``:
    the addresses of mmap, Py_AddPendingCall and PyRun_SimpleString in the job (elf.py)."""
    data = pending_call_text(code)
    size = (len(data) + 4095) // 4096 * 4096
    data += b"\0" * (-len(data) % 8)
    mmap, add, run = where["mmap"], where["Py_AddPendingCall"], where["PyRun_SimpleString"]
    lines = [
        "set confirm off", "set pagination off", "set unwindonsignal on",
        # mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        f"set $gputui_text = ((void *(*)(void *, unsigned long, int, int, int, long)) {mmap:#x})"
        f"(0, {size}, 3, 34, -1, 0)",
        "if $gputui_text == (void *) -1",
        '  printf "gputui-no-memory\\n"',
        "else",
    ]
    for offset in range(0, len(data), 8):
        word = int.from_bytes(data[offset:offset + 8], "little")
        lines.append(f"  set *(unsigned long *) ((char *) $gputui_text + {offset}) = {word:#x}")
    lines += [
        f"  set $gputui_rc = ((int (*)(void *, void *)) {add:#x})((void *) {run:#x}, $gputui_text)",
        f'  printf "{QUEUED} %d\\n", $gputui_rc',
        "end",
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n"


def symbols(pid: int) -> dict[str, int]:
    """The addresses gdb_script calls, or Refused saying which the job does not export."""
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe")).name
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError as exc:
        raise Refused(f"cannot read process {pid}'s memory map: {visible(exc.strerror or str(exc))}") from None
    python = ("libpython", exe)
    try:
        return elf.addresses(pid, maps, {"Py_AddPendingCall": python, "PyRun_SimpleString": python,
                                         "mmap": ("libc.so", "libc-")})
    except elf.NotFound as exc:
        raise Refused(f"process {pid}'s Python exports no {visible(str(exc))} (a statically linked build "
                      f"without its symbols?): gputui attach cannot reach it") from None


def gdb_command(gdb: str, pid: int, script: str) -> list[str]:
    """gdb in batch mode, bounded by coreutils' timeout where there is one: it outlives a killed gputui,
    and a gdb that quits (on the SIGINT, or at the end of its commands) detaches from the job."""
    # The executable's symbols are read before attaching (`file`, then `attach`): the job is stopped
    # only from the attach to the detach.
    # A sysroot where nothing is: gdb opens none of the job's libraries (libtorch's symbols alone take
    # it hundreds of milliseconds, the job stopped all along); the addresses come from elf.py.
    command = [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off", "-iex", "set auto-load off",
               "-iex", "set auto-solib-add off", "-iex", f"set sysroot {NOWHERE}", "-ex", f"file /proc/{pid}/exe",
               "-ex", f"attach {pid}", "-x", script]
    bound = shutil.which("timeout")
    if bound:
        command = [bound, "-k", "5", "-s", "INT", str(int(GDB_SECONDS)), *command]
    return command


def _through_gdb(target: Target, code: str) -> None:
    assert target.debugger is not None
    with tempfile.NamedTemporaryFile("w", prefix="gputui-gdb-", suffix=".gdb") as script:
        script.write(gdb_script(code, symbols(target.pid)))
        script.flush()
        try:
            # A session of its own: the terminal's Ctrl-C or hangup reaches gputui, never gdb mid-call.
            done = subprocess.run(gdb_command(target.debugger, target.pid, script.name), capture_output=True,
                                  text=True, errors="replace", timeout=GDB_SECONDS + 10, start_new_session=True,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            _let_go(target.pid)
            raise Refused(f"gdb did not finish within {GDB_SECONDS:.0f} s; process {target.pid} was let go "
                          f"and runs on") from None
    _let_go(target.pid)
    _check_gdb_output(target.pid, done.stdout + done.stderr)


def _check_gdb_output(pid: int, output: str) -> None:
    """Refused unless gdb queued the call; gdb's own words only when nothing better can be said."""
    for line in output.splitlines():
        if line.startswith(QUEUED):
            if line.split()[-1] != "0":
                raise Refused(f"process {pid}'s interpreter has too many calls waiting; try again in a moment")
            return
    if "Operation not permitted" in output:
        raise not_permitted(pid)
    if "gputui-no-memory" in output:
        raise Refused(f"process {pid} has no memory left for a page of code")
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
    raise Refused(f"gdb could not reach process {pid}: {visible(last.strip())}")


def _let_go(pid: int) -> None:
    """A gdb that died mid-attach can leave the job stopped by its SIGSTOP: wake it. (The preflight
    refuses a job that was stopped before, so this never wakes one its owner stopped.)"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return
    if state in ("T", "t"):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def _remote_exec(pid: int, code: str) -> None:
    if sys.version_info < (3, 14):  # preflight chose this method only where it exists
        raise Refused("sys.remote_exec needs Python 3.14 or newer")
    # remote_exec reads the file when the target gets to it; it must be readable by the target's user.
    fd, path = tempfile.mkstemp(prefix="gputui-attach-", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(code)
    os.chmod(path, 0o644)
    try:
        sys.remote_exec(pid, path)
    except PermissionError:
        raise not_permitted(pid) from None
    except ProcessLookupError:
        raise Refused(f"process {pid} exited") from None
    except (RuntimeError, OSError) as exc:
            raise Refused(f"process {pid} does not accept remote code ({visible(str(exc))}): it may run with "
                      f"remote debugging disabled (PYTHON_DISABLE_REMOTE_DEBUG or -X disable_remote_debug)") from None
    _unlink_later(path)


def _unlink_later(path: str) -> None:
    """The target reads the file at its next safe point; the attach waits for that, then removes it."""
    _LEFT.append(path)


_LEFT: list[str] = []


def clean_up() -> None:
    """Remove the files handed to remote_exec (once the target has run them or the wait is over)."""
    while _LEFT:
        try:
            os.unlink(_LEFT.pop())
        except OSError:
            pass
