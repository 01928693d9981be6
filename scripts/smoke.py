"""Smoke test of an installed gputui, as a user gets it: run from outside the source tree.

    python scripts/smoke.py [--gputui PATH] [--scenario NAME ...] [--size 120x40 ...]

For each demo scenario: ``--once`` and ``--json`` print the devices and processes; the live monitor,
started in a detached tmux session of each size, draws devices and process rows without a
traceback, and quits with ``q`` (exit 0). Needs tmux. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIOS = ("workstation", "training-node", "leaky", "mig", "faults")
SIZES = ("120x40", "50x15")
SOURCE_TREE = Path(__file__).resolve().parents[1]
DRAW_TIMEOUT = 60.0  # seconds for the first screen (a cold start on a busy CI machine)
QUIT_TIMEOUT = 20.0


class SmokeFailure(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gputui", default=shutil.which("gputui"), help="the installed command")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--size", action="append", help="tmux pane size, COLSxROWS")
    args = parser.parse_args(argv)
    if not args.gputui:
        parser.error("no gputui command on PATH: install the wheel or give --gputui")
    gputui = str(Path(args.gputui).absolute())
    failures = 0
    with tempfile.TemporaryDirectory(prefix="gputui-smoke-") as work:
        env = _environment(Path(work))
        checks = [("installed outside the source tree", lambda: check_installed(gputui, env, work))]
        for scenario in args.scenario or SCENARIOS:
            checks.append((f"{scenario}: --once and --json",
                           lambda s=scenario: check_plain(gputui, s, env, work)))
            for size in args.size or SIZES:
                checks.append((f"{scenario}: live monitor at {size}",
                               lambda s=scenario, z=size: check_live(gputui, s, z, env, work)))
        for name, check in checks:
            started = time.monotonic()
            try:
                check()
            except SmokeFailure as exc:
                failures += 1
                print(f"FAIL {name}: {exc}", flush=True)
            else:
                print(f"ok   {name} ({time.monotonic() - started:.1f}s)", flush=True)
    print(f"{len(checks) - failures} passed, {failures} failed")
    return 1 if failures else 0


def _environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NO_COLOR", "COLUMNS", "LINES", "GPUTUI_PROBE", "TMUX")}
    # A private probe directory, so probes of other jobs on the machine do not change the screen.
    probes = work / "probes"
    probes.mkdir(mode=0o700)
    env.update(GPUTUI_PROBE_DIR=str(probes), XDG_CONFIG_HOME=str(work / "config"),
               LANG=env.get("LANG") or "C.UTF-8", TERM="tmux-256color")
    return env


def run(command: list[str], env: dict[str, str], cwd: str, timeout: float = 120) -> str:
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd,
                            timeout=timeout, stdin=subprocess.DEVNULL)
    if result.returncode != 0 or "Traceback" in result.stderr + result.stdout:
        raise SmokeFailure(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
    return result.stdout


def check_installed(gputui: str, env: dict[str, str], cwd: str) -> None:
    """The command imports gputui from an installation, not from this checkout."""
    python = _interpreter(gputui)
    where = run([python, "-c", "import gputui; print(gputui.__file__)"], env, cwd).strip()
    if Path(where).resolve().is_relative_to(SOURCE_TREE):
        raise SmokeFailure(f"gputui is imported from the source tree: {where}")
    if "site-packages" not in where:
        raise SmokeFailure(f"gputui is not an installed package: {where}")
    if (Path(where).parent / "ui" / "gputui.tcss").is_file() is False:
        raise SmokeFailure("the installed package has no ui/gputui.tcss")


def _interpreter(script: str) -> str:
    first = Path(script).read_text(errors="replace").splitlines()[0]
    if not first.startswith("#!"):
        raise SmokeFailure(f"{script} is not a console script")
    return first[2:].strip().split()[0]


def check_plain(gputui: str, scenario: str, env: dict[str, str], cwd: str) -> dict:
    document = json.loads(run([gputui, "--demo", scenario, "--json"], env, cwd))
    snapshot = document["snapshot"]
    if not snapshot["devices"]:
        raise SmokeFailure("--json lists no devices")
    text = run([gputui, "--demo", scenario, "--once"], env, cwd)
    for device in snapshot["devices"]:
        if f"[{device['index']}]" not in text:
            raise SmokeFailure(f"--once does not show GPU {device['index']}:\n{text}")
    for process in snapshot["processes"]:
        if not re.search(rf"^\s*{process['pid']}\b", text, re.M):
            raise SmokeFailure(f"--once does not list process {process['pid']}:\n{text}")
    return snapshot


def check_live(gputui: str, scenario: str, size: str, env: dict[str, str], cwd: str) -> None:
    columns, rows = size.split("x")
    snapshot = json.loads(run([gputui, "--demo", scenario, "--json"], env, cwd))["snapshot"]
    model = _model(next(d["name"] for d in snapshot["devices"] if d["name"]))
    pids = {p["pid"] for p in snapshot["processes"]} | {r["pid"] for r in snapshot["probes"]}
    server = f"gputui-smoke-{os.getpid()}"
    status = Path(cwd) / f"status-{scenario}-{size}"
    tmux = ["tmux", "-L", server, "-f", os.devnull]
    # The shell stays after gputui ends, so a traceback stays on the screen to be read back.
    shell = f"{_quote(gputui)} --demo {scenario}; echo $? > {_quote(str(status))}; sleep 600"
    subprocess.run([*tmux, "new-session", "-d", "-s", "smoke", "-x", columns, "-y", rows,
                    "-c", cwd, shell], check=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    try:
        screen = ""
        deadline = time.monotonic() + DRAW_TIMEOUT
        while time.monotonic() < deadline:
            screen = _capture(tmux)
            if "Traceback" in screen or status.exists():
                break
            if model in screen and _pid_rows(screen) & pids:
                break
            time.sleep(0.5)
        if "Traceback" in screen or status.exists():
            time.sleep(0.5)  # the rest of the traceback
            raise SmokeFailure(f"the monitor failed:\n{_capture(tmux)}")
        if model not in screen:
            raise SmokeFailure(f"no device line ({model!r}) on the screen:\n{screen}")
        if not _pid_rows(screen) & pids:
            raise SmokeFailure(f"no process row (pids {sorted(pids)}) on the screen:\n{screen}")
        lines = screen.splitlines()
        if len(lines) > int(rows) or max(len(line) for line in lines) > int(columns):
            raise SmokeFailure(f"the screen is not {size}:\n{screen}")
        subprocess.run([*tmux, "send-keys", "-t", "smoke", "q"], check=True, env=env)
        deadline = time.monotonic() + QUIT_TIMEOUT
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not status.exists():
            raise SmokeFailure(f"still running {QUIT_TIMEOUT:.0f}s after q:\n{_capture(tmux)}")
        code = status.read_text().strip()
        if code != "0":
            raise SmokeFailure(f"exit status {code} after q")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, env=env)


def _capture(tmux: list[str]) -> str:
    result = subprocess.run([*tmux, "capture-pane", "-p", "-t", "smoke"], capture_output=True,
                            text=True)
    return result.stdout if result.returncode == 0 else ""


def _model(name: str) -> str:
    """What a narrow device line keeps of a name: "NVIDIA H100 80GB HBM3" -> "H100"."""
    for vendor in ("NVIDIA ", "GeForce ", "Tesla "):
        name = name.replace(vendor, "")
    return name[:3]


def _pid_rows(screen: str) -> set[int]:
    """PIDs at the start of table rows (a marker such as the cursor may come first)."""
    return {int(m.group(1)) for m in re.finditer(r"^\W{0,3}\s*(\d{3,7})\s", screen, re.M)}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
