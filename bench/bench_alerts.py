"""What alerts add to a sample: the rules' time per sample beside the sampling pipeline's own (gather and
judge), on the simulator's busiest scenarios, and how long ``notify`` holds the sampler up while a
receiver hangs.

    python bench/bench_alerts.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gputui.alerts.delivery import Channel, Notifier, command_channel  # noqa: E402
from gputui.alerts.rules import AlertState, evaluate  # noqa: E402
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


def main() -> int:
    print(f"{'scenario':<16}{'sample ms':>10}{'rules ms':>10}{'rules/sample':>14}")
    for scenario in ("leaky", "torchrun", "training-node", "dataparallel", "faults"):
        sampled, ruled = per_sample(scenario)
        print(f"{scenario:<16}{sampled:>10.2f}{ruled:>10.3f}{ruled / sampled:>13.1%}")
    print(f"notify with a hanging receiver: at most {held_up_by_a_hanging_receiver():.3f} ms per sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
