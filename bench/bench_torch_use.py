"""What telling a PyTorch process from its memory map costs the monitor (GpuProcess.uses_torch).

The collector reads /proc/PID/maps once per process life, stopping at the first libtorch line. This
prints that read's time for a process with torch loaded (this one, after ``import torch``) and one
without (a plain Python child), beside what a user would reach for instead in the same run: psutil's
memory_maps() (the smaps-based list of every mapping), and the monitor's usual per-sample cost of a
process (psutil's oneshot CPU times, memory and status).

    python bench/bench_torch_use.py [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from gputui.collect.torch_use import torch_mapped  # noqa: E402


def per_call(fn, repeat: int) -> float:
    """Median milliseconds of ``fn()`` over ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * sorted(times)[len(times) // 2]


def sample_cost(pid: int) -> None:
    process = psutil.Process(pid)
    with process.oneshot():
        process.cpu_times()
        process.memory_info()
        process.status()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    import torch  # noqa: F401 - this process becomes a torch process

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.3)
    try:
        print(f"{'process':<28} {'lines':>6} {'maps read':>10} {'memory_maps()':>14} {'one sample':>11}  ratio")
        for name, pid in (("torch loaded (this one)", os.getpid()), ("plain Python child", child.pid)):
            with open(f"/proc/{pid}/maps", "rb") as maps:
                lines = sum(1 for _ in maps)
            ours = per_call(functools.partial(torch_mapped, pid), args.repeat)
            theirs = per_call(lambda pid=pid: psutil.Process(pid).memory_maps(), max(5, args.repeat // 10))
            sample = per_call(functools.partial(sample_cost, pid), args.repeat)
            print(f"{name:<28} {lines:>6} {ours:>8.3f}ms {theirs:>12.3f}ms {sample:>9.3f}ms  "
                  f"memory_maps()/ours {theirs / ours:.0f}x; ours = {ours / sample:.1f} samples, once per process")
        # A CUDA job maps thousands of regions; the worst case puts libtorch last.
        with tempfile.TemporaryDirectory() as root:
            Path(root, "1").mkdir()
            line = "7f2a10000000-7f2a10021000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
            Path(root, "1", "maps").write_text(line * 20000 + line.replace("libcuda.so.1", "libtorch_cuda.so"))
            big = per_call(lambda: torch_mapped(1, root), args.repeat)
            print(f"{'20001 lines, libtorch last':<28} {20001:>6} {big:>8.3f}ms  (a file, not the kernel's map: "
                  f"the read alone)")
    finally:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
