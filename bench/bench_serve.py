"""What ``gputui serve`` costs, scraped as Prometheus scrapes it (every 15 s, gzip, OpenMetrics first).

For each case, the exporter runs for ``--seconds`` after a warm-up; printed are its own CPU (percent
of one core, all threads, from /proc), its resident memory at the end and at its peak, and each
scrape's latency (request to last byte) and size. Cases:

- ``gputui serve --demo training-node`` (8 H100s, a probed rank), and with 64 processes;
- beside nvitop-exporter (PyPI, installed into a throwaway venv) on the same simulated driver: both
  load gputui's simulated libnvidia-ml.so.1 (gputui/collect/sim/native, built with cc) and see the
  same real stand-in processes, both sampling every 5 s; the ratio of gputui's CPU and RSS to
  nvitop-exporter's is printed.

    python bench/bench_serve.py                       # 120 s per case
    python bench/bench_serve.py --seconds 60 --no-nvitop
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_tui import cpu_seconds, machine_load, peak_rss_mb
from bench_vs_nvitop import feeder, venv

ROOT = Path(__file__).resolve().parent.parent
NVITOP_EXPORTER = "nvitop-exporter==1.7.2"
# What Prometheus 2.x sends with each scrape.
HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
           "Accept-Encoding": "gzip"}
WARM_UP = 12.0  # seconds: start-up, the first samples, the first trend fits


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> tuple[float, int]:
    """Seconds to the last byte, and bytes on the wire."""
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=30) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def measure(name: str, command: list[str], env: dict[str, str], url: str, seconds: float, every: float) -> dict:
    """Start one exporter, wait until it answers, warm up, then scrape every ``every`` seconds."""
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(url)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer: {proc.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.2)
        time.sleep(WARM_UP)
        cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
        latencies, sizes = [], []
        next_at = wall0
        while next_at < wall0 + seconds:
            time.sleep(max(0.0, next_at - time.monotonic()))
            latency, size = scrape(url)
            latencies.append(latency)
            sizes.append(size)
            next_at += every
        time.sleep(max(0.0, wall0 + seconds - time.monotonic()))
        cpu1, wall1 = cpu_seconds(proc.pid), time.monotonic()
        return {"cpu": 100 * (cpu1 - cpu0) / (wall1 - wall0), "rss": rss_mb(proc.pid), "peak": peak_rss_mb(proc.pid),
                "latency": statistics.median(latencies) * 1000, "worst": max(latencies) * 1000,
                "size": statistics.median(sizes) / 1024, "scrapes": len(latencies)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def show(name: str, r: dict) -> None:
    print(f"  {name:34} {r['cpu']:6.2f} %  {r['rss']:6.1f} MB ({r['peak']:5.1f} peak)  "
          f"{r['latency']:6.1f} ms ({r['worst']:6.1f} worst, {r['scrapes']} scrapes)  {r['size']:6.1f} KiB")


def gputui_serve(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputui", *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="measured seconds per case")
    parser.add_argument("--scrape-every", type=float, default=15.0, help="Prometheus's scrape interval")
    parser.add_argument("--interval", type=float, default=5.0, help="the exporters' sampling interval")
    parser.add_argument("--processes", type=int, default=64, help="GPU processes of the loaded cases")
    parser.add_argument("--no-nvitop", action="store_true", help="leave out the comparison with nvitop-exporter")
    parser.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()) / "gputui-bench-venvs",
                        help="where the throwaway venvs live (reused between runs)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"gputui serve, scraped every {args.scrape_every:g} s for {args.seconds:g} s after {WARM_UP:g} s of "
          f"warm-up, sampling every {args.interval:g} s; {os.cpu_count()} CPUs, {machine_load()}")
    print(f"  {'':34} {'CPU':>8}  {'RSS':>9}              {'scrape latency (median)':>24}  {'size':>9}")
    every = ("--interval", f"{args.interval:g}")
    for label, demo in (("--demo training-node", ()), (f"--demo training-node, {args.processes} processes",
                                                       ("--demo-processes", str(args.processes)))):
        port = free_port()
        command = gputui_serve("--demo", "training-node", *demo, "serve", "--listen", f"127.0.0.1:{port}", *every)
        show(label, measure(label, command, env, f"http://127.0.0.1:{port}/metrics", args.seconds, args.scrape_every))
    if args.no_nvitop:
        return 0
    if shutil.which("cc") is None:
        print("no cc here: the comparison with nvitop-exporter needs the simulated libnvidia-ml built")
        return 0

    sys.path.insert(0, str(ROOT))
    from gputui.collect.sim.native import STATE_VARIABLE, build

    print(f"\nbeside {NVITOP_EXPORTER} on the simulated libnvidia-ml.so.1, {args.processes} real processes on 8 GPUs:")
    exporter = venv(args.venvs / "nvitop-exporter", NVITOP_EXPORTER).parent / "nvitop-exporter"
    work = Path(tempfile.mkdtemp(prefix="gputui-bench-serve-"))
    results = {}
    try:
        library = build(work / "lib").parent
        feed = feeder(work / "state", args.processes)
        try:
            driver = {**env, "LD_LIBRARY_PATH": str(library), STATE_VARIABLE: str(work / "state")}
            for name, command in (
                    ("gputui serve", lambda port: gputui_serve("serve", "--listen", f"127.0.0.1:{port}", *every)),
                    ("nvitop-exporter", lambda port: [str(exporter), "--bind-address", "127.0.0.1", "--port",
                                                      str(port), *every])):
                port = free_port()
                results[name] = measure(name, command(port), driver, f"http://127.0.0.1:{port}/metrics",
                                        args.seconds, args.scrape_every)
                show(name, results[name])
        finally:
            feed.send_signal(signal.SIGTERM)
            feed.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    g, n = results["gputui serve"], results["nvitop-exporter"]
    print(f"  gputui/nvitop-exporter: CPU {g['cpu'] / n['cpu']:.2f}x, RSS {g['rss'] / n['rss']:.2f}x, "
          f"scrape latency {g['latency'] / n['latency']:.2f}x")
    print(f"\n{machine_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
