"""Cost of the analysis per monitor refresh: trends for many processes, and the probed-process verdicts.

Builds a History of synthetic 1 s snapshots (steady, noisy, leaking, sawtooth and warming-up processes)
and times ``trends()`` cold, uncached, and with the spreading cache at one refresh per second; then
``leak_verdict`` + ``growing_sites`` + ``advise`` for one probed process. Prints figures.

    python bench/bench_analysis.py [--processes 1000] [--seconds 600]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from gputui.analysis.advice import advise
from gputui.analysis.history import History
from gputui.analysis.leaks import leak_verdict
from gputui.analysis.sites import growing_sites
from gputui.analysis.trends import TrendCache, process_trend, trends
from gputui.model import (
    AllocationSite,
    AllocatorStats,
    Device,
    GpuProcess,
    MemoryCategories,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
)

MIB = 1 << 20
GIB = 1 << 30
DEVICES = 8


def memory_at(kind: int, base: int, t: int, rng: random.Random) -> int:
    """One process's NVML memory at second t; the mix keeps every verdict path busy."""
    if kind < 60:  # steady, the common case
        return base
    if kind < 75:  # steady with page-size noise
        return base + rng.choice((-2, 0, 2)) * MIB
    if kind < 85:  # leaking 0.5 MiB/s
        return base + t * MIB // 2
    if kind < 93:  # garbage-collector sawtooth
        return base + (t % 45) * 3 * MIB
    return base + min(t, 90) * 20 * MIB  # warm-up then flat


def build_history(processes: int, seconds: int, seed: int = 0) -> tuple[History, Snapshot]:
    rng = random.Random(seed)
    kinds = [rng.randrange(100) for _ in range(processes)]
    bases = [rng.randrange(1, 8) * GIB for _ in range(processes)]
    history = History(span=seconds, max_points=seconds)
    devices = tuple(
        Device(index=i, memory_total=80 * GIB, memory_used=50 * GIB, memory_free=30 * GIB)
        for i in range(DEVICES)
    )
    snap = None
    for t in range(seconds):
        procs = tuple(
            GpuProcess(pid=1000 + p, device_index=p % DEVICES, started_at=-3600.0,
                       gpu_memory=memory_at(kinds[p], bases[p], t, rng))
            for p in range(processes)
        )
        snap = Snapshot(taken_at=float(t), devices=devices, processes=procs)
        history.add(snap)
    return history, snap


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def bench_trends(processes: int, seconds: int) -> None:
    start = time.perf_counter()
    history, snap = build_history(processes, seconds)
    print(f"built history: {processes} processes x {seconds} s in {time.perf_counter() - start:.1f} s")

    keys = list(history.process_keys())
    fetch = timed(lambda: [history.process(k, "gpu_memory") for k in keys], 3)
    print(f"History.process() for all:         median {statistics.median(fetch):7.2f} ms")
    full = timed(lambda: trends(history, snap), 3)
    print(f"trends() uncached, all processes:   median {statistics.median(full):7.2f} ms "
          f"({statistics.median(full) * 1000 / processes:.0f} us/process)")

    # A monitor refreshing once a second: the cache re-judges about a fifth of them each time.
    cache = TrendCache(every=5.0)
    cold = timed(lambda: trends(history, snap, cache=cache), 1)[0]
    steady = []
    for t in range(1, 31):
        later = Snapshot(taken_at=snap.taken_at + t, devices=snap.devices, processes=snap.processes)
        steady += timed(lambda later=later: trends(history, later, cache=cache), 1)
    print(f"trends() cached, first refresh:     {cold:7.2f} ms")
    print(f"trends() cached, 1 refresh/s:       median {statistics.median(steady):7.2f} ms, "
          f"max {max(steady):7.2f} ms over {len(steady)} refreshes")

    verdicts: dict[str, int] = {}
    for trend in trends(history, snap).values():
        verdicts[trend.verdict] = verdicts.get(trend.verdict, 0) + 1
    print(f"verdicts: {dict(sorted(verdicts.items()))}")
    one = history.process(keys[0], "gpu_memory")
    single = timed(lambda: process_trend(one, device_free=GIB), 200)
    print(f"process_trend() one steady series:  median {statistics.median(single) * 1000:7.1f} us")


