"""A seeded CPU training job that never imports gputui, for the attach tests and bench/bench_attach.py.

``python attach_job.py HOLD_DIR STEPS...``: trains the first count of steps, then waits (running
Python, so queued code runs) while HOLD_DIR/1 exists, trains the next count, waits while HOLD_DIR/2
exists, and so on. At each hold it prints one JSON line: the steps so far and the true parameter,
gradient and AdamW state bytes. At the end: the final loss, exactly (float.hex), and the mean step time.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from torch import nn


def state_bytes(optimizer) -> int:
    return sum(t.untyped_storage().nbytes() for state in optimizer.state.values()
               for t in state.values() if isinstance(t, torch.Tensor))


def main(hold_dir: str, counts: list[int]) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(512, 64), torch.randint(0, 10, (512,))
    loss, step, spent = None, 0, 0.0
    for phase, count in enumerate(counts, start=1):
        for _ in range(count):
            started = time.perf_counter()
            batch = slice(step * 32 % 480, step * 32 % 480 + 32)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
            loss.backward()
            optimizer.step()
            step += 1
            spent += time.perf_counter() - started
        hold = os.path.join(hold_dir, str(phase))
        if phase < len(counts) and os.path.exists(hold):
            print(json.dumps({
                "hold": phase, "pid": os.getpid(), "steps": step,
                "parameters": sum(p.untyped_storage().nbytes() for p in model.parameters()),
                "gradients": sum(p.grad.untyped_storage().nbytes() for p in model.parameters()),
                "optimizer_state": state_bytes(optimizer),
            }), flush=True)
            while os.path.exists(hold):
                time.sleep(0.005)
    print(json.dumps({"loss": loss.item().hex() if loss is not None else None, "steps": step,
                      "step_ms": 1000 * spent / max(step, 1)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(n) for n in sys.argv[2:]])
