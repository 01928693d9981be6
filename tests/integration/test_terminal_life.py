"""The live monitor's life in a real terminal: started where it cannot run (no keyboard, a dumb
terminal), ended by signals, and NO_COLOR. ``python -m gputui --demo`` in a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESTORED = (b"\x1b[?1049l", b"\x1b[?1000l")  # left the alternate screen, mouse reporting off
COLOUR = re.compile(rb"\x1b\[[0-9;]*(?:38|48);[25];")
MONITOR_STARTED = b"\x1b[?1000h"  # Textual turns mouse reporting on


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT), TERM="xterm-256color",
                 XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


class Terminal:
    """``python -m gputui ARGS`` on a 100x30 pseudo-terminal; everything it writes is kept."""

    def __init__(self, env: dict, *args: str, stderr: str | None = None) -> None:
        """``stderr``: a file standard error is sent to (``2>FILE``) rather than the terminal, or "closed"."""
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            if stderr == "closed":
                os.close(2)
            elif stderr is not None:
                os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            os.execve(sys.executable, [sys.executable, "-m", "gputui", *args], env)
        self.out = bytearray()
        self.modes_after: list | None = None  # the terminal's modes once the monitor has exited

    def read(self, seconds: float, until: bytes | None = None) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (until and until in self.out):
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.out.extend(data)

    def read_new(self, seconds: float, until: bytes) -> bytes:
        """Read until ``until`` is written anew (it may be in what came before); what came, from now."""
        start, end = len(self.out), time.monotonic() + seconds
        while until not in self.out[start:] and time.monotonic() < end:
            self.read(0.1)
        return bytes(self.out[start:])

    def wait(self, seconds: float = 15.0) -> int | None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.read(0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.read(0.2)
                self.modes_after = termios.tcgetattr(self.fd)
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        return None

    def drawn(self) -> None:
        """Wait for the monitor's first full frame (the process table's header once Textual runs:
        mouse reporting on), past the early frame that the plain renderer drew before."""
        self.read(30, until=MONITOR_STARTED)
        assert MONITOR_STARTED in self.out, bytes(self.out[-500:])
        started = self.out.index(MONITOR_STARTED)
        end = time.monotonic() + 30
        while b"COMMAND" not in self.out[started:] and time.monotonic() < end:
            self.read(0.1)
        assert b"COMMAND" in self.out[started:], bytes(self.out[-500:])
        self.read(0.5)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_ends_the_monitor_with_the_terminal_restored_and_the_shells_status(env, signum):
    term = Terminal(env, "--demo")
    term.drawn()
    os.kill(term.pid, signum)
    assert term.wait() == 128 + signum  # 143 for SIGTERM, 130 SIGINT, 129 SIGHUP, 131 SIGQUIT
    tail = bytes(term.out[-400:])
    assert all(code in tail for code in RESTORED), tail
    assert b"Traceback" not in term.out


@pytest.mark.parametrize("where", ["/dev/null", "log"])
def test_with_stderr_sent_elsewhere_the_monitor_draws_on_the_terminal_and_keeps_its_clock(env, tmp_path, where):
    """``gputui --demo 2>/dev/null`` (or ``2>log``) once left the early frame on screen for good: Textual draws
    on standard error. Now the monitor draws on the terminal, the clock moves, ``q`` quits, and what is said
    after it has closed goes to the log as asked."""
    log = str(tmp_path / "log") if where == "log" else where
    term = Terminal(env, "--demo", stderr=log)
    term.drawn()
    drawn = len(term.out)
    term.read(3)
    assert len(term.out) - drawn > 100, "nothing redrawn in 3 s: the clock stands still"
    os.write(term.fd, b"q")
    assert term.wait() == 0
    assert all(code in bytes(term.out[-400:]) for code in RESTORED)
    if where == "log":
        assert Path(log).read_bytes() == b""  # nothing of the screen went to the log


def test_with_stderr_closed_the_monitor_says_why_on_the_terminal_and_exits_2(env):
    term = Terminal(env, "--demo", stderr="closed")
    assert term.wait() == 2
    said = bytes(term.out).decode()
    assert "gputui: the live monitor draws on standard error, which is closed (2>&-)" in said, said
    assert "Traceback" not in said and "\x1b[?1049h" not in said  # nothing drawn, no alternate screen


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_stop_and_continue_leaves_one_keyboard_reader_and_q_still_quits(env):
    """kill -STOP then kill -CONT (no SIGTSTP): Textual's driver restarted application mode as if it
    had suspended itself, starting a second keyboard thread beside the first (keys were then lost
    until Escape in 5 of 14 runs in tmux) and taking the raw modes for the ones to restore at exit."""
    term = Terminal(env, "--demo")
    term.drawn()
    before = threads(term.pid)
    os.kill(term.pid, signal.SIGSTOP)
    time.sleep(0.3)
    os.kill(term.pid, signal.SIGCONT)
    term.read(1.5)
    assert threads(term.pid) == before
    os.write(term.fd, b"q")
    assert term.wait() == 0
    assert all(code in bytes(term.out[-400:]) for code in RESTORED)
    assert term.modes_after is not None
    lflag = term.modes_after[3]
    assert lflag & termios.ECHO and lflag & termios.ICANON  # the terminal as it was, not left raw


def test_a_suspend_by_sigtstp_gives_the_terminal_back_and_takes_it_again(env):
    """kill -TSTP is Textual's own suspend: the terminal restored while stopped, set up again on SIGCONT."""
    term = Terminal(env, "--demo")
    term.drawn()
    before = threads(term.pid)
    os.kill(term.pid, signal.SIGTSTP)
    assert RESTORED[0] in term.read_new(10, RESTORED[0])
    os.kill(term.pid, signal.SIGCONT)
    assert MONITOR_STARTED in term.read_new(10, MONITOR_STARTED)
    term.read(1.5)  # as the SIGSTOP test: the input thread back before the key (0.5 s missed it once, under -n 2)
    assert threads(term.pid) == before
    os.write(term.fd, b"q")
    assert term.wait() == 0
    assert term.modes_after is not None and term.modes_after[3] & termios.ECHO


