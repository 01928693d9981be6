"""A plain PyTorch training loop (an MLP with Adam on random data), with no probe code in it.

Watch its memory without changing it:  gputui run -- python examples/train.py
and run ``gputui`` in another pane. Uses CUDA when there is a GPU, the CPU otherwise.
"""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description="a small MLP training loop")
    parser.add_argument("--steps", type=int, default=0, help="stop after N steps (default: never)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--every", type=int, default=100, help="print a line every N steps")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(4096, 256, device=args.device)
    targets = torch.randint(0, 10, (4096,), device=args.device)

    step, started = 0, time.perf_counter()
    while args.steps == 0 or step < args.steps:
        start = (step * args.batch) % (len(inputs) - args.batch)
        x, y = inputs[start:start + args.batch], targets[start:start + args.batch]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        if step % args.every == 0:
            per_step = (time.perf_counter() - started) / step * 1e3
            print(f"step {step:6d}  loss {loss.item():.4f}  {per_step:.1f} ms/step", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
