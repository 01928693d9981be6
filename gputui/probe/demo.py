"""``gputui demo-train``: a small real training loop with the probe in it, to watch from another pane.

An MLP with Adam on random data, on CUDA where the process can use a GPU (the real allocator then),
on the CPU otherwise; ``--leak`` keeps each step's evaluation loss with its graph, the classic leak.
"""

from __future__ import annotations

import time

EVERY = 200  # steps between progress lines


def demo_train(options) -> int:
    import torch
    from torch import nn

    from gputui.probe import runtime

    steps = options.extra.get("steps")
    leak = bool(options.extra.get("leak"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = runtime.start(via="demo")
    where = probe.server.path if probe.server is not None else "no socket (see problems)"
    print(f"gputui demo-train: pid {probe.pid}, training an MLP with Adam on {device}"
          f"{' with a leak' if leak else ''}; the probe listens on {where}.")
    print(f"Watch it: run `gputui` in another pane (or `gputui probe {probe.pid}`). Ctrl-C stops.",
          flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(4096, 256, device=device)
    targets = torch.randint(0, 10, (4096,), device=device)
    kept = 0.0  # the leak keeps its graphs here
    step, started = 0, time.perf_counter()
    try:
        while steps is None or step < steps:
            start = (step * 64) % (len(inputs) - 64)
            x, y = inputs[start:start + 64], targets[start:start + 64]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if leak:
                kept = kept + nn.functional.cross_entropy(model(x), y)  # evaluated with grad: kept
            step += 1
            if step % EVERY == 0 or step == steps:
                measured = [s for s in probe.tracker.steps[-50:] if s.allocated is not None]
                allocated = f"{measured[-1].allocated / 2**20:.1f} MiB" if measured else "?"
                per_step = (time.perf_counter() - started) / step * 1e3
                print(f"step {step:6d}  loss {loss.item():.4f}  {per_step:.1f} ms/step  "
                      f"allocated {allocated}", flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {step} steps")
    finally:
        del kept
        runtime.stop()
    return 0
