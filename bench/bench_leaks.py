"""Time to a leak verdict, per pattern of the leak corpus (examples/leak_corpus.py), at a given budget.

Each pattern runs in a fresh process under the probe (one thread, the probe's own leak checks as they
come at that budget). From the report, the verdict a monitor would have given after every step: the
first step and the seconds after the job's first step at which it was called a leak, whether its
category was right and never changed, the keeping line and the allocation line found; for the
clean patterns, whether any step was called a leak.

    python bench/bench_leaks.py [--budget SHARE] [--steps 120] [PATTERN ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(name: str, steps: int, budget: float | None) -> dict:
    """In this process: run one pattern under the probe and judge every prefix of its steps."""
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    import leak_corpus

    import gputui.probe
    from gputui.analysis.leaks import leak_verdict
    from gputui.analysis.sites import growing_sites

    torch.set_num_threads(1)
    pattern = leak_corpus.PATTERNS[name]
    probe = gputui.probe.start(serve=False, **({} if budget is None else {"budget": budget}))
    kept = pattern.run(steps)
    report = probe.report()
    gputui.probe.stop()
    del kept
    first = report.steps[0]
    called, categories = None, set()
    for last in range(1, len(report.steps) + 1):
        v = leak_verdict(dataclasses.replace(report, steps=report.steps[:last]))
        if v.state == "leak":
            categories.add(v.category)
            if called is None:
                s = report.steps[last - 1]
                called = (s.step, s.ended_at - first.ended_at + (first.duration or 0.0))
    sites = growing_sites(report)
    short = lambda where: where.replace(str(ROOT) + os.sep, "")  # noqa: E731
    return {
        "name": name, "leaks": pattern.leaks, "expected": pattern.category,
        "step": called[0] if called else None, "seconds": called[1] if called else None,
        "categories": sorted(c or "?" for c in categories),
        "keeps": short(report.keepers[0].where[0]) if report.keepers and report.keepers[0].where else None,
        "allocates": short(sites[0].where) if sites else None,
        "measured": sum(1 for s in report.steps if s.categories is not None), "steps": len(report.steps),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*")
    parser.add_argument("--budget", type=float, help="the probe's readings budget (default: the probe's)")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps, args.budget)))
        return 0
    sys.path.insert(0, str(ROOT / "examples"))
    import leak_corpus

    names = args.patterns or list(leak_corpus.PATTERNS)
    print(f"budget {'default' if args.budget is None else f'{args.budget:g}'}, "
          f"{args.steps} steps per pattern, one thread, {os.cpu_count()} CPUs")
    print(f"{'pattern':18} {'verdict at':>16} {'category':22} {'measured':>9}  keeps / allocates")
    for name in names:
        budget = [] if args.budget is None else ["--budget", str(args.budget)]
        out = subprocess.run([sys.executable, __file__, "--one", name, "--steps", str(args.steps), *budget],
                             capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            print(f"{name:18} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        when = "never" if r["step"] is None else f"step {r['step']}, {r['seconds']:.2f} s"
        if r["leaks"]:
            right = r["categories"] == [r["expected"]]
            category = f"{'/'.join(r['categories']) or '-'}{'' if right else ' (want ' + r['expected'] + ')'}"
        else:
            category = "clean" if r["step"] is None else "FALSE ALARM"
        print(f"{name:18} {when:>16} {category:22} {r['measured']:>4}/{r['steps']:<4}  "
              f"{r['keeps'] or '-'} / {r['allocates'] or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
