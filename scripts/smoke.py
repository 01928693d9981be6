"""Smoke test of an installed gputui, as a user gets it: run from outside the source tree.

    python scripts/smoke.py [--gputui PATH] [--scenario NAME ...] [--size 120x40 ...]

For each demo scenario: ``--once`` and ``--json`` print the devices and processes and what that
scenario is there to show (SHOWS: a lost GPU, MIG instances, the leak and its OOM ...); the live
monitor, started in a detached tmux session of each size, draws devices and process rows without a
traceback, and quits with ``q`` (exit 0). Every scenario the installed gputui offers must have its
checks here. Needs tmux. Exit status 0 when every check passed.
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
from typing import Callable

SIZES = ("120x40", "50x15")
SOURCE_TREE = Path(__file__).resolve().parents[1]
DRAW_TIMEOUT = 60.0  # seconds for the first screen (a cold start on a busy CI machine)
QUIT_TIMEOUT = 20.0


class SmokeFailure(Exception):
    pass


# What one scenario shows, checked on its --once text and its --json snapshot.
Shows = Callable[[str, dict], bool]


def printed(pattern: str) -> Shows:
    """The --once text has a line (or lines) matching ``pattern``."""
    return lambda text, snapshot: re.search(pattern, text, re.M) is not None


def devices_of(pid: int, snapshot: dict) -> list[int]:
    """The GPUs process ``pid`` is on, by index."""
    return sorted(p["device_index"] for p in snapshot["processes"] if p["pid"] == pid)


# What each demo scenario is there to show, in the words of its check. The scenario's clock starts where
# it is interesting (gputui.collect.sim.DEMO_START), so these hold from the first sample on.
SHOWS: dict[str, tuple[tuple[str, Shows], ...]] = {
    "workstation": (
        ("Xorg, a graphics process, on GPU 0", printed(r"^\s*1455\s+root\s+0\s+G\s")),
        ("blender, compute and graphics, on GPU 1", printed(r"^\s*5230\s+carol\s+1\s+C\+G\s")),
        ("ffmpeg's video encoder busy on GPU 1", lambda text, s: (s["devices"][1]["encoder_util"] or 0) > 0),
    ),
    "training-node": (
        ("8 H100s", lambda text, s: [d["name"] for d in s["devices"]] == ["NVIDIA H100 80GB HBM3"] * 8),
        ("the torchrun job's 8 ranks as one job", printed(r"^train\.py \(torchrun\)\s+8 ranks, GPUs 0-7")),
        ("rank 0's probe report under its row", printed(r"^48231 .*\n\s+probe torch ")),
    ),
    "leaky": (
        ("the probe's leak verdict", printed(r"leak: allocated grows 48\.0 MiB per step")),
        # The simulator's leaking run fails in step 499, 498 done (tests/unit/test_analysis_sim.py holds the
        # forecast to that truth all along the run).
        ("the OOM forecast at the simulator's own step", printed(r"out of memory at step 498 in \d")),
        ("the advice on the kept graphs", printed(r"advice \d: Each step's autograd graph is kept alive")),
    ),
    "mig": (
        ("GPU 0's four MIG instances", lambda text, s: [m["profile"] for m in s["devices"][0]["mig_instances"]]
         == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
        ("a process on MIG instance 0:1", printed(r"^\s*61010\s+priya\s+0:1\s")),
        ("GPU 1 in exclusive-process mode", lambda text, s: s["devices"][1]["compute_mode"] == "exclusive_process"
         and re.search(r"^\[1\] .*\n?.*exclusive process", text, re.M) is not None),
    ),
    "faults": (
        ("GPU 1 lost", printed(r"^\[1\] .*GPU is lost")),
        ("another user's process hidden (hidepid)", printed(r"^\s*2718\s.*access denied")),
        ("a zombie holding GPU memory", printed(r"^\s*1618\s.*zombie")),
        ("a process gone from /proc", printed(r"^\s*4040\s.*exited before its details could be read")),
    ),
    "dataparallel": (
        ("one process on all 4 GPUs", lambda text, s: devices_of(61042, s) == [0, 1, 2, 3]),
        ("GPU 0 holding more than the replicas", printed(r"! GPU 0 holds [\d.]+ GiB, [\d.]+x the others' median")),
        ("the advice to use DistributedDataParallel", printed(r"advice: Use DistributedDataParallel")),
    ),
    "torchrun": (
        ("this node's 8 ranks of the 16-rank job", printed(r"^pretrain\.py \(torchrun\)\s+8 ranks of 16")),
        ("the straggler, rank 13", printed(r"! rank 13 lags the others")),
    ),
    "shared-k8s": (
        ("the notebook pod that owns GPUs 5 and 6", printed(r"^\s*83001\s+\S+\s+team-vision/notebook-sam\s+5\s")),
        ("the training pod's four assigned GPUs", lambda text, s: [
            len(p["owner"]["pod"]["gpus"]) for p in s["processes"]
            if p["pid"] == 81001 and (p.get("owner") or {}).get("pod")][:1] == [4]),
    ),
}
SCENARIOS = tuple(SHOWS)


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
        checks = [("installed outside the source tree", lambda: check_installed(gputui, env, work)),
                  ("every demo scenario has its checks", lambda: check_every_scenario(gputui, env, work))]
        for scenario in args.scenario or SCENARIOS:
            checks.append((f"{scenario}: --once and --json show what it is for",
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


def check_every_scenario(gputui: str, env: dict[str, str], cwd: str) -> None:
    """The installed gputui offers no demo scenario that SHOWS has no checks for."""
    offered = run([_interpreter(gputui), "-c", "from gputui.options import SCENARIOS; print(*SCENARIOS)"],
                  env, cwd).split()
    missing = [name for name in offered if name not in SHOWS]
    if missing or not offered:
        raise SmokeFailure(f"no smoke checks for the demo scenarios {missing or offered}: add them to SHOWS")


def check_shows(scenario: str, text: str, snapshot: dict) -> None:
    """What ``scenario`` is there to show is in its --once ``text`` and --json ``snapshot``."""
    missing = [what for what, shows in SHOWS[scenario] if not _holds(shows, text, snapshot)]
    if missing:
        raise SmokeFailure(f"--once/--json do not show {'; '.join(missing)}:\n{text}")


def _holds(shows: Shows, text: str, snapshot: dict) -> bool:
    try:
        return shows(text, snapshot)
    except (KeyError, IndexError, TypeError):  # a device or field it looks for is not there
        return False


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
    check_shows(scenario, text, snapshot)
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
            if _device_shown(screen, model) and _pid_rows(screen) & pids:
                break
            time.sleep(0.5)
        if "Traceback" in screen or status.exists():
            time.sleep(0.5)  # the rest of the traceback
            raise SmokeFailure(f"the monitor failed:\n{_capture(tmux)}")
        if not _device_shown(screen, model):
            raise SmokeFailure(f"no device line ({model!r}, or GPUs packed two a line) on the screen:\n{screen}")
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


# A small pane with more GPUs than lines packs two GPUs a line, each cell without its name: index,
# memory bar and use, utilisation, temperature ("0 ████ 58.7G  92% 65°C  1 ████ 58.7G  94% 65°C").
_PACKED = re.compile(r"\d+%\s+\d+°?C\s.*\d+%\s+\d+°?C")


def _device_shown(screen: str, model: str) -> bool:
    """Whether a device line is on the screen: one naming the model, or GPUs packed two a line."""
    return model in screen or any(_PACKED.search(line) for line in screen.splitlines())


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
