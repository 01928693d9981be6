"""Hostile strings from other users (command lines, a fake probe's report, a config file) reach every
text output made visible: --once, --watch, `gputui probes`, `gputui probe PID`, error messages and
the live monitor, in a real terminal too. --json keeps them exact (JSON escapes them itself)."""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import unicodedata
from pathlib import Path

import pytest
from hostile import (
    ATTACK,
    SHOWN,
    assert_plain_output_safe,
    assert_terminal_output_safe,
    poison,
)
from plain_data import once_text, probe_text
from ui_data import settle, wait_for

from gputui.collect.collector import open_collector
from gputui.model import GpuProcess
from gputui.plain.report import render_probe_list
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.detail import ProcessDetail
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.processes import ProcessTable
from gputui.untrusted import harmless, visible, visible_all

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).parents[1] / "hostile.py"


# ------------------------------------------------------------------------------------ visible()

def test_every_control_and_format_character_is_made_visible():
    missed = [hex(code) for code in range(0x110000)
              if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
              and visible(chr(code)) == chr(code)]
    assert missed == []


def test_escapes_read_like_python():
    assert visible(ATTACK) == SHOWN
    assert visible("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert visible("\U000e0041") == "\\U000e0041"  # a tag character, invisible on most terminals


def test_ordinary_text_is_the_same_object():
    for text in ("python train.py --lr 3e-4", "训练.py", "café", "ünïcödé 🚀", "x1b [a-z]+ ^$"):
        assert visible(text) is text and harmless(text) is text


def test_a_literal_escape_never_shows_as_the_escaped_character():
    # Sent literally, "\x1b" is four characters; shown, it must differ from an escaped ESC.
    assert visible("\\x1b") == "\\\\x1b" and visible("\x1b") == "\\x1b"
    assert visible("\\a") != visible("\a") and visible("\\a") == "\\\\a"
    assert visible("C:\\data\\run1") == "C:\\\\data\\\\run1"
    assert visible_all(("a\\n", "b")) == ("a\\\\n", "b")


def test_harmless_is_the_last_guard_and_keeps_what_visible_made():
    for text in (ATTACK, "\\x1b", "a\\\x07", "C:\\tmp\x1b[2J"):
        assert harmless(visible(text)) == visible(text)
    assert harmless("saw \\x07 then \x07") == "saw \\x07 then \\x07"  # controls only


def test_visible_all_copies_only_what_changes():
    clean = GpuProcess(pid=1, device_index=0, command=("python", "train.py"), name="python", user="ann")
    assert visible_all(clean) is clean
    dirty = dataclasses.replace(clean, command=("python", "x\x1b[2J"), user="b\rob")
    shown = visible_all(dirty)
    assert shown.command == ("python", "x\\x1b[2J") and shown.user == "b\\rob"
    assert shown.pid == 1 and shown.name == "python"
    Pair = collections.namedtuple("Pair", "left right")
    assert visible_all({"k\n": [Pair("a\x07", 2)]}) == {"k\\n": [Pair("a\\x07", 2)]}


# ------------------------------------------------------------------------------------ plain text

@pytest.fixture(scope="module")
def poisoned():
    """The leaky demo's snapshot with every outside string poisoned, its probe report included."""
    with open_collector("leaky") as collector:
        collector.sample()
        snapshot = collector.sample()
        reports = collector.probe_reports()
    snapshot = dataclasses.replace(snapshot, probes=reports, problems=("NVML said: " + ATTACK,))
    return poison(snapshot)


@pytest.mark.parametrize("color", [False, True])
def test_once_text_shows_every_outside_string_made_visible(poisoned, color):
    out = once_text(poisoned, color=color, width=100_000).encode("utf-8", "surrogateescape")
    assert_plain_output_safe(out)
    assert out.count(b"PWNED") >= 10  # commands, users, names, the device, the probe, the problem


def test_once_text_tells_a_literal_backslash_from_an_escape(poisoned):
    first = poisoned.processes[0]
    sent = (dataclasses.replace(first, command=("python", "literal\\x1b")),
            dataclasses.replace(first, pid=first.pid + 1, command=("python", "escaped\x1b")))
    out = once_text(dataclasses.replace(poisoned, processes=sent), width=100_000)
    assert "python literal\\\\x1b" in out and "python escaped\\x1b" in out


@pytest.mark.parametrize("color", [False, True])
def test_probe_texts_show_every_outside_string_made_visible(poisoned, color):
    report = poisoned.probes[0]
    for out in (probe_text(report, poisoned, color=color, width=500),
                render_probe_list([report], {4242: "it said: " + ATTACK}, color=color, width=500)):
        assert_plain_output_safe(out.encode("utf-8", "surrogateescape"))


# ------------------------------------------------------------------------------------ end to end

@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=f"{ROOT}:{HOSTILE.parent}",
                 XDG_CONFIG_HOME=str(tmp_path / "config"), COLUMNS="400")
    return clean


