"""Benchmark of the many-host view at scale: the live monitor over 1 and over 64 simulated hosts of
8 GPUs each, under tmux, against the single-host monitor on the same machine.

Each host is a recorded ``gputui --demo training-node --json --watch`` stream replayed by a stand-in
for ssh (bench/replay_host.py, through $GPUTUI_SSH), so 64 hosts cost 64 small replaying processes, not
64 monitors. Printed for each run: the monitor process's CPU (user+sys from /proc over wall time, % of
one core; the ssh stand-ins are processes of their own and not counted) over the steady period, and
how long a key takes to be answered on screen (``s``, sort by the next column: from tmux send-keys to
the status line showing the new sort in capture-pane, so tmux's own round trip is included).

    python bench/bench_hosts.py                       # 1 host, 64 hosts, 30 s each
    python bench/bench_hosts.py --hosts 1 16 64 --seconds 60
    python bench/bench_hosts.py --hosts 1 --flood     # hosts that send documents as fast as they can
Target (issue 15): with 64 hosts, CPU within 3x the single-host figure, keys answered within 100 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import cpu_seconds, machine_load, peak_rss_mb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOCKET = f"gputui-bench-hosts-{os.getpid()}"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=False).stdout


def record(path: Path, documents: int, period: float) -> None:
    """``documents`` lines of ``gputui --demo training-node --json --watch period``."""
    with path.open("wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "gputui", "--demo", "training-node", "--json",
                                  "--watch", str(period)], cwd=ROOT, stdout=subprocess.PIPE)
        assert child.stdout is not None
        for _ in range(documents):
            out.write(child.stdout.readline())
        child.terminate()
        child.wait()


def status_line(screen: str) -> str:
    return next((line for line in screen.splitlines() if "PROCESSES" in line), "")


def key_latencies(session: str, presses: int) -> list[float]:
    """Seconds from sending ``s`` until the status line shows the new sort, for each press."""
    found = []
    for _ in range(presses):
        before = status_line(tmux("capture-pane", "-p", "-t", session))
        started = time.monotonic()
        tmux("send-keys", "-t", session, "s")
        while time.monotonic() - started < 5:
            if status_line(tmux("capture-pane", "-p", "-t", session)) != before:
                found.append(time.monotonic() - started)
                break
        else:
            found.append(float("inf"))
        time.sleep(0.3)
    return found


def run_once(command: str, ready: str, seconds: float, size: tuple[int, int], presses: int) -> dict:
    session = f"bench-{time.monotonic_ns()}"
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), command)
    try:
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        started = time.monotonic()
        while ready not in tmux("capture-pane", "-p", "-t", session):
            if time.monotonic() - started > 60:
                raise RuntimeError("not ready in 60 s:\n" + tmux("capture-pane", "-p", "-t", session))
            time.sleep(0.05)
        time.sleep(3.0)  # connections made, first samples in, imports warmed up
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = cpu_seconds(pid), time.monotonic()
        latencies = key_latencies(session, presses)
        screen = tmux("capture-pane", "-p", "-t", session)
        return {"cpu_percent": 100 * (cpu1 - cpu0) / (wall1 - wall0), "keys": latencies,
                "rss_mb": peak_rss_mb(pid), "screen": screen}
    finally:
        tmux("send-keys", "-t", session, "q")
        time.sleep(1.0)
        tmux("kill-session", "-t", session)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="*", default=[1, 64])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--presses", type=int, default=10)
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--flood", action="store_true", help="hosts that ignore --watch and send without pause")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is needed for this benchmark", file=sys.stderr)
        return 2
    size = tuple(int(v) for v in args.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="gputui-bench-hosts-"))
    recording = work / "training-node.ndjson"
    record(recording, documents=20, period=0.5)
    config = work / "config.toml"
    config.write_text('[hosts]\ncommand = "gputui"\n')
    flood = " --flood" if args.flood else ""
    stand_in = f"{sys.executable} {ROOT / 'bench' / 'replay_host.py'}{flood} {recording}"
    cache = Path(tempfile.gettempdir()) / "gputui-bench-pycache"
    python = f"env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX={cache} {sys.executable} -m gputui"

    print(f"gputui many-host view, {args.interval:g} s refresh, {args.seconds:g} s measured, {args.size} "
          f"tmux pane, {os.cpu_count()} CPUs, {machine_load()}")
    print(f"{'monitor':>24}  {'CPU % of a core':>15}  {'key median':>10}  {'key max':>8}  {'peak RSS':>9}")
    tmux("new-session", "-d", "-s", "holder", "sleep 100000")
    results = {}
    try:
        runs = [("single host (--demo)", f"cd {ROOT} && exec {python} --demo training-node "
                 f"--interval {args.interval}", "dgx-sim-01")]
        for n in args.hosts:
            names = ",".join(f"node{i:02d}" for i in range(1, n + 1))
            runs.append((f"--hosts, {n}{' flooding' if args.flood else ''} host{'s' if n != 1 else ''}",
                         f"cd {ROOT} && exec env GPUTUI_SSH='{stand_in}' {python} --hosts {names} "
                         f"--config {config} --interval {args.interval}", f"{n} host"))
        for label, command, ready in runs:
            r = run_once(command, ready, args.seconds, size, args.presses)
            results[label] = r
            keys = [k * 1000 for k in r["keys"]]
            print(f"{label:>24}  {r['cpu_percent']:>13.2f} %  {statistics.median(keys):>7.0f} ms  "
                  f"{max(keys):>5.0f} ms  {r['rss_mb']:>6.1f} MB")
            sys.stdout.flush()
    finally:
        tmux("kill-server")
        shutil.rmtree(work, ignore_errors=True)
    single = results["single host (--demo)"]["cpu_percent"]
    for label, r in results.items():
        if label.startswith("--hosts"):
            print(f"{label}: {r['cpu_percent'] / single:.2f}x the single-host monitor's CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