def test_the_first_sample_is_on_screen_before_the_monitor_has_loaded(env):
    term = Terminal(env, "--demo", "training-node")
    term.drawn()
    out = bytes(term.out)
    entered, started = out.index(b"\x1b[?1049h"), out.index(MONITOR_STARTED)
    early = out[entered:started]
    assert b"dgx-sim-01" in early and b"H100" in early and b"COMMAND" in early  # --once's picture
    # the GPUs as NVML lists them, then with /proc's details: each cut to the 30-line window
    assert all(frame.count(b"\r\n") < 30 for frame in early.split(b"\x1b[?1049h"))
    os.write(term.fd, b"q")
    assert term.wait() == 0
    assert all(code in bytes(term.out[-400:]) for code in RESTORED)


def test_q_typed_while_the_monitor_loads_quits_it(env):
    """The user sees the early frame and presses q before Textual runs: q quits (it once went into
    the filter box, which had the focus for a moment at start)."""
    term = Terminal(env, "--demo", "training-node")
    term.read(30, until=b"COMMAND")  # the early frame
    os.write(term.fd, b"q")
    assert term.wait() == 0
    assert all(code in bytes(term.out[-400:]) for code in RESTORED)


def test_q_still_exits_0(env):
    term = Terminal(env, "--demo")
    term.drawn()
    os.write(term.fd, b"q")
    assert term.wait() == 0


def test_ctrl_c_exits_0_with_the_terminal_restored(env):
    term = Terminal(env, "--demo")
    term.drawn()
    os.write(term.fd, b"\x03")  # Ctrl-C: a key in Textual's raw mode, not SIGINT
    assert term.wait() == 0
    assert all(code in bytes(term.out[-400:]) for code in RESTORED)
    assert b"Traceback" not in term.out


def run_on_a_terminal(env, command: str) -> tuple[subprocess.CompletedProcess, bytes]:
    """``command`` by bash with stdin and stdout on a pseudo-terminal (unless the command redirects)."""
    main, secondary = os.openpty()
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", command], stdin=secondary, stdout=secondary,
                            stderr=subprocess.PIPE, env=env, timeout=60)
    os.close(secondary)
    out = bytearray()
    while select.select([main], [], [], 0.2)[0]:
        try:
            data = os.read(main, 65536)
        except OSError:
            break
        if not data:
            break
        out.extend(data)
    os.close(main)
    assert time.monotonic() - started < 30  # it does not sit there spinning
    return result, bytes(out)


@pytest.mark.parametrize("stdin", ["</dev/null", "<&-", "< <(echo q)"])
def test_without_a_keyboard_the_monitor_prints_one_snapshot_and_says_why(env, stdin):
    result, out = run_on_a_terminal(env, f"{sys.executable} -m gputui --demo {stdin}")
    assert result.returncode == 0
    assert b"Traceback" not in result.stderr
    assert result.stderr.decode().startswith(
        "gputui: the live monitor reads keys from a terminal and standard input is not one, so here is "
        "one snapshot instead")
    assert b"\x1b[?1049h" not in out  # never went full screen
    assert b"COMMAND" in out and b"GPU" in out  # --once's text


def test_a_dumb_terminal_gets_one_snapshot(env):
    result, out = run_on_a_terminal({**env, "TERM": "dumb"}, f"{sys.executable} -m gputui --demo")
    assert result.returncode == 0
    assert "TERM=dumb" in result.stderr.decode()
    assert b"\x1b" not in out  # no escape at all: no full screen, no colour
    assert b"COMMAND" in out


def test_no_color_means_no_colour_at_all(env):
    term = Terminal({**env, "NO_COLOR": "1"}, "--demo", "training-node")
    term.drawn()
    term.read(2.0)
    os.write(term.fd, b"q")
    assert term.wait() == 0
    found = COLOUR.search(term.out)
    assert found is None, bytes(term.out[max(0, found.start() - 80):found.end() + 40])
    assert re.search(rb"\x1b\[(?:[0-9;]*;)?7[;m]", term.out)  # the selection, in reverse video
