"""How Python code gets into another running CPython: PEP 768's ``sys.remote_exec`` (3.14+), or gdb.

With gdb the code is queued, never run from the debugger: gdb stops the process for a moment, maps
one page for the code's text (``mmap``: a system call, no lock that a stopped thread could hold, as
``malloc`` has), writes the text there and hands ``PyRun_SimpleString`` to ``Py_AddPendingCall``,
then detaches. The interpreter runs pending calls on the main thread between two bytecodes, holding
the GIL, so the code never runs in the middle of a C call of torch: a job busy in one gets it when it
next runs Python. Only CPython's and libc's exported symbols are used (no debug symbols needed), found
in their files before gdb attaches (elf.py).

The job may be another user's, and hostile: between the preflight and gdb's stop it may have run
another program, a setuid one, as root. So before each call gdb compares the job's memory at the
three functions with their code in the files read, and calls nothing where it differs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from gputui.launch import elf
from gputui.launch.bounds import held
from gputui.launch.preflight import Refused, Target, changed, not_permitted, stat_fields
from gputui.untrusted import visible

NOWHERE = "/nonexistent/gputui-no-sysroot"
GDB_SECONDS = 20.0  # gdb's whole run: attach, queue, detach (about 0.5 s; more on a loaded box)
QUEUED = "gputui-queued"
CHANGED = "gputui-changed"


def run_code(target: Target, code: str, folder: str) -> None:
    """Have ``code`` run in the target's main thread at its next safe point, or raise Refused.
    ``folder``: root's, which the job may enter, for a file the job must read (remote_exec's)."""
    if target.method == "remote_exec":
        _remote_exec(target, code, folder)
    else:
        _through_gdb(target, code)


def pending_call_text(code: str) -> bytes:
    """The text PyRun_SimpleString runs in the job's ``__main__``: exec the code in a namespace of its
    own (it binds no name in the job's module) and never let an error out (a pending call that fails
    would raise it in the job's code)."""
    text = f"try:\n exec({code!r}, {{'__name__': '__gputui_attach__'}})\nexcept BaseException:\n pass\n"
    return text.encode() + b"\0"


def gdb_script(code: str, where: dict[str, elf.Function]) -> str:
    """gdb's commands: check that the process is still the Python chosen, map a page, write the text
    into it, queue the pending call, detach. ``where``: mmap, Py_AddPendingCall and PyRun_SimpleString
    in the job, with their first bytes as their files have them (elf.py)."""
    data = pending_call_text(code)
    size = (len(data) + 4095) // 4096 * 4096
    data += b"\0" * (-len(data) % 8)
    mmap, add, run = (where[name].address for name in ("mmap", "Py_AddPendingCall", "PyRun_SimpleString"))
    # Before each call the job runs (its other threads run during a call too), its memory must still
    # hold those functions' code where the files put it: a process that ran another program since
    # (a setuid one, root's now) has other code there, or none (an error, which ends the script).
    differs = " || ".join(f"*(unsigned long *) {function.address + at:#x} != "
                          f"{int.from_bytes(function.code[at:at + 8], 'little'):#x}"
                          for function in where.values() for at in range(0, len(function.code), 8))
    lines = [
        "set confirm off", "set pagination off", "set unwindonsignal on",
        f"if {differs}",
        f'  printf "{CHANGED}\\n"',
        "else",
        # mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        f"  set $gputui_text = ((void *(*)(void *, unsigned long, int, int, int, long)) {mmap:#x})"
        f"(0, {size}, 3, 34, -1, 0)",
        "  if $gputui_text == (void *) -1",
        '    printf "gputui-no-memory\\n"',
        "  else",
        f"    if {differs}",
        f'      printf "{CHANGED}\\n"',
        "    else",
    ]
    for offset in range(0, len(data), 8):
        word = int.from_bytes(data[offset:offset + 8], "little")
        lines.append(f"      set *(unsigned long *) ((char *) $gputui_text + {offset}) = {word:#x}")
    lines += [
        f"      set $gputui_rc = ((int (*)(void *, void *)) {add:#x})((void *) {run:#x}, $gputui_text)",
        f'      printf "{QUEUED} %d\\n", $gputui_rc',
        "    end",
        "  end",
        "end",
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n"


def symbols(pid: int) -> dict[str, elf.Function]:
    """The functions gdb_script calls, or Refused saying which the job does not export."""
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


def refuse_if_changed(target: Target) -> None:
    """Refused when process ``target.pid`` exited, or runs another program, since the preflight."""
    why = changed(target)
    if why == "exited":
        raise Refused(f"process {target.pid} exited as gputui reached it: nothing was done in it")
    if why is not None:
        raise Refused(f"process {target.pid} {why}: gputui ran nothing in it")


def _through_gdb(target: Target, code: str) -> None:
    where = symbols(target.pid)
    refuse_if_changed(target)  # an exec since the preflight: what `where` was read from is not it
    run_gdb(target, gdb_script(code, where))


def run_gdb(target: Target, script: str) -> None:
    """Run gdb's ``script`` on the target; Refused unless it queued the call. The script is handed to
    gdb in memory (memfd): no file of it is left behind, whatever ends gputui."""
    assert target.debugger is not None
    fd = os.memfd_create("gputui-gdb", os.MFD_CLOEXEC)
    try:
        os.write(fd, script.encode())
        output = _gdb_output(gdb_command(target.debugger, target.pid, f"/proc/self/fd/{fd}"), fd, target.pid)
    finally:
        os.close(fd)
        _let_go(target.pid)
    _check_gdb_output(target, output)


def _gdb_output(command: list[str], script_fd: int, pid: int) -> str:
    """What gdb said. In a session of its own: the terminal's Ctrl-C or hangup reaches gputui, never
    gdb mid-call. Whatever stops gputui meanwhile (a signal, the time limit) interrupts gdb as its
    own bound would (SIGINT: it ends the call, detaches and quits) before it goes on."""
    gdb = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", start_new_session=True, pass_fds=(script_fd,))
    try:
        return gdb.communicate(timeout=GDB_SECONDS + 10)[0]
    except subprocess.TimeoutExpired:
        with held():
            _interrupt(gdb)
        raise Refused(f"gdb did not finish within {GDB_SECONDS:.0f} s; process {pid} was let go "
                      f"and runs on") from None
    except BaseException:
        with held():
            _interrupt(gdb)
        raise


def _interrupt(gdb: subprocess.Popen[str]) -> None:
    """SIGINT to gdb (and the timeout around it), then SIGKILL if it has not quit within 5 s."""
    for signum in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(gdb.pid, signum)
            gdb.communicate(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
        except OSError:  # (gone already)
            return


def _check_gdb_output(target: Target, output: str) -> None:
    """Refused unless gdb queued the call; gdb's own words only when nothing better can be said."""
    pid = target.pid
    for line in output.splitlines():
        if line.startswith(QUEUED):
            if line.split()[-1] != "0":
                raise Refused(f"process {pid}'s interpreter has too many calls waiting; try again in a moment")
            return
    refuse_if_changed(target)  # (it exited: ptrace says "Operation not permitted" to a zombie)
    if CHANGED in output:
        raise Refused(f"process {pid} changed as gdb stopped it (its functions are not the ones read before): "
                      f"gputui ran nothing in it")
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
        state = stat_fields(pid)[0]
    except (OSError, IndexError, ValueError):
        return
    if state in ("T", "t"):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def _remote_exec(target: Target, code: str, folder: str) -> None:
    pid = target.pid
    if sys.version_info < (3, 14):  # preflight chose this method only where it exists
        raise Refused("sys.remote_exec needs Python 3.14 or newer")
    # remote_exec reads the file when the target gets to it: readable by the target's user, in a
    # folder it cannot change; the attach removes it with the folder once the wait is over.
    path = os.path.join(folder, "attach.py")
    with open(path, "x") as f:
        f.write(code)
    os.chmod(path, 0o644)
    refuse_if_changed(target)
    try:
        sys.remote_exec(pid, path)
    except PermissionError:
        raise not_permitted(pid) from None
    except ProcessLookupError:
        raise Refused(f"process {pid} exited") from None
    except (RuntimeError, OSError) as exc:
        raise Refused(f"process {pid} does not accept remote code ({visible(str(exc))}): it may run with "
                      f"remote debugging disabled (PYTHON_DISABLE_REMOTE_DEBUG or -X disable_remote_debug)") from None
