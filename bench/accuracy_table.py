"""The probe's breakdown against the truth on eight kinds of training loop, as a Markdown table.

Runs the loops of tests/integration/test_probe_accuracy.py (a CNN with BatchNorm, an LSTM language model, a
tied-weight LM, a small GPT with gradient accumulation, a GAN with two optimizers, a frozen backbone,
a loop with no optimizer, LBFGS), each a few tiny steps on the CPU under the probe with every step
measured, and prints what the probe reported beside the truth computed in the same process:
parameters, gradients, optimizer state and buffers at the end of the latest step (for the loop with
no optimizer, which has no steps, in a fresh reading), and activations at their peak in that step.

    python bench/accuracy_table.py [--now] [KIND ...]

--now adds the rows of a fresh reading taken after each loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def error(probe: int | None, truth: int) -> str:
    if probe is None:
        return "n/a"
    if probe == truth:
        return "0"
    if truth == 0:
        return "inf"
    return f"{100 * (probe - truth) / truth:+.2f}"


def rows(kind: str, m, now: bool) -> list[tuple]:
    """(kind, category, probe, truth) rows for one loop's Measured."""
    out = []
    if m.step is not None:
        out += [(kind, c, *m.step[c]) for c in m.step]
        out.append((kind, "activations (peak)", *m.activations))
        if now:
            out += [(kind, f"{c} (now)", *m.now[c]) for c in m.now]
    else:  # no steps: the fresh reading is all a monitor gets
        out += [(kind, f"{c} (now)", *m.now[c]) for c in m.now]
        out.append((kind, "activations (now)", *m.activations))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", help="loops to run (default: all)")
    parser.add_argument("--now", action="store_true", help="add the fresh reading's rows")
    args = parser.parse_args()

    import torch

    # The loops live with their test, which tests/ keeps; the bench reads them from there.
    sys.path.insert(0, str(ROOT / "tests"))
    import test_probe_accuracy as accuracy

    unknown = [k for k in args.kinds if k not in accuracy.SCENARIOS]
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {', '.join(accuracy.SCENARIOS)}")
    torch.set_num_threads(1)
    started = time.perf_counter()
    table = []
    for kind in args.kinds or accuracy.SCENARIOS:
        table += rows(kind, accuracy.measure(kind), args.now)
    elapsed = time.perf_counter() - started

    print(f"torch {torch.__version__}, CPU, one thread, {accuracy.STEPS} steps per loop, budget 1.0; "
          f"{elapsed:.1f} s")
    print()
    print("| model kind | category | probe | truth | error % |")
    print("|---|---|--:|--:|--:|")
    for kind, category, probe, truth in table:
        shown = "n/a" if probe is None else f"{probe:,}"
        print(f"| {kind} | {category} | {shown} | {truth:,} | {error(probe, truth)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