@pytest.fixture
def fake_probe(env):
    """Another user's trick: a process named with escapes, serving a probe socket that reports
    escapes in every string."""
    # argv cannot hold NUL; the directory lets Python find its virtual environment from argv[0].
    argv0 = os.fsencode(os.path.join(os.path.dirname(sys.executable), "python" + ATTACK.replace("\x00", "")))
    proc = subprocess.Popen([argv0, str(HOSTILE)], executable=sys.executable, env=env,
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def run_gputui(env, *args):
    result = subprocess.run([sys.executable, "-m", "gputui", *args], capture_output=True, env=env,
                            timeout=120)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    return result


@pytest.mark.parametrize("args", [["probes"], ["probe", "PID"], ["--once"]])
def test_a_fake_probe_cannot_write_escapes_to_the_terminal(env, fake_probe, args):
    args = [str(fake_probe.pid) if a == "PID" else a for a in args]
    result = run_gputui(env, *args)
    assert result.returncode in (0, 2)
    assert_plain_output_safe(result.stdout + result.stderr)


def test_json_keeps_the_strings_exact(env, fake_probe):
    result = run_gputui(env, "probe", str(fake_probe.pid), "--json")
    assert result.returncode == 0
    assert b"\x1b" not in result.stdout  # JSON escapes them itself
    report = json.loads(result.stdout)["report"]
    assert report["torch_version"].endswith(ATTACK)


def test_an_error_message_shows_a_config_value_made_visible(env, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('"hostile\\u001b]0;PWNED\\u0007\\r\\nFORGED" = 1\n')
    result = run_gputui(env, "--demo", "--once", "--config", str(config))
    assert result.returncode == 2
    assert b"`hostile\\x1b]0;PWNED\\x07\\r\\nFORGED` is not a setting" in result.stderr
    assert b"\x1b" not in result.stderr and b"\nFORGED" not in result.stderr
    assert result.stderr.count(b"\n") == 1  # one line, however many the value tried to add


def test_an_error_message_tells_a_literal_backslash_from_an_escape(env, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('"literal\\\\x1b" = 1\n')  # the TOML text "literal\\x1b": a key with one backslash
    result = run_gputui(env, "--demo", "--once", "--config", str(config))
    assert result.returncode == 2
    assert b"`literal\\\\x1b` is not a setting" in result.stderr


# ------------------------------------------------------------------------------------ nested JSON

NOTE = b"unreadable reply: not valid JSON: JSON nested too deeply"


@pytest.fixture
def nested_probe(env):
    """Another user's trick: a probe socket answering JSON nested far past the parser's recursion."""
    proc = subprocess.Popen([sys.executable, str(HOSTILE), "nested"], env=env, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_one_shot_prints_note_a_probe_answering_nested_json(env, nested_probe):
    pid = nested_probe.pid
    note = f"probe of process {pid} did not answer: {NOTE.decode()}"
    once = run_gputui(env, "--once")
    assert once.returncode == 0 and f"! {note}\n".encode() in once.stdout, once.stdout.decode()
    document = run_gputui(env, "--json")
    assert document.returncode == 0 and note in json.loads(document.stdout)["snapshot"]["problems"]
    listed = run_gputui(env, "probes")
    assert listed.returncode == 0 and f"{pid} did not answer: ".encode() + NOTE in listed.stdout, \
        listed.stdout.decode()
    listed = run_gputui(env, "probes", "--json")
    assert listed.returncode == 0
    assert json.loads(listed.stdout)["unreachable"] == [{"pid": pid, "reason": NOTE.decode()}]


@pytest.mark.parametrize("args", [["probe", "PID"], ["probe", "PID", "--json"]])
def test_asking_a_probe_answering_nested_json_is_one_line(env, nested_probe, args):
    result = run_gputui(env, *[str(nested_probe.pid) if a == "PID" else a for a in args])
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == (f"gputui: process {nested_probe.pid}: ".encode() + NOTE +
                             b". `gputui probes` lists the probed processes you can reach.\n")


def test_watch_keeps_printing_beside_a_probe_answering_nested_json(env, nested_probe):
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "--watch", "0.5"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    deadline = time.monotonic() + 60
    while seen.count(NOTE) < 2 and time.monotonic() < deadline:  # two prints: it lived through one
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break  # it ended
            seen += chunk
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert seen.count(NOTE) >= 2, (seen + err).decode(errors="replace")
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode(errors="replace")


# ------------------------------------------------------------------------------------ live monitor

class PoisonedSource:
    """The leaky demo with every outside string poisoned, as a collector."""

    def __init__(self):
        self.collector = open_collector("leaky")

    def sample(self):
        return poison(self.collector.sample())

    def probe_reports(self):
        return poison(self.collector.probe_reports())

    def close(self):
        self.collector.close()


UNSAFE_CHARS = [chr(c) for c in (*range(0x20), *range(0x7f, 0xa0), 0x202e) if chr(c) != "\n"]


def assert_screen_safe(svg: str) -> None:
    found = [hex(ord(c)) for c in set(svg) if c in UNSAFE_CHARS or 0xD800 <= ord(c) <= 0xDFFF]
    assert found == [], found
    assert "PWNED" in svg  # the hostile strings are on screen, made visible


async def test_the_live_monitor_shows_outside_strings_made_visible():
    app = GpuTuiApp(Sampler(PoisonedSource(), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, tries=200)
        assert_screen_safe(app.export_screenshot())
        assert app._notifications and all(harmless(n.message) == n.message for n in app._notifications)
        table = app.screen.query_one(ProcessTable)
        pid = app.snapshot.probes[0].pid
        table.move_cursor(row=next(i for i, key in enumerate(table.row_keys)
                                   if key.startswith(f"{pid}/")))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetail))  # (the app opens it on a message)
        await pilot.pause()
        assert_screen_safe(app.export_screenshot())


@pytest.mark.parametrize("answer", ["reply", "refusal"])
async def test_a_probes_answer_to_the_record_key_is_shown_made_visible(answer):
    def requester(pid, op, params):
        if answer == "refusal":
            raise RuntimeError(ATTACK)
        return {"recording": True, "steps": ATTACK, "starts_at_step": ATTACK}

    app = GpuTuiApp(Sampler(PoisonedSource(), watch_probes=False), MonitorOptions(me="bob"), requester=requester)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, tries=200)
        app.record_sites(app.snapshot.probes[0].pid, on=True, steps=5)
        await app.workers.wait_for_complete()
        await pilot.pause()
        told = [n.message for n in app._notifications if "PWNED" in n.message and "Process" in n.message]
        assert told and all(SHOWN in m and harmless(m) == m for m in told)


def test_a_real_terminal_gets_no_escape_from_a_fake_probe(env, fake_probe):
    """The live monitor in a pseudo-terminal, without a driver, showing the fake probe's row and
    its detail screen: every byte it writes is checked."""
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    pid, fd = pty.fork()
    if pid == 0:  # the child: gputui on a 160x45 terminal
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 160, 0, 0))
        os.execve(sys.executable, [sys.executable, "-m", "gputui"], env)
    out = bytearray()

    def read_for(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                out.extend(data)

    try:
        read_for(8)
        os.write(fd, b"\r")  # Enter: the probed row's details
        read_for(4)
        os.write(fd, b"\x1b")  # back
        read_for(2)
        os.write(fd, b"q")
        read_for(4)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    assert_terminal_output_safe(bytes(out))
