"""Small PyTorch training loops that leak memory in the classic ways, and clean ones that only look like it.

Plain PyTorch, no probe code: run one under the probe (``gputui run -- python examples/loops.py
total_loss --steps 300``) or call the functions from tests. Leaky: ``total_loss += loss`` on a loss that
never went through backward keeps every step's graph with its activations; ``outputs`` keeps outputs
that still carry grad_fn; ``cache`` fills a dict of tensors
without bound. Clean: ``clean``, ``warmup`` (batch grows for a few steps, then steady),
``bounded_cache`` (a dataset cache that grows until it holds every sample), ``sawtooth`` (graphs held
in reference cycles, freed each time the garbage collector runs).
"""

from __future__ import annotations

import argparse
import gc
from dataclasses import dataclass

import torch
from torch import nn

LEAKY = ("total_loss", "outputs", "cache")
CLEAN = ("clean", "warmup", "bounded_cache", "sawtooth")


@dataclass
class Job:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: torch.Tensor
    targets: torch.Tensor
    batch: int

    def batch_at(self, step: int, size: int | None = None):
        size = size or self.batch
        start = (step * size) % (len(self.inputs) - size)
        return self.inputs[start:start + size], self.targets[start:start + size]


def make_job(*, device: str = "cpu", seed: int = 0, features: int = 256, width: int = 512,
             classes: int = 10, batch: int = 64, samples: int = 4096) -> Job:
    """An MLP classifier with Adam on random data: about 5 ms a step on a laptop CPU."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(features, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, classes),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(samples, features, device=device)
    targets = torch.randint(0, classes, (samples,), device=device)
    return Job(model, optimizer, inputs, targets, batch)


def train_step(job: Job, x, y):
    job.optimizer.zero_grad()
    out = job.model(x)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    job.optimizer.step()
    return out, loss


def clean(job: Job, steps: int):
    for step in range(steps):
        _, loss = train_step(job, *job.batch_at(step))
    return loss.item()


def leak_total_loss(job: Job, steps: int):
    total_loss = 0.0
    for step in range(steps):
        train_step(job, *job.batch_at(step))
        x, y = job.batch_at(step + 1)
        val_loss = nn.functional.cross_entropy(job.model(x), y)  # evaluated with grad enabled
        total_loss += val_loss  # the leak: keeps every step's graph alive (use val_loss.item())
    return total_loss


def leak_outputs(job: Job, steps: int):
    predictions = []
    for step in range(steps):
        train_step(job, *job.batch_at(step))
        out = job.model(job.batch_at(step + 1)[0])
        predictions.append(out)  # the leak: out still carries grad_fn (use out.detach())
    return predictions


def leak_cache(job: Job, steps: int):
    cache = {}
    for step in range(steps):
        x, y = job.batch_at(step)
        _, loss = train_step(job, x, y)
        cache[step] = x * 1.0  # the leak: a new tensor per step, never evicted
    return cache


def warmup(job: Job, steps: int):
    for step in range(steps):
        size = job.batch * min(step + 1, 4) // 4  # the batch grows over 4 steps, then stays
        _, loss = train_step(job, *job.batch_at(step, size))
    return loss.item()


def bounded_cache(job: Job, steps: int, distinct: int = 8):
    cache = {}
    for step in range(steps):
        key = step % distinct
        if key not in cache:
            cache[key] = job.batch_at(key)[0] * 1.0  # fills up over `distinct` steps, then stable
        _, loss = train_step(job, cache[key], job.batch_at(key)[1])
    return cache


def sawtooth(job: Job, steps: int, period: int = 8):
    enabled = gc.isenabled()
    gc.disable()  # the collector runs every `period` steps, as it would now and then on its own
    try:
        for step in range(steps):
            train_step(job, *job.batch_at(step))
            holder = {"scores": job.model(job.batch_at(step + 1)[0])}  # carries its graph
            holder["self"] = holder  # a reference cycle: only the garbage collector frees it
            if step % period == period - 1:
                gc.collect()
    finally:
        if enabled:
            gc.enable()
    return step


LOOPS = {
    "clean": clean, "warmup": warmup, "bounded_cache": bounded_cache, "sawtooth": sawtooth,
    "total_loss": leak_total_loss, "outputs": leak_outputs, "cache": leak_cache,
}


def run(kind: str, steps: int, *, device: str = "cpu", seed: int = 0):
    """Run one loop by name for ``steps`` steps on a fresh job; returns what the loop kept."""
    return LOOPS[kind](make_job(device=device, seed=seed), steps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(LOOPS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    run(args.kind, args.steps, device=args.device)
    print(f"{args.kind}: {args.steps} steps done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
