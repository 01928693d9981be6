"""A seeded CPU training job that never imports gputui, for the attach tests and bench/bench_attach.py.

``python attach_job.py HOLD_DIR STEPS...``: trains the first count of steps, then waits (running
Python, so queued code runs) while HOLD_DIR/1 exists, trains the next count, waits while HOLD_DIR/2
exists, and so on. At each hold it prints one JSON line: the steps so far and the true parameter,
gradient and AdamW state bytes, and the phase's median step time; from the second on, the longest
gap in the previous hold's loop (the pause an attach or detach there cost the job). At the end: the
final loss, exactly (float.hex). ATTACH_JOB=loader: the batches come from a DataLoader's two forked
workers, alive across the holds; ATTACH_JOB=compile: the model is torch.compile'd (aot_eager).
ATTACH_DEVICE=cuda: the model, its optimizer and each batch on the GPU (bench/validate_gpu_jobs.py).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
from probe_truth import state_tensors, storage_bytes  # (beside this file: torch alone, no gputui)
from torch import nn


def main(hold_dir: str, counts: list[int]) -> None:
    torch.manual_seed(0)
    device = torch.device(os.environ.get("ATTACH_DEVICE", "cpu"))
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(512, 64), torch.randint(0, 10, (512,))
    batches = _batches(inputs, targets, os.environ.get("ATTACH_JOB", ""))
    if os.environ.get("ATTACH_JOB") == "compile":
        model = torch.compile(model, backend="aot_eager")
    loss, step, gap = None, 0, None
    for phase, count in enumerate(counts, start=1):
        times = []
        for _ in range(count):
            started = time.perf_counter()
            x, y = (t.to(device) for t in next(batches))
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            times.append(time.perf_counter() - started)
        figures = {"steps": step, "step_ms": 1000 * statistics.median(times) if times else None, "gap_ms": gap}
        hold = os.path.join(hold_dir, str(phase))
        if phase < len(counts) and os.path.exists(hold):
            print(json.dumps({
                "hold": phase, "pid": os.getpid(), **figures,
                "parameters": sum(p.untyped_storage().nbytes() for p in model.parameters()),
                "gradients": sum(p.grad.untyped_storage().nbytes() for p in model.parameters()),
                "optimizer_state": storage_bytes(state_tensors(optimizer, device.type)),
            }), flush=True)
            gap, last = 0.0, time.perf_counter()
            while os.path.exists(hold):
                time.sleep(0.001)
                now = time.perf_counter()
                gap, last = max(gap, 1000 * (now - last)), now
    print(json.dumps({"loss": loss.item().hex() if loss is not None else None, **figures}), flush=True)


def _batches(inputs, targets, kind: str):
    """The same batches, in the same order, sliced here or from a DataLoader's forked workers."""
    if kind == "loader":
        data = torch.utils.data.TensorDataset(inputs[:480], targets[:480])
        loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=2, multiprocessing_context="fork")
        while True:
            yield from loader
    step = 0
    while True:
        batch = slice(step * 32 % 480, step * 32 % 480 + 32)
        yield inputs[batch], targets[batch]
        step += 1


if __name__ == "__main__":
    main(sys.argv[1], [int(n) for n in sys.argv[2:]])
