"""Benchmark of the live monitor as a user runs it: under tmux, on simulated GPUs, for a minute.

For each process count it launches ``python -m gputui --demo training-node --demo-processes N``
in a detached tmux pane, and prints: time from launch to the first full frame (the process table
drawn, read back with ``tmux capture-pane``), CPU use of the monitor process over the steady minute
(user+sys from /proc over wall time, in % of one core), and its peak RSS (VmHWM).

    python bench/bench_tui.py                    # 64 and 1000 processes, 60 s each
    python bench/bench_tui.py --processes 64 --seconds 20 --runs 3
Targets (issue 3): CPU < 3 % of a core with 64 processes, RSS < 120 MB, first frame < 0.8 s.

Python byte-code: an installed gputui has its modules compiled (pip writes .pyc files), so by default
the monitor runs with a byte-code cache of the benchmark's own (PYTHONPYCACHEPREFIX) that one unmeasured
launch fills first. ``--no-bytecode-cache`` measures a launch that compiles every module from source,
as happens where PYTHONDONTWRITEBYTECODE is set; only the first frame differs much.
The tmux server is started once beforehand, so a launch is the monitor's own start-up, not tmux's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


# A tmux server of our own (-L), so the benchmark never touches the user's sessions.
SOCKET = f"gputui-bench-{os.getpid()}"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True,
                          check=False).stdout


def machine_load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) {five:.2f} (5 min)"


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """user+sys seconds of a process (all its threads, ended ones too), or of one of its threads."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def full_frame(screen: str) -> bool:
    """The header, a device row and at least one process row are on screen."""
    return "dgx-sim-01" in screen and "COMMAND" in screen and "/usr/bin/python3" in screen


def python_env(bytecode_cache: bool) -> str:
    """The environment words that decide whether Python may cache compiled modules."""
    if not bytecode_cache:
        return "env PYTHONDONTWRITEBYTECODE=1"
    cache = Path(tempfile.gettempdir()) / "gputui-bench-pycache"
    return f"env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX={cache}"


def run_once(processes: int, seconds: float, interval: float, size: tuple[int, int],
             bytecode_cache: bool = True) -> dict:
    session = f"gputui-bench-{os.getpid()}-{processes}"
    command = (f"cd {ROOT} && exec {python_env(bytecode_cache)} {sys.executable} -m gputui "
               f"--demo training-node --demo-processes {processes} --interval {interval}")
    started = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), command)
    try:
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        first_frame = None
        while time.monotonic() - started < 30:
            if full_frame(tmux("capture-pane", "-p", "-t", session)):
                first_frame = time.monotonic() - started
                break
            time.sleep(0.01)
        if first_frame is None:
            raise RuntimeError("no frame within 30 s:\n" + tmux("capture-pane", "-p", "-t", session))
        startup_cpu = cpu_seconds(pid)
        time.sleep(2.0)  # let the first samples and the import warm-up pass
        # The main thread runs Textual (events, layout, drawing); the sampling workers are threads
        # of their own, so main vs the rest splits drawing from sampling.
        cpu0, ui0, wall0 = cpu_seconds(pid), cpu_seconds(pid, pid), time.monotonic()
        time.sleep(seconds)
        cpu1, ui1, wall1 = cpu_seconds(pid), cpu_seconds(pid, pid), time.monotonic()
        rss = peak_rss_mb(pid)
        screen = tmux("capture-pane", "-p", "-t", session)
        tmux("send-keys", "-t", session, "q")
        time.sleep(0.5)
        return {
            "processes": processes,
            "first_frame_s": first_frame,
            "startup_cpu_s": startup_cpu,
            "cpu_percent": 100 * (cpu1 - cpu0) / (wall1 - wall0),
            "ui_percent": 100 * (ui1 - ui0) / (wall1 - wall0),
            "peak_rss_mb": rss,
            "still_drawing": full_frame(screen),
        }
    finally:
        tmux("kill-session", "-t", session)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="*", default=[64, 1000])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=1, help="repeat each process count (noisy machines)")
    parser.add_argument("--size", default="120x40", help="tmux pane size, COLSxROWS")
    parser.add_argument("--no-bytecode-cache", dest="bytecode_cache", action="store_false",
                        help="compile every module at each launch (PYTHONDONTWRITEBYTECODE=1)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is needed for this benchmark", file=sys.stderr)
        return 2
    print(f"gputui live monitor, --demo training-node, {args.interval:g} s refresh, "
          f"{args.seconds:g} s measured, {args.size} tmux pane, {os.cpu_count()} CPUs, "
          f"{'with' if args.bytecode_cache else 'without'} a byte-code cache, {machine_load()}")
    print(f"{'processes':>9}  {'first frame':>11}  {'CPU % of a core':>15}  {'peak RSS':>9}  {'UI thread':>9}  machine")
    cols, rows = (int(v) for v in args.size.split("x"))
    tmux("new-session", "-d", "-s", "holder", "sleep 100000")  # keeps our tmux server up
    try:
        if args.bytecode_cache:  # one unmeasured launch compiles what the monitor imports
            run_once(args.processes[0], 0.0, args.interval, (cols, rows))
        for n in args.processes:
            for _ in range(args.runs):
                r = run_once(n, args.seconds, args.interval, (cols, rows), args.bytecode_cache)
                print(f"{r['processes']:>9}  {r['first_frame_s']:>9.2f} s  {r['cpu_percent']:>13.2f} %  "
                      f"{r['peak_rss_mb']:>6.1f} MB  {r['ui_percent']:>7.2f} %  {machine_load()}"
                      + ("" if r["still_drawing"] else "  (screen lost!)"))
                sys.stdout.flush()
    finally:
        tmux("kill-server")  # our own server (-L SOCKET) only
    return 0


if __name__ == "__main__":
    sys.exit(main())
