"""Probe overhead on a CPU training loop of ~5 ms steps, and the CPU its socket thread uses.

Same process, interleaved blocks with and without the probe after a warm-up, median step time of
each block (wall clock and the training thread's own CPU clock, which other processes on a shared
machine disturb less); the whole comparison is repeated and every repeat printed, so the spread is
visible. Then the socket thread's CPU clock while a monitor polls once a second, with the live
monitor's incremental reports and with whole reports. Then step time and the socket thread's CPU
while three pollers ask flat out, with the server's request bound and without it. Targets (issue 4):
under 1 % of step time, under 0.5 % of a core.

    python bench/bench_probe.py [--repeats 3] [--rounds 30] [--steps 20] [--seconds 10] [--only PART]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import loops  # noqa: E402
import torch  # noqa: E402

from gputui.probe import runtime  # noqa: E402

BATCH = 96  # loops.make_job()'s MLP at this batch: about 5 ms a step on one core of a laptop CPU


def timed_steps(job, steps: int, offset: int) -> tuple[list[float], list[float]]:
    """Wall and thread-CPU seconds of each step."""
    wall, cpu = [], []
    for i in range(steps):
        x, y = job.batch_at(offset + i)
        w, c = time.perf_counter(), time.thread_time()
        loops.train_step(job, x, y)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return wall, cpu


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def overhead(rounds: int, steps: int, activations: bool = True) -> dict:
    """Blocks of ``steps`` steps alternate between probe off and on, ``rounds`` times each.

    The probe is created once and its hooks installed and removed between blocks, so both sides
    see the same process, the same allocator state and the same drift of a shared machine.
    """
    job = loops.make_job(batch=BATCH)
    timed_steps(job, 100, 0)  # warm-up: Adam state, allocator, caches
    probe = runtime.start(serve=False, activations=activations)
    timed_steps(job, 5, 0)  # the probe learns the optimizer at its first step
    blocks = {"off": ([], []), "on": ([], [])}
    before, measured_before = probe.tracker.budget.charged, len(probe.board.records())
    for r in range(rounds):
        # Alternate which side goes first, so neither always runs right after the other.
        for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if side == "on":
                probe.tracker.install()
            else:
                probe.tracker.uninstall()
            wall, cpu = timed_steps(job, steps, r * steps)
            blocks[side][0].append(statistics.median(wall))
            blocks[side][1].append(statistics.median(cpu))
    steps_on = probe.board.records()[measured_before:]
    measured = sum(1 for s in steps_on if s.allocated is not None)
    readings = probe.tracker.budget.charged - before
    runtime.stop()
    out = {"readings_us": readings / (rounds * steps) * 1e6, "measured": measured,
           "stepped": len(steps_on)}
    for i, clock in enumerate(("wall", "cpu")):
        off, on = blocks["off"][i], blocks["on"][i]
        base = statistics.median(off)
        paired = [b - a for a, b in zip(off, on)]
        low, mid, high = quartiles(paired)
        out[clock] = (base, mid / base, low / base, high / base)
        out[clock + "_pairs"] = [p / base for p in paired]
    return out


def print_overhead(label: str, results: list[dict], rounds: int, steps: int) -> None:
    print(f"{label}: {len(results)} repeats of {rounds} alternating blocks of {steps} steps each way")
    for clock, name in (("wall", "wall clock"), ("cpu", "thread CPU")):
        for r in results:
            base, mid, low, high = r[clock]
            print(f"  {name:10s}: step {base * 1e3:.2f} ms, overhead {mid * 100:+.2f} % "
                  f"(paired blocks, middle half {low * 100:+.2f} .. {high * 100:+.2f} %)")
        mids = [r[clock][1] * 100 for r in results]
        pooled = [p * 100 for r in results for p in r[clock + "_pairs"]]
        low, mid, high = quartiles(pooled)
        print(f"  {name:10s}: repeats from {min(mids):+.2f} % to {max(mids):+.2f} %; all "
              f"{len(pooled)} pairs: median {mid:+.2f} %, middle half {low:+.2f} .. {high:+.2f} % "
              f"(target < 1 %)")
    for r in results:
        print(f"  readings and leak checks: {r['readings_us']:.1f} us/step "
              f"({r['measured']} of {r['stepped']} steps measured; budgeted to 0.4 % of step time)")


def time_in_hooks(steps: int) -> None:
    """The time spent inside the probe's hooks themselves: steadier than a difference of step times
    on a shared machine. (The timing wrapper adds a few microseconds per call of its own.)"""
    from gputui.probe import activations, stepping, tracking

    spent = [0.0]
    originals = {}
    for owner, name in ((tracking.Tracker, "_module_pre"), (tracking.Tracker, "_module_post"),
                        (activations.Activations, "pack"), (tracking.Tracker, "_unpack"),
                        (tracking.Tracker, "_optimizer_pre"), (stepping.Stepping, "_optimizer_post")):
        original = originals[owner, name] = getattr(owner, name)

        def timed(self, *args, _original=original):
            started = time.perf_counter()
            try:
                return _original(self, *args)
            finally:
                spent[0] += time.perf_counter() - started

        setattr(owner, name, timed)
    try:
        job = loops.make_job(batch=BATCH)
        probe = runtime.start(serve=False)
        timed_steps(job, 50, 0)
        spent[0] = 0.0
        charged_before = probe.tracker.budget.charged
        wall, _ = timed_steps(job, steps, 0)
        measured = sum(1 for s in probe.board.records()[-steps:] if s.allocated is not None)
        runtime.stop()
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
    per_step, step_time = spent[0] / steps, statistics.median(wall)
    charged = (probe.tracker.budget.charged - charged_before) / steps
    print(f"time inside the probe's hooks: {per_step * 1e6:.1f} us/step = "
          f"{per_step / step_time * 100:.2f} % of a {step_time * 1e3:.2f} ms step "
          f"({measured} of {steps} steps measured within the budget)")
    print(f"  charged to the readings budget (readings, leak checks, measured steps' excess): "
          f"{charged * 1e6:.1f} us/step; the rest of the time in hooks, "
          f"{(per_step - charged) * 1e6:.1f} us/step, is the step-counting hook and the timing "
          f"wrapper's own calls")


def sampler_cpu(seconds: float, incremental: bool) -> None:
    from gputui.link import client

    directory = tempfile.mkdtemp(prefix="gputui-bench-")
    os.chmod(directory, 0o700)
    os.environ["GPUTUI_PROBE_DIR"] = directory
    job = loops.make_job(batch=BATCH)
    probe = runtime.start()
    step = 0
    while len(probe.board.steps) < probe.board.steps.maxlen:  # a full history, as in a long run
        loops.train_step(job, *job.batch_at(step))
        step += 1
    stop = threading.Event()
    watcher = client.ProbeWatcher(timeout=5.0)

    def monitor():  # polls like the live monitor: once a second
        while not stop.wait(1.0):
            if incremental:
                watcher.poll()
            else:
                client.fetch_report(os.getpid(), timeout=5)

    server = probe.server._thread
    clock = time.pthread_getcpuclockid(server.ident)
    served_before = probe.server.requests_answered
    cpu_before, wall_before = time.clock_gettime(clock), time.monotonic()
    poller = threading.Thread(target=monitor, daemon=True)
    poller.start()
    while time.monotonic() - wall_before < seconds:
        loops.train_step(job, *job.batch_at(step))
        step += 1
    stop.set()
    poller.join()
    cpu = time.clock_gettime(clock) - cpu_before
    wall = time.monotonic() - wall_before
    served = probe.server.requests_answered - served_before
    runtime.stop()
    watcher.close()
    how = "incremental reports (ProbeWatcher)" if incremental else "whole reports (fetch_report)"
    print(f"socket thread, {how}: {cpu * 1e3:.1f} ms CPU over {wall:.1f} s, {served} requests "
          f"= {cpu / wall * 100:.3f} % of a core (target < 0.5 %)")


def flat_out(seconds: float, bounded: bool) -> None:
    """Step time while three pollers in other processes ask for reports as fast as they can (each
    a new connection, as tests/probe_stress_job.py does), against the same loop unpolled; and the
    socket thread's CPU. ``bounded``: the server's request bound as shipped, else lifted."""
    import subprocess

    from gputui.link import admission

    shipped = admission.REQUEST_RATE
    admission.REQUEST_RATE = shipped if bounded else 1e9
    try:
        probe = runtime.start()
    finally:
        admission.REQUEST_RATE = shipped
    job = loops.make_job(batch=BATCH)
    for i in range(50):  # warm-up
        loops.train_step(job, *job.batch_at(i))
    quiet, _ = timed_steps(job, 200, 50)
    clock = time.pthread_getcpuclockid(probe.server._thread.ident)
    served_before, cpu_before, wall_before = probe.server.requests_answered, time.clock_gettime(clock), time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pollers = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "probe_stress_job.py"), "poll", str(os.getpid()),
                                 "--seconds", str(seconds)], env=env, stdout=subprocess.DEVNULL) for _ in range(3)]
    time.sleep(1.0)  # the pollers' interpreters start
    polled: list[float] = []
    step = 250
    while time.monotonic() - wall_before < seconds - 0.5:
        wall, _ = timed_steps(job, 20, step)
        polled += wall
        step += 20
    for poller in pollers:
        poller.wait()
    wall = time.monotonic() - wall_before
    served = probe.server.requests_answered - served_before
    cpu = time.clock_gettime(clock) - cpu_before
    runtime.stop()
    q, p = statistics.median(quiet), statistics.median(polled)
    print(f"three pollers flat out, request bound {'on' if bounded else 'lifted'}: {served / wall:.0f} answers/s, "
          f"step {q * 1e3:.2f} ms unpolled -> {p * 1e3:.2f} ms polled ({(p / q - 1) * 100:+.1f} %), socket thread "
          f"{cpu / wall * 100:.1f} % of a core")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", choices=("overhead", "hooks", "socket", "flat-out"), help="run one part")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU, batch {BATCH}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    if args.only in (None, "overhead"):
        for activations in (True, False):
            results = [overhead(args.rounds, args.steps, activations) for _ in range(args.repeats)]
            print_overhead("probe" if activations else "probe without activations", results,
                           args.rounds, args.steps)
    if args.only in (None, "hooks"):
        time_in_hooks(400)
    if args.only in (None, "socket"):
        for _ in range(args.repeats):
            sampler_cpu(args.seconds, incremental=True)
            sampler_cpu(args.seconds, incremental=False)
    if args.only in (None, "flat-out"):
        for _ in range(args.repeats):
            for bounded in (True, False):
                flat_out(args.seconds, bounded)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
