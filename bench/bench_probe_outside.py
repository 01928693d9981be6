"""The probe's cost as a user would measure it: whole training runs with and without it (issue 45, item 8).

Separate processes, alternated: a CPU MLP training loop (examples/loops.py, one torch thread) with the
probe started as users start it (``GPUTUI_PROBE=1``: the .pth line, the probe's socket and all) and
without it, ``--runs`` of each, the side that goes first alternating pair by pair; idle, and with one
spinning process per core beside it (``--load busy``). Each run times its training loop after a
warm-up (wall clock and the training thread's CPU time, a step's mean). Printed per arm: the median
and the spread of the runs; the overhead as the median of the pairs' differences with the sign test's
95 % interval, and as the difference of the arms' medians with a bootstrap 95 % interval (the issue's
"median of 5 runs each"). An interval many times wider than the effect says this method cannot
resolve it; bench/bench_probe_ab.py (paired blocks in one process) can.

    python bench/bench_probe_outside.py [--runs 8] [--seconds 6] [--only 5|1.6] [--load idle|busy|both]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
WARMUP_STEPS = 200  # before the timed loop: torch's first steps, the probe's first measured steps


def child(batch: int, steps: int) -> int:
    """One run: the job, its warm-up, then ``steps`` timed steps; one JSON line."""
    sys.path.insert(0, str(ROOT / "examples"))
    import loops  # (imports torch: with GPUTUI_PROBE set, the probe starts here)
    import torch

    torch.set_num_threads(1)
    job = loops.make_job(batch=batch)
    for i in range(WARMUP_STEPS):
        loops.train_step(job, *job.batch_at(i))
    started, on_cpu = time.perf_counter(), time.thread_time()
    for i in range(steps):
        loops.train_step(job, *job.batch_at(WARMUP_STEPS + i))
    wall, cpu = time.perf_counter() - started, time.thread_time() - on_cpu
    print(json.dumps({"wall": wall / steps, "cpu": cpu / steps,
                      "probe": "gputui.probe.runtime" in sys.modules}))
    return 0


def one_run(batch: int, steps: int, probe: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GPUTUI_PROBE"}
    if probe:
        env["GPUTUI_PROBE"] = "1"
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(batch), str(steps)],
                          env=env, capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["probe"] != probe:
        raise SystemExit(f"the run {'with' if probe else 'without'} the probe had it {'off' if probe else 'on'}")
    return result


def bootstrap_shift(off: list[float], on: list[float], draws: int = 4000) -> tuple[float, float]:
    """A 95 % interval for median(on) / median(off) - 1, resampling each arm's runs (seeded)."""
    rng = random.Random(45)
    shifts = sorted(statistics.median(rng.choices(on, k=len(on))) / statistics.median(rng.choices(off, k=len(off))) - 1
                    for _ in range(draws))
    return shifts[int(0.025 * draws)], shifts[int(0.975 * draws) - 1]


def spread(values: list[float]) -> float:
    """Half the range of ``values`` as a share of their median (the issue's "same-arm spread")."""
    return (max(values) - min(values)) / 2 / statistics.median(values)


def outside(batch: int, steps: int, runs: int) -> dict:
    arms: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(runs):
        for probe in (False, True) if r % 2 == 0 else (True, False):
            arms[probe].append(one_run(batch, steps, probe))
    return {"off": arms[False], "on": arms[True]}


def report(label: str, load: str, batch: int, steps: int, result: dict) -> None:
    from bench_probe_ab import median_interval

    print(f"~{label} ms MLP (batch {batch}), {load} machine: {len(result['on'])} runs each way of {steps} steps")
    for clock, name in (("wall", "wall clock"), ("cpu", "thread CPU")):
        off = [r[clock] for r in result["off"]]
        on = [r[clock] for r in result["on"]]
        low, mid, high = median_interval([b / a - 1 for a, b in zip(off, on)])
        shift = statistics.median(on) / statistics.median(off) - 1
        b_low, b_high = bootstrap_shift(off, on)
        print(f"  {name}: step {statistics.median(off) * 1e3:.3f} ms without (runs ±{spread(off) * 100:.1f} %), "
              f"{statistics.median(on) * 1e3:.3f} ms with (±{spread(on) * 100:.1f} %); overhead "
              f"{shift * 100:+.2f} % by the arms' medians (bootstrap 95 %: {b_low * 100:+.2f} .. "
              f"{b_high * 100:+.2f} %), "
              f"{mid * 100:+.2f} % by the pairs' (sign test 95 %: {low * 100:+.2f} .. {high * 100:+.2f} %)")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(int(sys.argv[2]), int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs each way (with and without the probe)")
    parser.add_argument("--seconds", type=float, default=6.0, help="each run's timed loop, idle")
    parser.add_argument("--only", choices=("5", "1.6"))
    parser.add_argument("--load", choices=("idle", "busy", "both"), default="both")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import torch
    from bench_probe_ab import machine_load, sized_job

    torch.set_num_threads(1)
    loads = ("idle", "busy") if args.load == "both" else (args.load,)
    print(f"torch {torch.__version__}, 1 thread, CPU, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    for label, target in (("5", 5e-3), ("1.6", 1.6e-3)):
        if args.only not in (None, label):
            continue
        batch = sized_job(target).batch  # (sized once: the same job idle and busy)
        steps = round(args.seconds / target)
        for load in loads:
            with machine_load(load):
                report(label, load, batch, steps, outside(batch, steps, args.runs))
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
