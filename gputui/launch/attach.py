"""``gputui attach PID`` and ``gputui detach PID``: start or stop the probe inside a running CPython.

The preflight (preflight.py) says why it cannot be done, if it cannot; inject.py queues a few lines
of Python in the job, which run on its main thread at its next safe point. They arm the probe (from
this gputui's own installation when the job has none), which starts at once if the job has torch or
when it imports it; or they stop it. The lines report back through a file in a directory made for
this one attach, so gputui says what happened inside the job, or that the job has not run Python
since (a long C call) and the probe is queued.

The job may belong to another user and be hostile: the file it reports to is root's, in a folder of
root's that the job may enter but not change, and is read back through root's own descriptor, so no
link or FIFO the job plants is ever opened. The whole command ends within COMMAND_SECONDS, and one
stopped by a signal still lets the job go and removes that folder first (bounds.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from types import TracebackType
from typing import Callable

from gputui import __version__
from gputui.errors import UserError
from gputui.launch import GPUTUI_HOME, bounds, inject, preflight
from gputui.launch.preflight import Refused
from gputui.options import Options
from gputui.untrusted import visible

QUICK = 2.0  # seconds: a job running Python gets to the queued code well within this
WAIT_FOR_CODE = 30.0  # seconds gputui waits for a job busy outside Python (the monitor gives the command 60)
WAIT_FOR_SOCKET = 10.0
# The whole command: gdb's 20 s (inject.GDB_SECONDS) and the 30 s wait, within the monitor's 60.
COMMAND_SECONDS = 55.0
RESULT = "result"
ANSWER_PREFIX = "gputui-attach-"
# A folder of ours older than this is one a killed gputui attach left (SIGKILL skips every clean-up): far past
# the command's own bound (COMMAND_SECONDS), so never a running attach's. Swept at the next attach.
STALE_AFTER = 600.0
SWEEP_LIMIT = 100_000  # temp-directory entries looked at, at most (anyone may fill /tmp with names)
WORD_LIMIT = 4096  # bytes of the job's answer read: one word, or an error's line

# Both scripts report what became of them through the ACK file, the same way.
_SAY = """\
def _say(word):
    if ACK is not None:
        try:
            with open(ACK, 'w') as f:
                f.write(word)
        except Exception:
            pass
"""

# Run inside the job (exec'd in a namespace of its own, every error caught): import gputui's probe
# hook from this installation unless the job has a gputui already (then only the same version will
# do), arm it, and say what became of it.
_ATTACH = _SAY + """\
import sys
def _attach():
    known = sys.modules.get('gputui')
    if known is not None and getattr(known, '__version__', None) != VERSION:
        return 'version: %s' % getattr(known, '__version__', '?')
    if known is None:
        sys.path.insert(0, HOME)
        try:
            import gputui.probe.hook
        finally:
            sys.path.remove(HOME)
    hook = sys.modules['gputui.probe.hook']
    hook.start_when_torch_imported('attach')
    runtime = sys.modules.get('gputui.probe.runtime')
    probe = runtime.current() if runtime is not None else None
    if probe is not None and probe.running:
        return 'started'
    return 'not-started' if 'torch' in sys.modules else 'armed'
try:
    _say(_attach())
except Exception as exc:
    _say('failed: %s: %s' % (type(exc).__name__, exc))
"""

# Run inside the job: stop the probe and any armed start; import nothing.
_DETACH = _SAY + """\
import sys
def _detach():
    hook = sys.modules.get('gputui.probe.hook')
    runtime = sys.modules.get('gputui.probe.runtime')
    armed = hook is not None and any(type(f).__name__ == '_WaitForTorch' for f in sys.meta_path)
    if hook is not None:
        hook.remove_watch()
    probe = runtime.current() if runtime is not None else None
    if probe is not None:
        runtime.stop()
        return 'stopped'
    return 'disarmed' if armed else 'none'
try:
    _say(_detach())
except Exception as exc:
    _say('failed: %s: %s' % (type(exc).__name__, exc))
