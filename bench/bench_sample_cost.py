"""What one sample costs the live monitor's sampling thread, part by part, on bench_vs_nvitop's machine.

The simulated driver answers as ``libnvidia-ml.so.1`` (8 H100s) for real stand-in processes (``--spawn``),
so /proc is read for real, as bench_vs_nvitop's monitors read it. Each part is timed in thread CPU
(``time.thread_time``), so a busy machine slows the parts less than the wall clock says:

    outline   NVML's devices and process lists, and the host (the early frame's picture)
    complete  /proc: each process's figures, owners, launcher parents, jobs (and the gatherer's probes,
              OOM endings)
    visible   every outside string made visible (the live monitor's Sampler does this to each snapshot)
    judge     trends, the judgements of processes and jobs, who holds the GPUs idle
    alerts    the alert rules
    history   the monitor's own history for its charts (the UI thread's HostState.take)

    python bench/bench_sample_cost.py                    # 64 processes, 80 samples a second apart
    python bench/bench_sample_cost.py --processes 1000 --samples 40
    python bench/bench_sample_cost.py --profile 20       # and cProfile's top functions over the samples

The first sample is shown apart (a process's first look, the modules the judgements load); the steady
mean leaves out the first 35 samples: the memory trends judge every process each sample until it has
30 s of history, then each one every 5 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("outline", "complete", "visible", "judge", "alerts", "history")
SETTLED = 35  # samples left out of the steady mean


def run(samples: int, profile: int) -> dict[str, list[float]]:
    """Sample the simulated machine (this process's environment names it) and time each part."""
    import cProfile
    import pstats

    from gputui.alerts.alerting import Alerting
    from gputui.collect import open_collector
    from gputui.link.client import ProbeWatcher
    from gputui.model.alert import AlertSettings
    from gputui.sample.gather import Gatherer
    from gputui.sample.judge import Judge
    from gputui.sample.probes import Watched
    from gputui.sample.state import HostState
    from gputui.untrusted import visible_all

    collector = open_collector(None)
    gatherer = Gatherer(collector, reports=(Watched(ProbeWatcher()),), probed=collector.probed,
                        jobs=collector.jobs)
    judge, state = Judge(), HostState()
    alerting = Alerting(AlertSettings(), lambda text: None)
    times: dict[str, list[float]] = {part: [] for part in PARTS}
    profiler = cProfile.Profile()
    outlined: list[float] = []  # when the gatherer showed NVML's picture (the early frame's)

    def mark(picture: object) -> None:
        outlined.append(time.thread_time())

    try:
        for i in range(samples):
            began = time.monotonic()
            if i == samples - profile:
                profiler.enable()
            start = time.thread_time()
            snapshot = gatherer.sample(mark)
            done, middle = time.thread_time(), outlined.pop()
            times["outline"].append(middle - start)
            times["complete"].append(done - middle)
            start = time.thread_time()
            snapshot = visible_all(snapshot)
            times["visible"].append(time.thread_time() - start)
            start = time.thread_time()
            sample = judge(snapshot)
            times["judge"].append(time.thread_time() - start)
            start = time.thread_time()
            alerting(sample.snapshot, sample.judgements)
            times["alerts"].append(time.thread_time() - start)
            start = time.thread_time()
            state.take(sample)
            times["history"].append(time.thread_time() - start)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    finally:
        profiler.disable()
        gatherer.close()
        alerting.close(0)
    if profile:
        # SORT=cumulative FILTER=nvml: the driver's calls, by their whole cost
        stats = pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "tottime"))
        stats.print_stats(os.environ.get("FILTER", ""), 25)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--samples", type=int, default=80)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile the last N samples")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # the measured child
    args = parser.parse_args()
    if args.inside:
        times = run(args.samples, args.profile)
        steady = slice(min(SETTLED, args.samples - 1), None)
        print(f"{'part':10} {'first sample':>13} {'steady mean':>12} {'median':>8}")
        for part in (*PARTS, "total"):
            values = times[part] if part != "total" else [sum(v) for v in zip(*times.values())]
            print(f"{part:10} {1000 * values[0]:10.2f} ms {1000 * statistics.mean(values[steady]):9.2f} ms "
                  f"{1000 * statistics.median(values[steady]):5.2f} ms")
        return 0
    sys.path.insert(0, str(ROOT))
    from bench_tui import machine_load
    from bench_vs_nvitop import SCENARIO, feeder

    from gputui.collect.sim.native import STATE_VARIABLE, build

    work = Path(tempfile.mkdtemp(prefix="gputui-sample-cost-"))
    probes = work / "probes"
    probes.mkdir(mode=0o700)  # a probe directory of its own: no other job's probes are asked
    library = build(work / "lib").parent
    state = work / "state"
    feed = feeder(state, args.processes)
    print(f"{SCENARIO} (8 GPUs) x {args.processes} processes, {args.samples} samples 1 s apart, "
          f"{os.cpu_count()} CPUs, {machine_load()}", flush=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(library), STATE_VARIABLE: str(state),
           "GPUTUI_PROBE_DIR": str(probes), "PYTHONPATH": str(ROOT)}
    try:
        child = subprocess.run([sys.executable, __file__, "--inside", "--samples", str(args.samples),
                                "--profile", str(args.profile)], env=env, check=False)
    finally:
        feed.send_signal(signal.SIGTERM)
        feed.wait(timeout=30)
    print(machine_load())
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
