"""gputui's own resident memory above the bare Textual floor, before and after a change, in one run.

Quicker than bench_vs_nvitop.py (no venvs, no nvitop), for measuring one candidate saving at a time:
each source tree (this checkout, and each ``--baseline`` git ref exported to a temporary folder) runs
as ``python -m gputui`` on the simulated driver of bench_vs_nvitop.py (8 GPUs, ``--processes`` real
processes), in a 120x40 tmux pane, runs alternating; its peak RSS (VmHWM) is read after ``--seconds``.
The floor is this Python with Textual's App, pynvml and psutil imported (bench_vs_nvitop's floor), so
the share is gputui's own. ``--maps`` prints where the checkout's resident memory lies: heap and
anonymous memory against each shared library's pages.

    python bench/bench_rss.py --baseline main --runs 3
    python bench/bench_rss.py --maps
    python bench/bench_rss.py --keys g g        # after the user touched the keyboard
bench_vs_nvitop.py remains the figure of record (installed venvs, byte-code compiled by pip).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_tui import peak_rss_mb, tmux
from bench_vs_nvitop import feeder, framework_floor_mb, full_frame

ROOT = Path(__file__).resolve().parent.parent


def export(ref: str, work: Path) -> Path:
    """The tree of git ``ref`` in a folder of its own under ``work``."""
    where = work / ref.replace("/", "_")
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def resident_maps(pid: int, top: int = 12) -> list[tuple[int, str]]:
    """(kB resident, mapping) for the ``top`` mappings of ``pid``, summed by file ([heap] and
    anonymous memory under those names)."""
    sizes: dict[str, int] = {}
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else "[anonymous]"
        elif fields[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(fields[1])
    return sorted(((kb, name) for name, kb in sizes.items()), reverse=True)[:top]


def resident_mb(pid: int) -> float:
    """VmRSS of ``pid`` now, in MiB."""
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) / 1024


def run_tree(python: Path, tree: Path, env: dict[str, str], seconds: float, pids: set[str],
             maps: bool, trace: bool, keys: list[str]) -> float:
    """Peak RSS (MiB) of gputui from ``tree`` after ``seconds`` on screen, ``keys`` pressed (tmux's
    names) once the first frame is up; its maps printed if asked."""
    session = f"rss-{os.getpid()}"
    exports = " ".join(f"{k}={v}" for k, v in {**env, "PYTHONPATH": str(tree)}.items())
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
         f"cd {tree} && exec env -u PYTHONPYCACHEPREFIX {exports} {python} -m gputui --interval 1")
    try:
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        deadline = time.monotonic() + 60
        while not full_frame(tmux("capture-pane", "-p", "-t", session), pids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tree}: no full frame within 60 s")
            time.sleep(0.05)
        started = time.monotonic()
        for key in keys:
            tmux("send-keys", "-t", session, key)
            time.sleep(0.5)
        while (left := seconds - (time.monotonic() - started)) > 0:
            time.sleep(min(left, 10.0))
            if trace:
                print(f"    {time.monotonic() - started:4.0f} s: VmRSS {resident_mb(pid):.1f} MiB")
        if maps:
            for kb, name in resident_maps(pid):
                print(f"    {kb:7d} kB  {name}")
        return peak_rss_mb(pid)
    finally:
        tmux("kill-session", "-t", session)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="GIT_REF", action="append", default=[],
                        help="also run gputui as of this commit (repeatable)")
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="time on screen before reading VmHWM")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="the Python to run (e.g. bench_vs_nvitop's venv: its packages, as installed)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in gputui's environment (repeatable), e.g. PYTHONMALLOC=malloc")
    parser.add_argument("--trace", action="store_true", help="print VmRSS every 10 s on screen")
    parser.add_argument("--maps", action="store_true", help="print the checkout's largest mappings")
    parser.add_argument("--keys", nargs="*", default=[], metavar="KEY",
                        help="press these once the first frame is up (tmux's key names), e.g. g g: the first "
                             "key press reads Textual's key names (unicodedata's pages) into memory")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from gputui.collect.sim.native import STATE_VARIABLE, build, state_pids
    from gputui.link.paths import DIR_ENV as PROBE_DIR_VARIABLE

    work = Path(tempfile.mkdtemp(prefix="gputui-rss-"))
    trees = {"checkout": ROOT, **{ref: export(ref, work) for ref in args.baseline}}
    probes = work / "probes"
    probes.mkdir(mode=0o700)
    state = work / "state"
    library = build(work / "lib").parent
    env = {"LD_LIBRARY_PATH": str(library), STATE_VARIABLE: str(state), "TERM": "xterm-256color",
           PROBE_DIR_VARIABLE: str(probes), **dict(pair.split("=", 1) for pair in args.env)}
    for tree in trees.values():  # byte-code compiled beforehand, as pip does on install
        subprocess.run([str(args.python), "-m", "compileall", "-q", str(tree / "gputui")], check=True)
    tmux("new-session", "-d", "-s", "holder", "sleep 100000")  # keeps our tmux server up
    feed = feeder(state, args.processes)
    peaks: dict[str, list[float]] = {name: [] for name in trees}
    try:
        pids = {str(pid) for pid in state_pids(state)}
        for run in range(args.runs):
            for name, tree in trees.items():
                show = args.maps and name == "checkout" and run == args.runs - 1
                if show:
                    print(f"{name}'s largest mappings (resident kB):")
                peaks[name].append(run_tree(args.python, tree, env, args.seconds, pids, show, args.trace,
                                            args.keys))
    finally:
        feed.send_signal(signal.SIGTERM)
        feed.wait(timeout=30)
        tmux("kill-server")
        shutil.rmtree(work, ignore_errors=True)
    floor = framework_floor_mb(args.python)
    pressed = f", keys pressed: {' '.join(args.keys)}" if args.keys else ""
    print(f"\n{args.processes} processes on 8 GPUs, {args.runs} run(s), {args.seconds:g} s on screen{pressed}; "
          f"floor (Textual's App, pynvml, psutil imported): {floor:.1f} MiB")
    for name, values in peaks.items():
        peak = statistics.median(values)
        print(f"  {name:12} peak RSS {peak:6.1f} MiB  share above the floor {peak - floor:5.1f} MiB  "
              f"(runs: {', '.join(f'{v:.1f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
