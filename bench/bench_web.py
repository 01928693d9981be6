"""Benchmark of ``gputui web`` beside the terminal's monitor, in one run, on simulated GPUs.

Starts ``gputui --demo SCENARIO web`` and opens its page in Debian's Chromium (driven by Playwright, without
WebGL so that xterm.js draws the terminal as text the benchmark reads back). Prints:

- the time from opening the page to its first byte of the terminal and to the first full frame (the header,
  a GPU and the process table as the page shows them), over --runs page loads, each a new session; and the
  terminal monitor's, from its launch under tmux to its first full frame, for comparison;
- then, with one browser session and one terminal monitor (under tmux, the same scenario, interval and
  terminal size) running side by side, over --seconds: CPU (user+sys from /proc, % of one core), RSS now,
  peak RSS and USS of the session's monitor process, of the terminal's, and of gputui web's server itself.

    python bench/bench_web.py                          # 5 page loads, 60 s side by side
    python bench/bench_web.py --runs 3 --seconds 30 --scenario leaky
    python bench/bench_web.py --processes 64          # the training node with 64 GPU processes

Needs /usr/bin/chromium (apt-get install chromium), Playwright (pip install playwright) and tmux.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import ROOT, cpu_seconds, full_frame, machine_load, peak_rss_mb, tmux  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TIMEOUT = 60.0  # seconds for a first frame, on a loaded machine


def start_server(monitor: list[str]) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, "-m", "gputui", *monitor, "web", "--listen", "127.0.0.1:0",
                               "--max-sessions", "2"], cwd=ROOT, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = server.stderr.readline()
    if not line.startswith("gputui web: http"):
        raise RuntimeError(line + server.stderr.read())
    return server, line.split()[2].rstrip(",")


def sessions(server: subprocess.Popen) -> list[psutil.Process]:
    """The browser sessions' monitors running now (one that is ending, a zombie, is not one)."""
    found = []
    for child in psutil.Process(server.pid).children():
        try:
            if "--web-session" in child.cmdline():
                found.append(child)
        except psutil.Error:
            pass
    return found


def wait(check, seconds: float = TIMEOUT, what: str = "") -> float:
    """Seconds until ``check()`` holds (polled every 10 ms)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > seconds:
            raise RuntimeError(f"not within {seconds:g} s: {what}")
        time.sleep(0.01)
    return time.monotonic() - started


class Tab:
    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.websockets: list[str] = []
        self.page.on("websocket", lambda websocket: self.websockets.append(websocket.url))
        started = time.monotonic()
        self.page.goto(url, wait_until="commit")
        wait(lambda: self.page.locator("body.-first-byte").count() > 0, what="the terminal's first byte")
        self.first_byte = time.monotonic() - started
        wait(lambda: full_frame(self.text()), what="a full frame")
        self.first_frame = time.monotonic() - started

    def text(self) -> str:
        rows = self.page.locator(".xterm-rows")
        return rows.inner_text() if rows.count() else ""

    def size(self) -> tuple[int, int]:
        asked = parse_qs(urlsplit(self.websockets[0]).query)
        return int(asked["width"][0]), int(asked["height"][0])

    def close(self) -> None:
        self.context.close()


def side_by_side(pids: dict[str, int], seconds: float) -> dict[str, dict[str, float]]:
    """Each process's usage over the same ``seconds``."""
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    wall0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - wall0
    found = {}
    for name, pid in pids.items():
        memory = psutil.Process(pid).memory_full_info()
        found[name] = {"cpu": 100 * (cpu_seconds(pid) - cpu0[name]) / wall, "rss": memory.rss / 2**20,
                       "peak": peak_rss_mb(pid), "uss": memory.uss / 2**20}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="training-node")
    parser.add_argument("--processes", type=int, help="the scenario's GPU processes, padded or trimmed to N")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5, help="page loads timed, each a new session")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds the two monitors are measured")
    args = parser.parse_args()
    missing = [what for what, there in (("chromium", os.path.exists(CHROMIUM)), ("tmux", shutil.which("tmux")))
               if not there]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("playwright")
    if missing:
        print(f"this benchmark needs {', '.join(missing)}", file=sys.stderr)
        return 2
    monitor = ["--demo", args.scenario, "--interval", f"{args.interval:g}"]
    if args.processes:
        monitor += ["--demo-processes", str(args.processes)]
    print(f"gputui web, {' '.join(monitor)}, Chromium {CHROMIUM} without WebGL, {os.cpu_count()} CPUs, "
          f"{machine_load()}")
    server, url = start_server(monitor)
    tmux("new-session", "-d", "-s", "holder", "sleep 100000")  # keeps our tmux server up
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-3d-apis"])
    try:
        Tab(browser, url).close()  # unmeasured: Python compiles what a session imports, Chromium warms up
        wait(lambda: not sessions(server), what="the warm-up session's end")
        loads = []
        for _ in range(args.runs):
            tab = Tab(browser, url)
            loads.append((tab.first_byte, tab.first_frame))
            tab.close()
            wait(lambda: not sessions(server), what="the session's end")
        print(f"page opened -> first byte of the terminal: median {statistics.median(b for b, _ in loads):.2f} s "
              f"({', '.join(f'{b:.2f}' for b, _ in loads)})")
        print(f"page opened -> first full frame:           median {statistics.median(f for _, f in loads):.2f} s "
              f"({', '.join(f'{f:.2f}' for _, f in loads)})")
        sys.stdout.flush()

        tab = Tab(browser, url)
        cols, rows = tab.size()
        command = f"cd {ROOT} && exec {sys.executable} -m gputui {' '.join(monitor)}"
        started = time.monotonic()
        tmux("new-session", "-d", "-s", "terminal", "-x", str(cols), "-y", str(rows), command)
        terminal = int(tmux("list-panes", "-t", "terminal", "-F", "#{pane_pid}").split()[0])
        wait(lambda: full_frame(tmux("capture-pane", "-p", "-t", "terminal")), what="the terminal's first frame")
        print(f"the terminal's monitor, launched -> first full frame: {time.monotonic() - started:.2f} s")
        time.sleep(3.0)  # the first samples and the imports' warm-up pass
        (session,) = sessions(server)
        found = side_by_side({"browser session's monitor": session.pid, "terminal's monitor": terminal,
                              "gputui web's server": server.pid}, args.seconds)
        drawing = full_frame(tab.text()) and full_frame(tmux("capture-pane", "-p", "-t", "terminal"))
        print(f"side by side for {args.seconds:g} s, a {cols}x{rows} terminal each, {machine_load()}"
              + ("" if drawing else "  (a screen was lost!)"))
        print(f"{'':28}{'CPU % of a core':>16}{'RSS':>10}{'peak RSS':>10}{'USS':>10}")
        for name, r in found.items():
            print(f"{name:28}{r['cpu']:>14.2f} %{r['rss']:>7.1f} MB{r['peak']:>7.1f} MB{r['uss']:>7.1f} MB")
        tab.close()
    finally:
        browser.close()
        playwright.stop()
        tmux("kill-server")  # our own tmux server (-L) only
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
