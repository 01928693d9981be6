"""What each gputui module the live monitor imports costs in resident memory, above the bare Textual floor.

Imports Textual's App, pynvml and psutil (bench_vs_nvitop's floor), then each named module (default: those the
live monitor loads, read from ``python -X importtime`` output given with ``--importtime FILE``, or the given
names) in turn, printing the VmRSS growth each import causes (with what it imports that is not yet loaded).

    python -X importtime -m gputui --demo 2>/tmp/imp.txt   # quit after the first frame
    python bench/bench_imports.py --importtime /tmp/imp.txt --top 25
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import sys
from pathlib import Path


def resident_kb() -> int:
    """VmRSS of this process now, in kB."""
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0])


def from_importtime(path: Path) -> list[str]:
    """gputui's top-level module names in the order ``-X importtime`` saw them finish."""
    names = []
    for line in path.read_text().splitlines():
        found = re.search(r"\|\s*(gputui[\w.]*)\s*$", line)
        if found and found.group(1) not in names:
            names.append(found.group(1))
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*")
    parser.add_argument("--importtime", type=Path, help="-X importtime output of a gputui run")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    names = args.modules or from_importtime(args.importtime)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import psutil  # noqa: F401
    import pynvml  # noqa: F401
    from textual.app import App  # noqa: F401

    gc.collect()
    floor = before = resident_kb()
    costs = []
    for name in names:
        importlib.import_module(name)
        gc.collect()
        now = resident_kb()
        costs.append((now - before, name))
        before = now
    for kb, name in sorted(costs, reverse=True)[: args.top]:
        print(f"  {kb:6d} kB  {name}")
    print(f"all {len(names)} modules: {(before - floor) / 1024:.2f} MiB above the floor ({floor / 1024:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
