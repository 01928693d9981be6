"""How long ``gputui estimate`` takes, against its goal: the rule of thumb's 850M-parameter GPT
(examples/estimate_gpt.py:gpt_850m) estimated on the meta device, what-ifs included, in under a minute.

A goal, not a test: a loaded 2-core machine took 64-66 s, so the tests check the figures only and this
prints the time (with and without the what-ifs, and with --fsdp2's row: one rank of 8 measured, asked
for only, as it costs several plain steps) and the process's peak resident memory.

    python bench/bench_estimate.py [--job SCRIPT:FUNCTION]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled

GOAL_S = 60.0
JOB = f"{ROOT / 'examples' / 'estimate_gpt.py'}:gpt_850m"


def timed(job: str, what_if: bool, fsdp2: bool = False) -> float:
    """Seconds one estimate of ``job`` takes against a 16 GB device, as `gputui estimate` runs it."""
    from gputui.estimate.run import estimate
    from gputui.estimate.step import Settings

    started = time.perf_counter()
    estimate(job, Settings(), device_total=16 * 10**9, what_if=what_if, fsdp2=fsdp2)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default=JOB, help="SCRIPT:FUNCTION (default: the 850M GPT)")
    args = parser.parse_args()
    import torch

    timed(args.job, what_if=False)  # imports and first-call set-up, not the estimate's own time
    alone = timed(args.job, what_if=False)
    full = timed(args.job, what_if=True)
    sharded = timed(args.job, what_if=True, fsdp2=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    verdict = "met" if full < GOAL_S else "MISSED"
    print(f"{args.job} (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"estimate with the what-ifs: {full:.1f} s (goal: under {GOAL_S:.0f} s, {verdict})")
    print(f"estimate alone (--no-what-if): {alone:.1f} s")
    print(f"estimate with the what-ifs and --fsdp2 (8 ranks): {sharded:.1f} s, the FSDP2 row {sharded - full:.1f} s")
    print(f"peak resident memory: {peak_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