"""


def injection_script(home: str = GPUTUI_HOME, ack: str | None = None) -> str:
    """The Python source run inside the target to arm the probe; ``ack``: the file it reports to."""
    return f"ACK = {ack!r}\nHOME = {home!r}\nVERSION = {__version__!r}\n" + _ATTACH


def detach_script(ack: str | None = None) -> str:
    """The Python source run inside the target to stop its probe."""
    return f"ACK = {ack!r}\n" + _DETACH


def attach(options: Options) -> int:
    pid = _pid(options)
    with bounds.bounded(COMMAND_SECONDS, f"gputui attach {pid}"):
        return _attach(pid)


def _attach(pid: int) -> int:
    target = preflight.check(pid)
    from gputui.link import client

    if client.find_socket(pid) is not None:
        print(f"process {pid} is already probed; see it with `gputui probe {pid}`")
        return 0
    word = _run_in_job(target, injection_script)
    if word is None:
        return 0
    if word == "started":
        deadline = time.monotonic() + WAIT_FOR_SOCKET
        while client.find_socket(pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"probe started in process {pid}; watch it with `gputui` or `gputui probe {pid}`")
    elif word == "armed":
        print(f"the probe is armed in process {pid}: it starts when the process imports torch")
    elif word == "not-started":
        raise Refused(f"the probe did not start in process {pid}: a launcher (torchrun, deepspeed) trains "
                      f"nothing itself (attach to its ranks), or the job's stderr says why")
    elif word.startswith("version: "):
        raise Refused(f"process {pid} has gputui {visible(word[9:])} loaded and this is gputui {__version__}: "
                      f"attach with that version's gputui")
    else:
        raise Refused(f"the probe could not start in process {pid}: {visible(word.removeprefix('failed: '))}")
    return 0


def detach(options: Options) -> int:
    pid = _pid(options)
    with bounds.bounded(COMMAND_SECONDS, f"gputui detach {pid}"):
        return _detach(pid)


def _detach(pid: int) -> int:
    target = preflight.check(pid, command="detach")
    from gputui.link import client

    socket = client.find_socket(pid)
    word = _run_in_job(target, detach_script)
    if word is None:
        return 0
    if word == "stopped":
        deadline = time.monotonic() + WAIT_FOR_SOCKET
        while socket is not None and socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"probe stopped in process {pid}: its hooks are removed and its socket closed; the job runs on")
    elif word == "disarmed":
        print(f"the armed probe in process {pid} is removed: it will not start when torch is imported")
    elif word == "none":
        raise Refused(f"process {pid} has no probe to stop")
    else:
        raise Refused(f"the probe in process {pid} could not stop: {visible(word.removeprefix('failed: '))}")
    return 0


def _pid(options: Options) -> int:
    if options.pid is None:  # the CLI requires one
        raise UserError(f"{options.mode}: give the PID of the process")
    return options.pid


def _run_in_job(target: preflight.Target, script: Callable[..., str]) -> str | None:
    """Queue ``script(ack)`` in the job and return what it reported, or None (said why) while the job
    has not run Python since. The job is never left stopped: only the queueing stops it, briefly."""
    with _Answer(target.uid) as answer:
        inject.run_code(target, script(ack=answer.path), answer.folder)
        word = answer.wait(target, QUICK)
        if word is None:
            print(f"process {target.pid} has not run Python since (a long C call?): the probe's code is queued "
                  f"and runs when it next does; waiting up to {WAIT_FOR_CODE:.0f} s (the job is not stopped)",
                  flush=True)
            word = answer.wait(target, WAIT_FOR_CODE - QUICK)
        if word is None:
            print(f"process {target.pid} still has not run Python: the code stays queued and runs when it "
                  f"does; check with `gputui probes`")
        return word


def sweep_stale(folder: str) -> None:
    """Remove the answer folders a killed gputui attach left in ``folder``: only folders (not links), of this
    user, older than STALE_AFTER. Another user's entry of the same name is left alone, whatever it is."""
    now, me = time.time(), os.geteuid()
    try:
        with os.scandir(folder) as entries:
            for seen, entry in enumerate(entries):
                if seen >= SWEEP_LIMIT:
                    return
                if not entry.name.startswith(ANSWER_PREFIX):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode) and info.st_uid == me and now - info.st_mtime > STALE_AFTER:
                    shutil.rmtree(entry.path, ignore_errors=True)  # (a sticky /tmp: no one else may rename it)
    except OSError:
        pass  # no temp directory to read: nothing to sweep


class _Answer:
    """The file the job writes its one word to. Root makes it, in a folder of root's that the job's
    user may enter but neither list nor change, gives it to that user, and reads it back through the
    descriptor it opened: what the job can do to the name is moot, and nothing it plants is opened."""

    def __init__(self, uid: int):
        self.uid = uid
        self.folder = ""
        self.path = ""
        self._fd = -1

    def __enter__(self) -> _Answer:
        sweep_stale(tempfile.gettempdir())
        with bounds.held():  # (made whole, or not at all, whatever signal comes)
            self.folder = tempfile.mkdtemp(prefix=ANSWER_PREFIX)
            try:
                os.chmod(self.folder, 0o711)
                self.path = os.path.join(self.folder, RESULT)
                flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                self._fd = os.open(self.path, flags, 0o600)
                if self.uid != os.geteuid():
                    os.fchown(self._fd, self.uid, -1)  # root attaching to a user's job: the job writes it
            except BaseException:
                self._remove()
                raise
        return self

    def _remove(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with bounds.held():
            self._remove()

    def wait(self, target: preflight.Target, seconds: float) -> str | None:
        """The job's word, once it has written one within ``seconds``; Refused if it exits or runs
        another program meanwhile (the queued code then never runs)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            word = os.pread(self._fd, WORD_LIMIT, 0).decode("utf-8", "replace").strip()
            if word:  # (empty: the job has opened the file and not written it yet)
                return word
            why = preflight.changed(target)
            if why is not None:
                raise Refused(f"process {target.pid} {why} before it said what became of the probe")
            time.sleep(0.02)
        return None
