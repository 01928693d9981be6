"""``gputui serve`` under hostile load, on 127.0.0.1 only, every phase bounded in clients and seconds.

Prints, for the exporter of the checkout at ``--root`` (this one by default; give an older checkout's
root to compare):

- auth: a logged-in scrape's latency while 64 clients send wrong passwords as fast as answered, and the
  exporter's peak memory;
- trickle: the exporter's memory with 500 clients that send a request's first line and then a byte
  every 2 s, a scrape tried meanwhile, and the CPU it spends once they all close at once;
- rate: 200 scrapes/s, open loop (a late answer does not delay the next request), for a few seconds:
  p50/p99 latency from the moment each was due, and the share reset, refused (503) or timed out (10 s);
- cost: the exporter's CPU per /metrics, 200 scrapes one after the other, less its idle sampling;
- idle: scrapes (4 a second, with basic auth and without) while 128 connections that send nothing are held
  open, each reopened as soon as it is dropped (25 reopens a second): the share answered 200.

    python bench/bench_serve_load.py
    python bench/bench_serve_load.py --root /tmp/old-checkout --seconds 10
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from bench_serve import HEADERS, rss_mb
from bench_tui import cpu_seconds, machine_load, peak_rss_mb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the flood lives with its test
from idle_flood import IdleFlood  # noqa: E402

TIMEOUT = 10.0  # Prometheus's default scrape timeout


class Exporter:
    """``gputui --demo training-node serve`` of the checkout at ``root``, on a free loopback port."""

    def __init__(self, root: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen([sys.executable, "-m", "gputui", "--demo", "training-node", "serve",
                                      "--listen", "127.0.0.1:0", *args], cwd=root, env=env, text=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = self.proc.stderr.readline() if self.proc.stderr else ""
        if not line.startswith("gputui serve: http://"):
            raise RuntimeError(f"the exporter did not start: {line}")
        host, port = line.split()[2].removeprefix("http://").split("/")[0].rsplit(":", 1)
        self.address = (host, int(port))

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def request(address: tuple[str, int], authorization: str | None = None, timeout: float = TIMEOUT) -> int:
    """One GET /metrics as Prometheus sends it; the status, or 0 for a reset, a timeout or no answer."""
    head = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n" + "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    if authorization:
        head += f"Authorization: {authorization}\r\n"
    try:
        with socket.create_connection(address, timeout=timeout) as connection:
            connection.sendall((head + "\r\n").encode())
            answer = b""
            while chunk := connection.recv(1 << 16):
                answer += chunk
    except OSError:
        return 0
    try:
        return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    except ValueError:
        return 0


def basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


def timed(call) -> tuple[float, int]:
    started = time.perf_counter()
    status = call()
    return time.perf_counter() - started, status


PASSWORD = "correct horse"


@contextmanager
def users_file(root: Path) -> Iterator[str]:
    """A users file, made by the checkout's own --hash-password, with user prometheus and PASSWORD."""
    made = subprocess.run([sys.executable, "-m", "gputui", "serve", "--hash-password", "prometheus"],
                          input=PASSWORD + "\n", capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".users") as users:
        users.write(made.stdout)
        users.flush()
        os.chmod(users.name, 0o600)
        yield users.name


