"""``gputui attach PID``: start the probe inside a running Python process (Python 3.14+ only).

Python 3.14 can run a script in another interpreter (``sys.remote_exec``, PEP 768); the script arms
the probe, which starts at once if the process has torch, or when it imports it. Older Pythons, a
ptrace policy that forbids it, or remote debugging switched off each get a clear message instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from gputui.errors import UserError
from gputui.launch import GPUTUI_HOME
from gputui.options import Options

WAIT_FOR_SOCKET = 10.0  # seconds: the script runs when the target next executes Python code
OTHER_WAYS = ("start the job under the probe instead: `gputui run -- python train.py`, "
              "`GPUTUI_PROBE=1 python train.py`, or `import gputui.probe; gputui.probe.start()` "
              "in the script")


class AttachFailed(UserError):
    """The probe could not be injected; the message says why and what to do instead."""


def injection_script(home: str = GPUTUI_HOME) -> str:
    """The Python source run inside the target: import gputui (from ``home`` if need be), arm the probe."""
    return (
        "import sys\n"
        "try:\n"
        "    import gputui.probe.hook as _gputui_hook\n"
        "except ImportError:\n"
        f"    sys.path.append({home!r})\n"
        "    try:\n"
        "        import gputui.probe.hook as _gputui_hook\n"
        "    finally:\n"
        f"        sys.path.remove({home!r})\n"
        "_gputui_hook.start_when_torch_imported('attach')\n"
        "del _gputui_hook\n"
    )


def check_supported(version: tuple[int, ...] | None = None) -> None:
    """Raise AttachFailed unless this Python can inject code into another process."""
    running = tuple(sys.version_info[:2] if version is None else version[:2])
    if running < (3, 14) or not hasattr(sys, "remote_exec"):
        raise AttachFailed(
            f"gputui attach needs Python 3.14 or newer (it uses sys.remote_exec); gputui runs on "
            f"Python {running[0]}.{running[1]} here, and the target must run 3.14 too. To probe a "
            f"job, {OTHER_WAYS}."
        )


def attach(options: Options) -> int:
    pid = options.pid
    if pid is None:  # the CLI requires one
        raise UserError("attach: give the PID of the process to attach to")
    check_supported()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise AttachFailed(f"no process {pid}") from None
    except PermissionError:
        raise AttachFailed(f"process {pid} belongs to another user; attach as that user") from None
    from gputui.link import client

    if client.find_socket(pid) is not None:
        print(f"process {pid} is already probed; see it with `gputui probe {pid}`")
        return 0
    with tempfile.NamedTemporaryFile("w", prefix="gputui-attach-", suffix=".py", delete=False) as f:
        f.write(injection_script())
        script = f.name
    try:
        _remote_exec(pid, script)
        deadline = time.monotonic() + WAIT_FOR_SOCKET
        while time.monotonic() < deadline:
            if client.find_socket(pid) is not None:
                print(f"probe started in process {pid}; watch it with `gputui` or `gputui probe {pid}`")
                return 0
            time.sleep(0.1)
    finally:
        time.sleep(0.5)  # the target reads the script when it gets to it; give it a moment
        try:
            os.unlink(script)
        except OSError:
            pass
    print(f"the probe is armed in process {pid}: it starts when the process imports torch "
          f"(or next runs Python code); check with `gputui probes`")
    return 0


def _remote_exec(pid: int, script: str) -> None:
    if sys.version_info < (3, 14):  # attach() has checked already; this tells the type checker
        raise AttachFailed("gputui attach needs Python 3.14 or newer (it uses sys.remote_exec)")
    try:
        sys.remote_exec(pid, script)
    except PermissionError:
        raise AttachFailed(
            f"not permitted to attach to process {pid}: the kernel's ptrace policy forbids it "
            f"({_ptrace_policy()}). Run gputui attach as root, or {OTHER_WAYS}."
        ) from None
    except ProcessLookupError:
        raise AttachFailed(f"process {pid} exited") from None
    except RuntimeError as exc:
        raise AttachFailed(
            f"process {pid} does not accept remote code ({exc}): it may not be Python 3.14 "
            f"(the same version as gputui's), or it runs with remote debugging disabled "
            f"(PYTHON_DISABLE_REMOTE_DEBUG or -X disable_remote_debug). To probe it, {OTHER_WAYS}."
        ) from None
    except OSError as exc:
        raise AttachFailed(f"cannot attach to process {pid}: {exc}") from None


def _ptrace_policy() -> str:
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        return "ptrace is restricted"
    meaning = {"1": "only a parent may trace its children", "2": "only root may attach",
               "3": "attaching is disabled"}.get(scope, "ptrace is restricted")
    return f"kernel.yama.ptrace_scope = {scope}: {meaning}"
