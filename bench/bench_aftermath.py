"""What a reading costs the steps after it, beside the probe's calibrated account of it (budget.Aftermath).

A CPU MLP training loop (one torch thread, ~1.6 ms or ~5 ms steps) runs under the probe as shipped, on
the training thread's CPU clock. Each step's thread CPU time is kept with what the probe did at its end
(measured, a light reading, nothing read). Printed: how much longer the steps 1 to 6 after a measured
step and 1 to 3 after a light reading ran than the step two before that reading (paired: median and
mean of the differences, over the readings with no other reading around them), their sums, and what
the probe's Aftermath calibrated for each kind. The first step after includes the probe's own step-end work at that
reading (in its account already); the later ones are the aftermath no timer of the probe's sees.

    python bench/bench_aftermath.py [--steps 12000] [--only 5|1.6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import loops  # noqa: E402
import torch  # noqa: E402
from bench_probe_ab import sized_job  # noqa: E402

from gputui.probe import runtime  # noqa: E402


def run(target: float, steps: int) -> None:
    job = sized_job(target)
    probe = runtime.start(serve=False, clock=time.thread_time)
    took, kinds = [], []
    try:
        for i in range(steps):
            x, y = job.batch_at(i)
            started = time.thread_time_ns()
            loops.train_step(job, x, y)
            took.append(time.thread_time_ns() - started)
            entry = probe.board.steps[-1]
            light = any(v is not None for v in entry[4:7])
            kinds.append("measured" if entry.record is not None else "light" if light else "")
    finally:
        runtime.stop()
    took, kinds = took[100:], kinds[100:]  # (the probe's first steps: learning the model, calibrating)
    print(f"~{target * 1e3:g} ms MLP (batch {job.batch}), {len(took)} steps: "
          f"{kinds.count('measured')} measured, {kinds.count('light')} light readings")
    budget = probe.tracker.budget
    for kind, after, calibrated in (("measured", 6, budget.after_measured.cost.per_step),
                                    ("light", 3, budget.after_light.cost.per_step)):
        # Each reading whose two steps before read nothing, and whose next steps read nothing either: the
        # steps after it less the step two before (paired, so that the machine's load drifting cancels;
        # not the one just before, whose end arms the hooks for a measured step).
        pairs = [i for i, k in enumerate(kinds) if k == kind and i >= 2 and not any(kinds[i - 2:i])
                 and i + after < len(kinds) and not any(kinds[i + 1:i + after + 1])]
        medians, means = [], []
        for d in range(1, after + 1):
            xs = [took[i + d] - took[i - 2] for i in pairs]
            if xs:
                medians.append(statistics.median(xs))
                means.append(statistics.fmean(xs))
                print(f"  {d} after a {kind} step: {len(xs):5d} pairs, median {medians[-1] / 1e3:+7.1f} us, "
                      f"mean {means[-1] / 1e3:+7.1f} us")
        shown = "not calibrated" if calibrated is None else f"{calibrated * 1e6:.1f} us"
        print(f"  sum after a {kind} step: medians {sum(medians) / 1e3:+.1f} us, means {sum(means) / 1e3:+.1f} us; "
              f"the probe's Aftermath: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12000)
    parser.add_argument("--only", choices=("5", "1.6"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, CPU, load average {os.getloadavg()[0]:.2f}")
    for label, target in (("1.6", 1.6e-3), ("5", 5e-3)):
        if args.only in (None, label):
            run(target, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
