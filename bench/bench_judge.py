"""Cost of judging one sample in the sampling pipeline (gputui/sample/judge.py), against what the live
monitor ran before it (the leak judge and the memory trends alone), on the same simulated snapshots.

The Judge adds the per-process judgements every JSON document carries (advice for probed and growing
processes) and each job's findings. Prints the median milliseconds per sample of each.

    python bench/bench_judge.py [--scenario training-node] [--processes 1000 (0: the scenario's own)] [--samples 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from gputui.analysis.history import History
from gputui.analysis.leaks import JudgedLeaks, judge_leaks
from gputui.analysis.trends import TrendCache, trends
from gputui.collect import open_collector
from gputui.model import Snapshot
from gputui.sample.judge import Judge


def snapshots(scenario: str, processes: int | None, count: int) -> list[Snapshot]:
    """``count`` samples one second apart from 90 s into the scenario, its probes' reports in them."""
    now = [90.0]
    collector = open_collector(scenario, clock=lambda: now[0], processes=processes, environ={})
    try:
        out = []
        for i in range(count):
            now[0] = 90.0 + i
            out.append(dataclasses.replace(collector.sample(), probes=collector.probe_reports()))
        return out
    finally:
        collector.close()


def per_sample(judge_one, samples: list[Snapshot]) -> float:
    """Median milliseconds of ``judge_one`` over the samples, in order."""
    times = []
    for snapshot in samples:
        started = time.perf_counter()
        judge_one(snapshot)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def before() -> object:
    leaks, history, cache = JudgedLeaks(), History(), TrendCache()

    def judge_one(snapshot: Snapshot) -> None:
        nonlocal leaks
        leaks = judge_leaks(snapshot, leaks)
        history.add(snapshot)
        trends(history, snapshot, cache=cache)

    return judge_one


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="training-node")
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=60)
    args = parser.parse_args()
    samples = snapshots(args.scenario, args.processes or None, args.samples)  # 0: the scenario's own
    judged = per_sample(Judge(), samples)
    alone = per_sample(before(), samples)
    print(f"{args.scenario}, {len(samples[-1].processes)} processes, {args.samples} samples")
    print(f"  Judge (every judgement, once):        median {judged:7.2f} ms/sample")
    print(f"  leak judge + memory trends alone:     median {alone:7.2f} ms/sample  (ratio {judged / alone:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
