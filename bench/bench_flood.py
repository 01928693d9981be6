"""The training job's step time while someone of its own user abuses its probe's socket.

A probed CPU training job (a small MLP, one thread) runs through four phases of a few seconds:
quiet; a connect flood (another process connecting and closing as fast as it can); 128 connections
held open and silent; quiet again. Halfway through the flood and the held phases a monitor asks for
a report (gputui.link.client.fetch_report, 5 s timeout). Printed per phase: the job's median step
time and its ratio to the mean of the two quiet phases, the probe server thread's CPU; connections
accepted, and whether the monitor got its report (and how fast). The same job runs once with the
server's bounds and once with them lifted (`unbounded`: no accept rate, 128 clients, no idle
timeouts, a backlog of 64, as the server was before issue 10; it still makes room for a monitor by
dropping the oldest silent connection, which the old server did not), in one run.

    python bench/bench_flood.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = ("quiet", "flood", "idle_held", "quiet_again")


def job(unbounded: bool) -> None:
    """The training job: trains until stdin closes; 'mark NAME' lines start a phase; prints JSON."""
    import torch

    if unbounded:  # the server as it was: no accept rate, 128 clients, no idle timeouts
        from gputui.link import server as server_module

        server_module.BACKLOG = 64
        server_module.ProbeServer.__init__.__kwdefaults__.update(
            max_clients=128, silent_timeout=1e9, idle_timeout=1e9, accept_rate=1e9, accept_burst=1e9)
    import gputui.probe

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(128, 512)
    probe = gputui.probe.start()
    server = next(t for t in threading.enumerate() if t.name == "gputui-probe-server")
    phase = ["warmup"]
    marks: dict[str, tuple[float, int]] = {}
    durations: dict[str, list[float]] = {}

    def read_marks():
        for line in sys.stdin:
            name = line.split()[1]
            marks[name] = (time.monotonic(), _cpu_ticks(server.native_id))
            phase[0] = name
        phase[0] = "done"

    threading.Thread(target=read_marks, daemon=True).start()
    print(f"ready {os.getpid()}", flush=True)
    while phase[0] != "done":
        started = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        durations.setdefault(phase[0], []).append(time.perf_counter() - started)
    end = (time.monotonic(), _cpu_ticks(server.native_id))
    names = list(marks)
    out = {}
    for name, following in zip(names, names[1:] + [None]):
        (t0, c0), (t1, c1) = marks[name], (marks[following] if following else end)
        out[name] = {"median_ms": 1000 * statistics.median(durations.get(name, [0.0])),
                     "server_cpu_percent": 100 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)}
    out["accepted"] = probe.server.clients_accepted if probe.server else None
    print(json.dumps(out), flush=True)


def flood(path: str) -> None:
    """Connect and close as fast as possible until killed."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError:
            pass
        sock.close()


def hold(path: str, count: int) -> None:
    """Hold ``count`` connections open and silent until killed."""
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            held.append(sock)
        except OSError:
            pass
    print(f"holding {len(held)}", flush=True)
    time.sleep(3600)


def run(seconds: float, unbounded: bool) -> dict:
    from gputui.link import client, paths

    directory = tempfile.mkdtemp(prefix="gputui-flood-")
    env = {**os.environ, paths.DIR_ENV: directory, "PYTHONPATH": str(ROOT)}
    os.environ[paths.DIR_ENV] = directory
    me = [sys.executable, __file__]
    trainer = subprocess.Popen(me + ["job"] + (["--unbounded"] if unbounded else []), env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(trainer.stdout.readline().split()[1])
    path = str(client.find_socket(pid))
    time.sleep(3.0)  # warm-up
    asked = {}

    def mark(name):
        trainer.stdin.write(f"mark {name}\n")
        trainer.stdin.flush()

    def ask(label):
        started = time.monotonic()
        try:
            client.fetch_report(pid, timeout=5.0)
            asked[label] = f"answered in {1000 * (time.monotonic() - started):.0f} ms"
        except client.ProbeUnavailable as exc:
            asked[label] = f"not answered after {time.monotonic() - started:.1f} s: {exc.detail}"

    mark("quiet")
    time.sleep(seconds)
    mark("flood")
    flooder = subprocess.Popen(me + ["flood", path], env=env)
    time.sleep(seconds / 2)
    ask("monitor_flood")
    time.sleep(seconds / 2)
    flooder.kill()
    flooder.wait()
    mark("idle_held")
    holder = subprocess.Popen(me + ["hold", path, "128"], env=env, stdout=subprocess.PIPE, text=True)
    asked["held"] = holder.stdout.readline().split()[1]
    time.sleep(seconds / 2)
    ask("monitor_held")
    time.sleep(seconds / 2)
    holder.kill()
    holder.wait()
    mark("quiet_again")
    time.sleep(seconds)
    trainer.stdin.close()
    result = json.loads(trainer.stdout.readline())
    trainer.wait()
    shutil.rmtree(directory, ignore_errors=True)
    return {**result, **asked}


def _cpu_ticks(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "job":
        job("--unbounded" in sys.argv)
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "flood":
        flood(sys.argv[2])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "hold":
        hold(sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each phase")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; phases of {args.seconds:g} s; the flooder takes a core of its own")
    for label, unbounded in (("bounded (this version)", False), ("unbounded (before)", True)):
        r = run(args.seconds, unbounded)
        quiet = (r["quiet"]["median_ms"] + r["quiet_again"]["median_ms"]) / 2
        print(f"\n{label}: connections accepted {r['accepted']}\n"
              f"  a monitor's report during the flood: {r['monitor_flood']}\n"
              f"  a monitor's report with {r['held']} connections held open: {r['monitor_held']}")
        for name in PHASES:
            p = r[name]
            print(f"  {name:12} step {p['median_ms']:6.2f} ms  x{p['median_ms'] / quiet:4.2f}  "
                  f"server thread {p['server_cpu_percent']:5.1f} % of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
