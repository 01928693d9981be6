"""``gputui estimate`` against a real CPU training step of the same job, as docs/estimate.md's table.

Runs tests/estimate_truth.py's comparison for the six example jobs (examples/estimate_models.py) and,
where transformers is installed, examples/estimate_hf.py's GPT-2, BERT and Llama: the estimate on the
meta device for the CPU, the real step's live tensor bytes, and the probe's record of it.

    python bench/estimate_table.py [KIND ...]
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def error(estimate: int, truth: int | None) -> str:
    if truth is None:
        return "n/a"
    if estimate == truth:
        return "0"
    return f"{100 * (estimate - truth) / truth:+.1f}"


def main() -> int:
    import torch

    sys.path.insert(0, str(ROOT / "tests"))  # the comparison lives with its test
    from estimate_truth import HF_MODELS, MODELS, PHASES, STATIC, compare

    kinds = sys.argv[1:] or [*MODELS, *(HF_MODELS if importlib.util.find_spec("transformers") else ())]
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows = []
    for kind in kinds:
        c = compare(kind)
        static = c.estimated_static()
        rows += [(kind, name, static[name], c.probe_static[name], None) for name in STATIC]
        rows.append((kind, "activations (peak)", c.estimated_activations(), c.probe_activations, None))
        estimated, real = c.estimated_peaks(), c.real_peaks()
        rows += [(kind, f"{phase} peak", estimated[phase], real[phase], c.probe_peaks[phase])
                 for phase in PHASES]
    print(f"torch {torch.__version__}, CPU, one thread; {time.perf_counter() - started:.1f} s")
    print()
    print("| model | figure | estimate | measured | error % | probe's boundary reading |")
    print("|---|---|--:|--:|--:|--:|")
    for kind, figure, estimate, measured, boundary in rows:
        shown = "" if boundary is None else f"{boundary:,}"
        print(f"| {kind} | {figure} | {estimate:,} | {measured:,} | {error(estimate, measured)} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
