"""Cost of on-demand allocation-site recording on a CPU training loop (issue 5's benchmark).

Same process, same job: median step time with the probe running and recording off, then for the
bounded window while sites are recorded (the probe's ``record_sites`` op, asked for in-process), in
alternating rounds. Also prints the probe's own estimate (ProbeReport.recording_cost).

    python bench/bench_sites.py [--rounds 6] [--window 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import loops  # noqa: E402

from gputui.probe import runtime  # noqa: E402

BATCH = 96  # as bench_probe.py: about 5 ms a step


def median_step(job, steps: int, offset: int) -> float:
    times = []
    for i in range(steps):
        x, y = job.batch_at(offset + i)
        started = time.perf_counter()
        loops.train_step(job, x, y)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=int, default=40, help="steps recorded per round (max 50)")
    args = parser.parse_args()

    job = loops.make_job(batch=BATCH)
    probe = runtime.start(serve=False, auto_sites=False)
    median_step(job, 30, 0)  # warm-up; the probe learns the optimizer at the first step
    off, on, costs = [], [], []
    offset = 30
    for _ in range(args.rounds):
        off.append(median_step(job, args.window, offset))
        offset += args.window
        probe.desk.record_sites({"on": True, "steps": args.window})
        on.append(median_step(job, args.window + 1, offset))  # recording starts at the next step
        offset += args.window + 1
        report = probe.report()
        if report.recording_cost is not None:
            costs.append(report.recording_cost)
        probe.desk.record_sites({"on": False})
    sites = len(probe.report().sites)
    runtime.stop()
    base, rec = statistics.median(off), statistics.median(on)
    print(f"site recording, {args.rounds} rounds of {args.window} steps, CPU loop at batch {BATCH}:")
    print(f"  step without recording: {base * 1e3:.2f} ms (rounds {min(off) * 1e3:.2f}..{max(off) * 1e3:.2f})")
    print(f"  step while recording:   {rec * 1e3:.2f} ms (rounds {min(on) * 1e3:.2f}..{max(on) * 1e3:.2f})")
    print(f"  cost: {(rec - base) * 1e3:+.2f} ms/step ({(rec - base) / base * 100:+.1f} %) while on; "
          f"off again after the window")
    if costs:
        print(f"  the probe's own estimate (recording_cost): {statistics.median(costs) * 1e3:.2f} ms/step")
    print(f"  sites in the last report: {sites}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
