"""The probe's cost measured from outside, beside the probe's own account of it (issue 32, item 8).

One process, a CPU MLP training loop (one torch thread) sized for ~5 ms steps and one for ~1.6 ms
steps. Short blocks of steps alternate between probe stopped and probe running (the same Probe,
its hooks removed and installed again, so both sides share the process, the allocator and the
machine's drift; the side that goes first alternates too). Per block: the mean step time (the probe's cost is mostly in
its few measured steps, which a median leaves out). Printed: the median per-block step time each
way, the overhead (median of paired blocks' differences, with the middle half of the pairs), and the
probe's own account over the running blocks (Tracker.cost: its readings, its step hook's own cost, and
what readings cost the steps after them, budget.Aftermath, calibrated before the blocks start as in a
job that has run a while), each in microseconds a step and as a share of
the stopped side's thread-CPU step (the step's
own work, which a loaded machine stretches less than wall time); each block's clocks are read at its
ends only. The probe runs as shipped, on ``time.perf_counter``; ``--clock cpu`` runs it on the training
thread's CPU clock instead (Probe(clock=time.thread_time)), its budget and account then in the seconds the
A/B's thread-CPU figure is in, but that clock is a system call on Linux (0.4 us in a tight loop here
against 0.04 us, and in a real loop 4 times the lean step end's own cost): it measures a probe that costs
more than the one users run. ``--budget 0``: the lean step end alone, no readings.

    python bench/bench_probe_ab.py [--rounds 60] [--steps 24] [--only 5|1.6] [--clock wall|cpu]
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

from gputui.probe import runtime  # noqa: E402

SETTLE_STEPS = 20000  # at most, before the A/B


def step_times(job, steps: int, offset: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each step (and the training thread's CPU seconds of each, into ``cpu``)."""
    times = []
    for i in range(steps):
        x, y = job.batch_at(offset + i)
        started, on_cpu = time.perf_counter(), time.thread_time()
        loops.train_step(job, x, y)
        if cpu is not None:
            cpu.append(time.thread_time() - on_cpu)
        times.append(time.perf_counter() - started)
    return times


def sized_job(target: float):
    """An MLP whose step takes about ``target`` seconds here (batch chosen by measuring)."""
    batch = 64
    for _ in range(6):
        job = loops.make_job(batch=batch)
        step_times(job, 20, 0)
        cpu: list[float] = []
        step_times(job, 40, 20, cpu)
        took = statistics.median(cpu)  # (the thread's CPU: other processes on the machine move it less)
        if abs(took / target - 1) < 0.15:
            break
        batch = max(4, round(batch * (target / took) ** 1.5))  # (a step's fixed cost: aim past the ratio)
    return job


def block_time(job, steps: int, offset: int) -> tuple[float, float]:
    """Wall and training-thread CPU seconds a step, over a block of ``steps`` steps: the clocks read at
    the block's ends only, so that the bench's own clock reads (thread CPU time is a system call on
    Linux) are no part of any step and disturb neither side."""
    batches = [job.batch_at(offset + i) for i in range(steps)]
    started, on_cpu = time.perf_counter(), time.thread_time()
    for x, y in batches:
        loops.train_step(job, x, y)
    return (time.perf_counter() - started) / steps, (time.thread_time() - on_cpu) / steps


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def ab(target: float, rounds: int, steps: int, budget: float | None, clock) -> dict:
    job = sized_job(target)
    probe = runtime.start(serve=False, clock=clock, **({} if budget is None else {"budget": budget}))
    step_times(job, 60, 0)  # the probe learns the optimizer and the model's roots, once
    # As in a job that has run a while: what readings cost the steps after them calibrated (31 measured
    # steps: a minute at most here), so that the account holds it in the blocks below.
    budget, settle = probe.tracker.budget, 0
    while budget.after_measured.cost.per_step is None and budget.share > 0 and settle < SETTLE_STEPS:
        step_times(job, 100, 60 + settle)
        settle += 100
    probe.tracker.uninstall()
    blocks: dict[str, list[float]] = {"off": [], "on": []}
    cpu_blocks: dict[str, list[float]] = {"off": [], "on": []}
    cost = elapsed = 0.0
    measured = stepped = 0
    offset = 0
    for r in range(rounds):
        for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if side == "on":
                # The hooks go on and off, not the whole probe: start() also sets aside memory for an
                # OOM report, reads every figure and registers with atexit, once in a job's life.
                probe.tracker.install()
                before, seen, count = probe.tracker.cost, probe.tracker.elapsed, probe.tracker.step_count
            wall, cpu = block_time(job, steps, offset)
            offset += steps
            if side == "on":
                probe.tracker.uninstall()
                cost += probe.tracker.cost - before
                elapsed += probe.tracker.elapsed - seen
                stepped += probe.tracker.step_count - count
                measured += sum(1 for e in list(probe.board.steps)[-(probe.tracker.step_count - count):]
                                if e.record is not None)
            # A block's mean, not its median: the probe's cost is mostly in its few measured steps.
            blocks[side].append(wall)
            cpu_blocks[side].append(cpu)
    runtime.stop()
    out = {"batch": job.batch, "account": cost / elapsed if elapsed else float("nan"), "blocks": rounds,
           "measured": measured, "stepped": stepped, "per_step": probe.tracker.hook_cost.lean.per_step,
           "account_s": cost / stepped if stepped else float("nan"),
           "after": (probe.tracker.budget.after_measured.cost.per_step, probe.tracker.budget.after_light.cost.per_step)}
    for clock, sides in (("wall", blocks), ("cpu", cpu_blocks)):
        off, on = sides["off"], sides["on"]
        out[clock] = (statistics.median(off), statistics.median(on), quartiles([b - a for a, b in zip(off, on)]))
    return out


def _us(seconds: float | None) -> str:
    return "not yet" if seconds is None else f"{seconds * 1e6:.0f} us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--only", choices=("5", "1.6"))
    parser.add_argument("--budget", type=float, help="the probe's readings budget (default: as shipped)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="the probe's clock: wall (as shipped) or the training thread's CPU time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    probe_clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, 1 thread, CPU, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at start; the probe on the {args.clock} clock")
    for label, target in (("5", 5e-3), ("1.6", 1.6e-3)):
        if args.only not in (None, label):
            continue
        r = ab(target, args.rounds, args.steps, args.budget, probe_clock)
        base = r["cpu"][0]  # (the stopped side's thread CPU a step: the step's own work, load aside)
        print(f"~{label} ms MLP (batch {r['batch']}): {r['blocks']} blocks of {args.steps} steps each way; "
              f"{r['measured']} of {r['stepped']} steps measured; the step hook's own cost "
              f"{(r['per_step'] or 0) * 1e6:.1f} us a step; what the steps after a reading cost (calibrated): "
              f"{_us(r['after'][0])} after a measured step, {_us(r['after'][1])} after a light reading")
        print(f"  probe's own account: {r['account_s'] * 1e6:.1f} us a step, {r['account'] * 100:.2f} % of the step "
              f"time it saw ({args.clock} clock)")
        for clock, name in (("wall", "wall clock"), ("cpu", "thread CPU")):
            off, on, (low, mid, high) = r[clock]
            print(f"  {name}: mean step {off * 1e3:.3f} ms stopped, {on * 1e3:.3f} ms running (block medians); "
                  f"outside A/B {mid * 1e6:+.1f} us a step, {mid / base * 100:+.2f} % (paired blocks, middle half "
                  f"{low * 1e6:+.1f} .. {high * 1e6:+.1f} us)")
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