def auth_phase(root: Path, seconds: float, guessers: int = 64) -> None:
    with users_file(root) as users:
        exporter = Exporter(root, "--basic-auth-file", users)
        try:
            right = basic("prometheus", PASSWORD)
            quiet = [timed(lambda: request(exporter.address, right)) for _ in range(5)]  # the first pays scrypt
            stop = threading.Event()
            answers: list[int] = []

            def guess(n: int) -> None:
                while not stop.is_set():
                    answers.append(request(exporter.address, basic("prometheus", f"guess {n}")))

            threads = [threading.Thread(target=guess, args=(n,), daemon=True) for n in range(guessers)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            loaded = []
            ends = time.monotonic() + seconds
            while time.monotonic() < ends:
                loaded.append(timed(lambda: request(exporter.address, right)))
                time.sleep(0.25)
            stop.set()
            for thread in threads:
                thread.join(TIMEOUT + 5)
            worst = max(t for t, _ in loaded)
            ok = sum(status == 200 for _, status in loaded)
            print(f"auth: logged-in scrape {statistics.median(t for t, _ in quiet[1:]) * 1000:.1f} ms alone; with "
                  f"{guessers} wrong-password clients {statistics.median(t for t, _ in loaded) * 1000:.1f} ms median, "
                  f"{worst * 1000:.0f} ms worst, {ok}/{len(loaded)} answered 200; guesses answered "
                  f"{_counts(answers)}; peak RSS {peak_rss_mb(exporter.proc.pid):.0f} MB")
        finally:
            exporter.close()


def _counts(statuses: list[int]) -> str:
    return ", ".join(f"{status or 'reset/timeout'}: {statuses.count(status)}" for status in sorted(set(statuses)))


def trickle_phase(root: Path, clients: int = 500, hold: float = 12.0) -> None:
    exporter = Exporter(root)
    try:
        time.sleep(1.0)
        before = rss_mb(exporter.proc.pid)
        connections = []
        for _ in range(clients):
            try:
                connection = socket.create_connection(exporter.address, timeout=2)
                connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
                connections.append(connection)
            except OSError:
                pass
        ends = time.monotonic() + hold
        during = []
        while time.monotonic() < ends:
            for connection in connections:
                try:
                    connection.send(b"X")  # a header, a byte every 2 s
                except OSError:
                    pass
            during.append(timed(lambda: request(exporter.address)))
            time.sleep(2.0)
        held = rss_mb(exporter.proc.pid)
        cpu = cpu_seconds(exporter.proc.pid)
        for connection in connections:
            connection.close()  # an old server took each half request as whole and ran it
        time.sleep(3.0)
        after_cpu = cpu_seconds(exporter.proc.pid) - cpu
        statuses = [status for _, status in during]
        print(f"trickle: {len(connections)} trickling clients: RSS {before:.0f} -> {held:.0f} MB "
              f"(peak {peak_rss_mb(exporter.proc.pid):.0f}); scrapes meanwhile {_counts(statuses)}, "
              f"worst {max(t for t, _ in during) * 1000:.0f} ms; CPU in the 3 s after they closed "
              f"{after_cpu * 1000:.0f} ms")
    finally:
        exporter.close()


def rate_phase(root: Path, rate: float, seconds: float) -> None:
    exporter = Exporter(root)
    try:
        time.sleep(1.0)
        results: list[tuple[float, int]] = []

        def one(due: float) -> None:
            status = request(exporter.address)
            results.append((time.perf_counter() - due, status))

        cpu0, wall0 = cpu_seconds(exporter.proc.pid), time.perf_counter()
        with ThreadPoolExecutor(max_workers=256) as pool:
            due = wall0
            while due < wall0 + seconds:
                time.sleep(max(0.0, due - time.perf_counter()))
                pool.submit(one, due)
                due += 1 / rate
        cpu = cpu_seconds(exporter.proc.pid) - cpu0
        wall = time.perf_counter() - wall0
        latencies = sorted(t for t, _ in results)
        failed = sum(status != 200 for _, status in results)
        print(f"rate: {len(results)} scrapes at {rate:g}/s: p50 {latencies[len(latencies) // 2] * 1000:.0f} ms, "
              f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.0f} ms, {100 * failed / len(results):.1f} % "
              f"not 200 ({_counts([s for _, s in results])}); exporter CPU {100 * cpu / wall:.0f} % of a core, "
              f"{1000 * cpu / len(results):.1f} ms a scrape")
    finally:
        exporter.close()


def cost_phase(root: Path, scrapes: int = 200) -> None:
    exporter = Exporter(root)
    try:
        time.sleep(2.0)
        cpu0, wall0 = cpu_seconds(exporter.proc.pid), time.monotonic()
        time.sleep(5.0)
        idle = (cpu_seconds(exporter.proc.pid) - cpu0) / (time.monotonic() - wall0)
        cpu0, wall0 = cpu_seconds(exporter.proc.pid), time.monotonic()
        statuses = [request(exporter.address) for _ in range(scrapes)]
        busy = cpu_seconds(exporter.proc.pid) - cpu0 - idle * (time.monotonic() - wall0)
        print(f"cost: {scrapes} scrapes one after another ({_counts(statuses)}): {1000 * busy / scrapes:.2f} ms "
              f"of exporter CPU a /metrics (idle sampling subtracted)")
    finally:
        exporter.close()


def idle_phase(root: Path, seconds: float) -> None:
    for auth in (True, False):
        with users_file(root) as users:
            exporter = Exporter(root, *(("--basic-auth-file", users) if auth else ()))
            try:
                scrapes_beside_idle(exporter, basic("prometheus", PASSWORD) if auth else None, seconds)
            finally:
                exporter.close()


def scrapes_beside_idle(exporter: Exporter, authorization: str | None, seconds: float) -> None:
    alone = request(exporter.address, authorization)  # the first pays scrypt
    with IdleFlood(exporter.address) as flood:
        time.sleep(1.0)
        scrapes = []
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            scrapes.append(timed(lambda: request(exporter.address, authorization)))
            time.sleep(0.25)
    ok = sum(status == 200 for _, status in scrapes)
    print(f"idle: {'logged-in' if authorization else 'open'} scrapes (alone: {alone}) beside {flood.count} idle "
          f"connections ({flood.opened} opened, {flood.dropped} dropped by the exporter): "
          f"{ok}/{len(scrapes)} answered 200 ({_counts([s for _, s in scrapes])}), "
          f"{statistics.median(t for t, _ in scrapes) * 1000:.0f} ms median, "
          f"{max(t for t, _ in scrapes) * 1000:.0f} ms worst")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose gputui is measured")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of the auth and rate phases")
    parser.add_argument("--rate", type=float, default=200.0, help="scrapes a second in the rate phase")
    parser.add_argument("--only", choices=("auth", "trickle", "rate", "cost", "idle"), action="append",
                        help="run these phases only")
    args = parser.parse_args()
    print(f"gputui serve of {args.root} under load; {os.cpu_count()} CPUs, {machine_load()}")
    phases = {"auth": lambda: auth_phase(args.root, args.seconds), "trickle": lambda: trickle_phase(args.root),
              "rate": lambda: rate_phase(args.root, args.rate, args.seconds), "cost": lambda: cost_phase(args.root),
              "idle": lambda: idle_phase(args.root, args.seconds)}
    for name in args.only or phases:
        phases[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
