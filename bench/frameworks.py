"""The probe on real framework jobs, on CPU, against the truth summed inside each job, as Markdown tables.

Runs the in-process jobs of tests/framework_jobs.py (transformers' Trainer on GPT-2 and BERT, PEFT LoRA,
accelerate, Lightning's closure, torch.compile, activation checkpointing) with every step measured, and
the 2-rank gloo jobs of tests/sharded_job.py (DDP, FSDP1, FSDP2, DeepSpeed ZeRO-1/2/3), and prints the
probe's figures at the last step beside the truth, whether every step matched, the phase peaks, and the
probe's cost to the step time: the same job run without the probe and with it at its default budget,
alternately, the lowest per-run medians of the time between optimizer steps compared (in-process jobs only).

    python bench/frameworks.py [--device cuda] [--repeats N] [--steps N] [JOB ...]

On CUDA (a GPU machine) the categories are still held storages, summed exactly; the phase peaks and the
activations are the allocator's, which also counts what the truth cannot see (temporaries, cuBLAS's
workspace), so there a step counts as exact when its categories are, and the peaks are shown beside the
truth's storage sums for reading.

A framework that is not installed is left out with a line that says so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARDED = ("ddp", "fsdp1", "fsdp2", "zero1", "zero2", "zero3")
CATEGORIES = ("parameters", "gradients", "optimizer_state", "buffers")


def figure(probe: int | None, truth: int) -> str:
    """One figure: the bytes when the probe's equal the truth's, both otherwise."""
    return f"{truth:,}" if probe == truth else f"**{'n/a' if probe is None else f'{probe:,}'} vs {truth:,}**"


def step_rows(run, categories_only: bool = False) -> tuple[list[str], int]:
    """The last step's categories and activations (probe vs truth), and how many steps matched in all
    (``categories_only``: in their categories)."""
    matched = 0
    for step, truth in zip(run.report.steps, run.truth):
        if step.categories is None:  # (a step the probe did not measure)
            continue
        probe = tuple(getattr(step.categories, c) for c in CATEGORIES)
        peaks = (step.peak_forward, step.peak_backward, step.peak_optimizer)
        phases = peaks == (truth.forward, truth.backward, truth.optimizer) and step.activations_peak == run.activations
        if probe == tuple(truth.categories.values()) and (categories_only or phases):
            matched += 1
    last, truth = run.report.steps[-1], run.truth[-1]
    cells = [figure(getattr(last.categories, c, None), truth.categories[c]) for c in CATEGORIES]
    cells.append(figure(last.activations_peak, run.activations))
    peaks = " / ".join(figure(p, t) for p, t in ((last.peak_forward, truth.forward),
                                                  (last.peak_backward, truth.backward),
                                                  (last.peak_optimizer, truth.optimizer)))
    return cells + [peaks], matched


def overhead(job, steps: int, repeats: int) -> str:
    """The probe's cost at its default budget, runs with and without it alternated: the lowest of each
    side's per-run median step times (a shared machine's other load only ever adds to a run's)."""
    from gputui.probe.budget import DEFAULT_BUDGET

    if repeats == 0:
        return "not timed"
    best = {False: float("inf"), True: float("inf")}
    for _ in range(repeats):
        for on in (False, True):
            run = job(budget=DEFAULT_BUDGET if on else None, watch=False, steps=steps)
            best[on] = min(best[on], statistics.median(run.step_seconds[2:]))  # (past the warm-up)
    off, on = best[False], best[True]
    return f"{1000 * off:.1f} / {1000 * on:.1f} ms ({100 * (on / off - 1):+.1f} %)"


def in_process(names: list[str], steps: int, repeats: int, categories_only: bool) -> list[str]:
    import framework_jobs

    lines = []
    for name in names:
        job, needs = framework_jobs.JOBS[name]
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            lines.append(f"| {name} | not installed: {', '.join(missing)} |")
            continue
        try:
            run = job()
        except Exception as exc:  # (a finding on a new device or version: the other jobs still run)
            lines.append(f"| {name} | **failed: {type(exc).__name__}: {str(exc)[:300]}** |")
            continue
        cells, matched = step_rows(run, categories_only)
        lines.append(f"| {run.name} | {run.checked} | " + " | ".join(cells)
                     + f" | {matched}/{len(run.truth)} | {overhead(job, steps, repeats)} |")
    return lines


def sharded(kinds: list[str], device: str) -> list[str]:
    from test_frameworks_sharded import run_job

    lines, where = [], "" if device == "cpu" else f", both on {device}:0"
    for kind in kinds:
        if kind.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
            lines.append(f"| {kind} | not installed: deepspeed |")
            continue
        with tempfile.TemporaryDirectory() as out:
            try:
                ranks = run_job(kind, Path(out))
            except (AssertionError, OSError, ValueError) as exc:  # (the job failed: its stderr's end)
                lines.append(f"| {kind} | **failed: {str(exc)[-600:]}** |".replace("\n", " "))
                continue
        for index, rank in enumerate(ranks):
            report = rank["report"]
            step = report["steps"][-1]["categories"]
            cells = [figure(step.get(c), rank["truth"][c]) for c in CATEGORIES[:3]]
            gathered = step.get("gathered")
            lines.append(f"| {kind} rank {index} | 2 ranks, gloo, Adam{where} | " + " | ".join(cells)
                         + f" | {'n/a' if gathered is None else f'{gathered:,}'} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="*", help="jobs to run (default: all)")
    parser.add_argument("--steps", type=int, default=30, help="steps of each run that times the probe's cost")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs with and without the probe, alternated (0: not timed)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the jobs train")
    args = parser.parse_args()
    # (read by the jobs' modules as they are imported, and by the sharded jobs' own processes)
    os.environ.update(FRAMEWORK_JOB_DEVICE=args.device, SHARDED_JOB_DEVICE=args.device)

    sys.path.insert(0, str(ROOT / "tests"))  # the jobs live with their tests
    import framework_jobs
    import torch

    known = list(framework_jobs.JOBS) + list(SHARDED)
    unknown = [j for j in args.jobs if j not in known]
    if unknown:
        parser.error(f"unknown jobs {unknown}; known: {', '.join(known)}")
    chosen = args.jobs or known
    torch.set_num_threads(1)
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # (the Trainer prints its own figures)
        local = in_process([j for j in chosen if j in framework_jobs.JOBS], args.steps, args.repeats,
                           categories_only=args.device != "cpu")
        ranks = sharded([j for j in chosen if j in SHARDED], args.device)
    where = "CPU, one thread" if args.device == "cpu" else \
        f"{torch.cuda.get_device_name()}, steps exact in their categories (peaks: the allocator's vs storages)"
    print(f"torch {torch.__version__}, {where}; {time.perf_counter() - started:.0f} s. Bytes; a figure "
          "alone where the probe's equals the truth, **probe vs truth** where not.")
    print()
    print("| framework | checked | parameters | gradients | optimizer state | buffers | activations (peak) "
          "| phase peaks fwd / bwd / opt | steps exact | step time without / with the probe |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    print("\n".join(local))
    if ranks:
        print()
        print("| sharded job | checked | parameters | gradients | optimizer state | gathered |")
        print("|---|---|--:|--:|--:|--:|")
        print("\n".join(ranks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
