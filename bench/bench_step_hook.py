"""What the probe's step hook costs at each step end, timed from just before it to just after it.

A CPU MLP training loop (one torch thread, ~5 ms or ~1.6 ms steps) with two global optimizer post-hooks
of the bench's own around the probe's: one registered before the probe's (the clock read before it) and
one after (read after it), so that a step end's time includes torch's call into the probe's hook and
its return (thread CPU time). Blocks of steps alternate between probe running and stopped (the stopped side: the two
hooks alone, the bench's own cost, taken off). Printed per kind of step end (lean, unmeasured with or
without a light reading, measured, the step after a measured one): how many, the median and mean
microseconds, beside the probe's own account of its hook (HookCost) over the same steps.

    python bench/bench_step_hook.py [--rounds 30] [--steps 40] [--only 5|1.6] [--clock wall|cpu]
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
import torch  # noqa: E402
from bench_probe_ab import sized_job  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

from gputui.probe import runtime  # noqa: E402


class Sandwich:
    """The training thread's CPU clock read just before and just after the probe's step hook, at each
    step end (the thread's CPU: on a shared machine, wall time adds the other processes' turns)."""

    def __init__(self):
        self.before = 0
        self.took: list[int] = []

    def first(self, optimizer, args, kwargs):
        self.before = time.thread_time_ns()

    def last(self, optimizer, args, kwargs):
        self.took.append(time.thread_time_ns() - self.before)


def kind_of(entry, previous) -> str:
    """What the probe did at this step's end, read off its entry on the board."""
    if entry.record is not None:
        return "measured"
    if previous is not None and previous.record is not None:
        return "after measured"
    if any(x is not None for x in entry[4:7]):
        return "light reading"
    return "nothing read"


def run(target: float, rounds: int, steps: int, clock) -> None:
    job = sized_job(target)
    sandwich = Sandwich()
    first = register_optimizer_step_post_hook(sandwich.first)
    probe = runtime.start(serve=False, clock=clock)
    last = register_optimizer_step_post_hook(sandwich.last)
    offset = 0
    for i in range(60):  # the probe learns the optimizer and the model's roots, once
        loops.train_step(job, *job.batch_at(i))
    offset = 60
    by_kind: dict[str, list[int]] = {}
    stopped: list[int] = []
    account = whole_account = 0.0
    for r in range(rounds):
        for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
            if side == "off":
                probe.tracker.uninstall()
            tracker = probe.tracker
            count, whole, charged = tracker.step_count, tracker.cost, tracker.budget.charged
            del sandwich.took[:]
            for i in range(steps):
                loops.train_step(job, *job.batch_at(offset + i))
            offset += steps
            if side == "off":
                stopped.extend(sandwich.took)
                probe.tracker.install()
                last.remove()  # (after the probe's again: installing put its hook last)
                last = register_optimizer_step_post_hook(sandwich.last)
                continue
            account += (tracker.cost - tracker.budget.charged) - (whole - charged)  # (the step hook's: HookCost)
            whole_account += tracker.cost - whole
            entries = list(probe.board.steps)
            new = entries[-(probe.tracker.step_count - count):]
            previous = entries[-(len(new) + 1)] if len(entries) > len(new) else None
            for entry, took in zip(new, sandwich.took[-len(new):]):
                by_kind.setdefault(kind_of(entry, previous), []).append(took)
                previous = entry
    runtime.stop()
    first.remove()
    last.remove()
    base = statistics.median(stopped)
    total = sum(len(v) for v in by_kind.values())
    print(f"~{target * 1e3:g} ms MLP (batch {job.batch}), {total} step ends with the probe; the bench's own two "
          f"hooks {base / 1e3:.1f} us a step end (taken off below)")
    every = []
    for kind in ("nothing read", "light reading", "after measured", "measured"):
        took = [t - base for t in by_kind.get(kind, [])]
        every += took
        if took:
            print(f"  {kind:>15}: {len(took):5d} step ends, median {statistics.median(took) / 1e3:7.1f} us, "
                  f"mean {statistics.fmean(took) / 1e3:8.1f} us")
    print(f"  {'all':>15}: mean {statistics.fmean(every) / 1e3:.1f} us a step end; the probe's HookCost over "
          f"the same blocks {account / max(total, 1) * 1e6:.1f} us a step end "
          f"(per_step {(probe.tracker.hook_cost.lean.per_step or 0) * 1e6:.1f} us); its whole account (readings "
          f"and measured steps' hooks included) {whole_account / max(total, 1) * 1e6:.1f} us a step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--only", choices=("5", "1.6"))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="the probe's clock: wall (as shipped) or the training thread's CPU time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"the probe on the {args.clock} clock")
    for label, target in (("5", 5e-3), ("1.6", 1.6e-3)):
        if args.only in (None, label):
            run(target, args.rounds, args.steps, clock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
