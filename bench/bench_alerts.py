"""What alerts add to a sample: the rules' time per sample beside the sampling pipeline's own (gather and
judge), on the simulator's busiest scenarios, and how long ``notify`` holds the sampler up while a
receiver hangs. Then what reaches receivers when alerts quote a process's 128 KiB strings (a command's
environment, an ntfy title against http.server's header limit), and how long a webhook that trickles its
answer a byte every 5 s holds its channel.

    python bench/bench_alerts.py
"""

from __future__ import annotations

import queue
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gputui.alerts.delivery import Channel, Notifier, command_channel  # noqa: E402
from gputui.alerts.rules import AlertState, evaluate  # noqa: E402
from gputui.alerts.webhook import webhook_channel  # noqa: E402
from gputui.model.alert import Alert, AlertEvent  # noqa: E402
from gputui.options import Options  # noqa: E402
from gputui.sample.pipeline import open_pipeline  # noqa: E402

SAMPLES = 200


def per_sample(scenario: str) -> tuple[float, float]:
    """Milliseconds per sample: the pipeline's, and the rules'."""
    now = [0.0]
    sampled = ruled = 0.0
    state = AlertState()
    with open_pipeline(Options(mode="once", demo=scenario, demo_processes=None), clock=lambda: now[0],
                       pause=lambda s: None, environ={}) as pipeline:
        for i in range(SAMPLES):
            now[0] = 60.0 + i
            began = time.perf_counter()
            sample = pipeline.sample()
            middle = time.perf_counter()
            state, _ = evaluate(state, sample.snapshot, sample.judgements)
            sampled += middle - began
            ruled += time.perf_counter() - middle
    return 1000 * sampled / SAMPLES, 1000 * ruled / SAMPLES


def held_up_by_a_hanging_receiver() -> float:
    """Milliseconds ``notify`` takes, at most, over 100 samples while the command never answers."""
    notifier = Notifier([Channel("bench", command_channel("sleep 60", timeout=1.0), lambda s: None)])
    worst = 0.0
    state = AlertState()
    now = [60.0]
    with open_pipeline(Options(mode="once", demo="leaky"), clock=lambda: now[0], pause=lambda s: None,
                       environ={}) as pipeline:
        for i in range(100):
            now[0] = 60.0 + 5 * i
            sample = pipeline.sample()
            state, events = evaluate(state, sample.snapshot, sample.judgements)
            began = time.perf_counter()
            notifier.notify(events)
            worst = max(worst, time.perf_counter() - began)
    notifier.close(wait=3.0)
    return 1000 * worst


HUGE = Alert("straggler", "job torchelastic " + "r" * 131_051 + " pid 7", "warning",
             "rank 1 of " + "x" * 131_071 + " (torchelastic) lags the others", pid=7)  # as long as Linux allows
SMALL = Alert("gpu_free", "gpu GPU-2", "info", "GPU 2 is free", gpu="GPU-2")


def command_with_huge_alerts(deliveries: int = 3) -> str:
    """Of ``deliveries`` deliveries, each the huge alert then a small one, how many reach the command."""
    with tempfile.TemporaryDirectory() as folder:
        got = Path(folder) / "got"
        channel = Channel("bench", command_channel(f"cat >/dev/null; echo >> {got}"), lambda s: None)
        for _ in range(deliveries):
            channel.put([AlertEvent("started", HUGE, 1.0), AlertEvent("started", SMALL, 1.0)])
            time.sleep(0.5)
        channel.close(wait=5.0)
        reached = len(got.read_text().splitlines()) if got.exists() else 0
    return f"{reached} of {deliveries} deliveries reached the command"


class _Receiver(BaseHTTPRequestHandler):
    """Answers 200 at once, or (``server.trickle``) a byte every 5 s until the server stops."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if not self.server.trickle:  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while not self.server.stopping.wait(5.0):  # type: ignore[attr-defined]
            try:
                self.wfile.write(b"a")
                self.wfile.flush()
            except OSError:
                return

    def log_message(self, *args: object) -> None:
        pass


def _webhook(trickle: bool, alert: Alert, form: str, wait: float) -> tuple[str | None, float]:
    """What a channel to a local http.server reports of one delivery (None: nothing) and after how long."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.daemon_threads, server.trickle, server.stopping = True, trickle, threading.Event()  # type: ignore
    threading.Thread(target=server.serve_forever, daemon=True).start()
    said: queue.Queue[str] = queue.Queue()
    channel = Channel("bench", webhook_channel(f"http://127.0.0.1:{server.server_port}/", form), said.put)
    began = time.monotonic()
    channel.put([AlertEvent("started", alert, 1.0)])
    channel.close(wait=wait)  # (delivered, reported, or still held)
    took = time.monotonic() - began
    server.stopping.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()
    return (said.get_nowait() if not said.empty() else None), took


def main() -> int:
    print(f"{'scenario':<16}{'sample ms':>10}{'rules ms':>10}{'rules/sample':>14}")
    for scenario in ("leaky", "torchrun", "training-node", "dataparallel", "faults"):
        sampled, ruled = per_sample(scenario)
        print(f"{scenario:<16}{sampled:>10.2f}{ruled:>10.3f}{ruled / sampled:>13.1%}")
    print(f"notify with a hanging receiver: at most {held_up_by_a_hanging_receiver():.3f} ms per sample")
    print(f"alerts quoting a 128 KiB argv[0] and run id: {command_with_huge_alerts()}")
    said, _ = _webhook(False, HUGE, "ntfy", 10.0)
    print(f"ntfy title quoting a 128 KiB job name: {said or 'delivered'}")
    said, took = _webhook(True, SMALL, "json", 30.0)
    print("webhook trickling a byte every 5 s (timeout 10 s): " +
          (f"reported after {took:.1f} s: {said}" if said else f"channel still held after {took:.0f} s, nothing said"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