def leaky_report(steps: int = 200, sites: int = 64, recorded: int = 16) -> ProbeReport:
    records = []
    for s in range(steps):
        act = 2 * GIB + s * 24 * MIB
        cats = MemoryCategories(parameters=4 * GIB, gradients=4 * GIB, optimizer_state=8 * GIB,
                                activations=act, other=256 * MIB)
        allocated = 16 * GIB + 256 * MIB + act
        records.append(StepRecord(step=s, ended_at=1000.0 + s * 0.5, duration=0.5, device="cuda:0",
                                  allocated=allocated, reserved=allocated + 2 * GIB,
                                  inactive_split=300 * MIB, alloc_retries=0,
                                  peak_forward=allocated + 6 * GIB, peak_backward=allocated + 8 * GIB,
                                  peak_optimizer=allocated + GIB, categories=cats))
    steps_rec = tuple(range(steps - recorded, steps))
    site_list = tuple(
        AllocationSite(where=f"train.py:{40 + i} in step",
                       live_bytes=tuple((i == 3) * k * 24 * MIB + 1000 * i for k in range(recorded)))
        for i in range(sites)
    )
    last = records[-1]
    return ProbeReport(
        pid=4242, taken_at=last.ended_at, steps=tuple(records), recorded_steps=steps_rec, sites=site_list,
        devices=(ProbeDevice("cuda:0", cuda_index=0,
                             allocator=AllocatorStats(allocated=last.allocated, reserved=last.reserved),
                             categories=last.categories),),
    )


def bench_probed() -> None:
    report = leaky_report()
    device = Device(index=0, memory_total=80 * GIB, memory_used=50 * GIB, memory_free=30 * GIB)
    proc = GpuProcess(pid=4242, device_index=0, gpu_memory=last_nvml(report))
    snap = Snapshot(taken_at=report.taken_at, devices=(device,), processes=(proc,))

    def all_three():
        verdict = leak_verdict(report, device_total=80 * GIB, device_free=30 * GIB)
        sites = growing_sites(report)
        return advise(snapshot=snap, process=proc, report=report, verdict=verdict, sites=sites)

    costs = timed(all_three, 50)
    advice = all_three()
    print(f"leak_verdict+growing_sites+advise ({len(report.steps)} steps, {len(report.sites)} sites): "
          f"median {statistics.median(costs):.2f} ms per probed process; first advice: {advice[0].kind}")


def bench_cpu_check() -> None:
    """The probe's own leak check on a CPU job: leak_verdict over its 128 kept measured steps,
    host memory beyond the tracked tensors included (run on the training thread, budgeted)."""
    records = tuple(
        StepRecord(step=s * 16, ended_at=1000.0 + s * 0.08, duration=0.005, device="cpu",
                   allocated=6 * MIB, categories=MemoryCategories(MIB, MIB, 4 * MIB, 0, None),
                   host_allocated=300 * MIB + s * 16 * 64 * 1024)
        for s in range(128))
    report = ProbeReport(pid=4242, taken_at=records[-1].ended_at, steps=records)
    costs = timed(lambda: leak_verdict(report), 50)
    verdict = leak_verdict(report)
    print(f"probe's leak check (CPU job, {len(records)} measured steps): median "
          f"{statistics.median(costs):.2f} ms; verdict {verdict.state} in {verdict.category}")


def last_nvml(report: ProbeReport) -> int:
    return report.steps[-1].reserved + 500 * MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=600)
    args = parser.parse_args()
    bench_trends(args.processes, args.seconds)
    bench_probed()
    bench_cpu_check()


if __name__ == "__main__":
    main()
