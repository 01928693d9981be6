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

``--load busy`` runs the A/B while one spinning process per core keeps the machine busy (started and
ended by the bench), ``--load both`` idle then busy, with the ratios busy/idle: a busy machine stretches
the wall-clock step, so each clock's overhead is a share of the stopped side's step on that clock. Each
overhead comes with a 95 % interval for the median of the paired blocks' differences (the sign test's,
from their order statistics: no assumption on their scatter), and the probe's readings are counted
(measured steps and light readings per 1000 steps). The probe is the gputui of the Python that runs the
bench (this checkout's where none is installed): ``/path/to/other/venv/bin/python bench/bench_probe_ab.py``
measures another version's probe with the same bench.

    python bench/bench_probe_ab.py [--rounds 60] [--steps 24] [--only 5|1.6] [--clock wall|cpu]
                                   [--load idle|busy|both]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples")]
if importlib.util.find_spec("gputui") is None:  # (the running Python's own, where installed, is the one measured)
    sys.path.append(str(ROOT))

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


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The median of ``values`` and an interval that holds the true median with at least ``confidence``
    (the sign test's: the k-th smallest and largest values, k from the binomial distribution)."""
    ordered, n = sorted(values), len(values)
    tail, k = 0.0, 0
    while k < n // 2 and tail + math.comb(n, k) / 2 ** n <= (1 - confidence) / 2:
        tail += math.comb(n, k) / 2 ** n
        k += 1
    k = max(k, 1)  # (too few values for that confidence: the whole range, which holds less)
    return ordered[k - 1], statistics.median(ordered), ordered[n - k]


@contextlib.contextmanager
def machine_load(load: str):
    """``busy``: one spinning process per core (other users' work) while the block runs; ``idle``: none."""
    spinners = [subprocess.Popen([sys.executable, "-I", "-S", "-c", "while True: pass"])
                for _ in range((os.cpu_count() or 1) if load == "busy" else 0)]
    try:
        if spinners:
            time.sleep(1.0)  # (the scheduler has them running)
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def light_readings(entries: list) -> int:
    """Unmeasured steps that carry a light reading (a figure read at their end)."""
    return sum(1 for e in entries if e.record is None and (e.allocated, e.host_allocated, e.host_memory) != (None,) * 3)


def ab(target: float, rounds: int, steps: int, budget: float | None, clock, job=None) -> dict:
    job = job or sized_job(target)
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
    cost = elapsed = charged = 0.0
    measured = light = stepped = 0
    offset = 0
    tracker = probe.tracker
    for r in range(rounds):
        for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if side == "on":
                # The hooks go on and off, not the whole probe: start() also sets aside memory for an
                # OOM report, reads every figure and registers with atexit, once in a job's life.
                tracker.install()
                before, seen, count, spent = tracker.cost, tracker.elapsed, tracker.step_count, budget.charged
            wall, cpu = block_time(job, steps, offset)
            offset += steps
            if side == "on":
                tracker.uninstall()
                cost += tracker.cost - before
                charged += budget.charged - spent
                elapsed += tracker.elapsed - seen
                stepped += tracker.step_count - count
                entries = list(probe.board.steps)[-(tracker.step_count - count):]
                measured += sum(1 for e in entries if e.record is not None)
                light += light_readings(entries)
            # A block's mean, not its median: the probe's cost is mostly in its few measured steps.
            blocks[side].append(wall)
            cpu_blocks[side].append(cpu)
    runtime.stop()
    out = {"batch": job.batch, "account": cost / elapsed if elapsed else float("nan"), "blocks": rounds,
           "measured": measured, "light": light, "stepped": stepped, "per_step": tracker.hook_cost.lean.per_step,
           "account_s": cost / stepped if stepped else float("nan"),
           "readings_s": charged / stepped if stepped else float("nan"),
           "after": (budget.after_measured.cost.per_step, budget.after_light.cost.per_step)}
    for clock, sides in (("wall", blocks), ("cpu", cpu_blocks)):
        off, on = sides["off"], sides["on"]
        out[clock] = (statistics.median(off), statistics.median(on), median_interval([b - a for a, b in zip(off, on)]))
    return out


def _us(seconds: float | None) -> str:
    return "not yet" if seconds is None else f"{seconds * 1e6:.0f} us"


def overhead(r: dict, clock: str) -> tuple[float, float, float]:
    """The outside A/B's overhead on ``clock`` as a share of the stopped side's step on that clock
    (low, median, high: the 95 % interval)."""
    off, _, interval = r[clock]
    return tuple(x / off for x in interval)  # type: ignore[return-value]


def report(label: str, load: str, r: dict, steps: int, clock_name: str) -> None:
    per_k = 1000 / r["stepped"] if r["stepped"] else float("nan")
    print(f"~{label} ms MLP (batch {r['batch']}), {load} machine: {r['blocks']} blocks of {steps} steps each way; "
          f"{r['measured']} of {r['stepped']} steps measured ({r['measured'] * per_k:.1f} per 1000), "
          f"{r['light'] * per_k:.0f} light readings per 1000; the step hook's own cost "
          f"{(r['per_step'] or 0) * 1e6:.1f} us a step; what the steps after a reading cost (calibrated): "
          f"{_us(r['after'][0])} after a measured step, {_us(r['after'][1])} after a light reading")
    print(f"  probe's own account: {r['account_s'] * 1e6:.1f} us a step ({r['readings_s'] * 1e6:.1f} us its readings), "
          f"{r['account'] * 100:.2f} % of the step time it saw ({clock_name} clock)")
    for clock, name in (("wall", "wall clock"), ("cpu", "thread CPU")):
        off, on, (low, mid, high) = r[clock]
        share = overhead(r, clock)
        print(f"  {name}: mean step {off * 1e3:.3f} ms stopped, {on * 1e3:.3f} ms running (block medians); "
              f"outside A/B {mid * 1e6:+.1f} us a step, {share[1] * 100:+.2f} % (paired blocks' median, "
              f"95 % interval {low * 1e6:+.1f} .. {high * 1e6:+.1f} us, "
              f"{share[0] * 100:+.2f} .. {share[2] * 100:+.2f} %)")


def ratios(label: str, idle: dict, busy: dict) -> None:
    """Busy against idle: the step's stretch, the overheads, the readings taken, the account."""
    def per_k(r: dict, key: str) -> float:
        return r[key] / r["stepped"] if r["stepped"] else float("nan")

    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}" if a > 0 else "n/a"

    print(f"~{label} ms busy/idle: wall step x{ratio(idle['wall'][0], busy['wall'][0])}, thread-CPU step "
          f"x{ratio(idle['cpu'][0], busy['cpu'][0])}; overhead (% of the step) wall "
          f"x{ratio(overhead(idle, 'wall')[1], overhead(busy, 'wall')[1])}, thread CPU "
          f"x{ratio(overhead(idle, 'cpu')[1], overhead(busy, 'cpu')[1])}; measured steps "
          f"x{ratio(per_k(idle, 'measured'), per_k(busy, 'measured'))}, light readings "
          f"x{ratio(per_k(idle, 'light'), per_k(busy, 'light'))}; account (% of step time) "
          f"x{ratio(idle['account'], busy['account'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--only", choices=("5", "1.6"))
    parser.add_argument("--budget", type=float, help="the probe's readings budget (default: as shipped)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="the probe's clock: wall (as shipped) or the training thread's CPU time")
    parser.add_argument("--load", choices=("idle", "busy", "both"), default="idle",
                        help="busy: one spinning process per core beside the job; both: idle, then busy")
    args = parser.parse_args()
    torch.set_num_threads(1)
    probe_clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    loads = ("idle", "busy") if args.load == "both" else (args.load,)
    print(f"torch {torch.__version__}, 1 thread, CPU, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at start; the probe ({Path(runtime.__file__).parents[2]}) "
          f"on the {args.clock} clock")
    for label, target in (("5", 5e-3), ("1.6", 1.6e-3)):
        if args.only not in (None, label):
            continue
        job = sized_job(target)  # (sized on the machine as it is: the same job idle and busy)
        results = {}
        for load in loads:
            with machine_load(load):
                results[load] = ab(target, args.rounds, args.steps, args.budget, probe_clock, job)
            report(label, load, results[load], args.steps, args.clock)
        if len(results) == 2:
            ratios(label, results["idle"], results["busy"])
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
