"""Cost of judging one sample in the sampling pipeline (gputui/sample/judge.py), against what the live
monitor ran before it (the leak judge and the memory trends alone), on the same simulated snapshots.

The Judge adds the per-process judgements every JSON document carries (advice for probed and growing
processes) and each job's findings. Prints the median milliseconds per sample of each; and of the idle
judge (who holds GPUs idle, analysis/waste.py) alone, against reading the same figures back from the
History every sample (each process's SM series over the window, and its idle streak walked back).

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
from gputui.analysis.waste import WasteJudge
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


def idle_from_history() -> object:
    """What the idle judge would cost read back from the History: per process and GPU, the mean SM over the
    window and the idle streak, walking back from the newest sample (the design analysis/waste.py avoids)."""
    history = History()

    def judge_one(snapshot: Snapshot) -> None:
        history.add(snapshot)
        now = snapshot.taken_at
        for key in history.process_keys():
            times, utils = history.process(key, "sm_util").known()
            window = [u for t, u in zip(times, utils) if t >= now - 600.0]
            _ = sum(window) / len(window) if window else None
            memory = history.process(key, "gpu_memory").values
            streak = 0
            for m, u in zip(reversed(memory), reversed(history.process(key, "sm_util").values)):
                if m is None or m < 1 << 30 or u is None or u >= 5:
                    break
                streak += 1

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
    idle = per_sample(WasteJudge(), samples)
    read_back = per_sample(idle_from_history(), samples)
    share = 100 * idle / judged
    print(f"  idle judge alone (running figures):   median {idle:7.2f} ms/sample  ({share:.0f}% of the Judge)")
    print(f"  the same read back from the History:  median {read_back:7.2f} ms/sample  (ratio {read_back / idle:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
