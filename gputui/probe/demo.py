"""``gputui demo-train``: a small real training loop with the probe in it, to watch from another pane.

An MLP with Adam on random data, on CUDA where the process can use a GPU (the real allocator then),
on the CPU otherwise. ``--leak KIND`` adds one of the classic leaks, so a user can watch the monitor
catch it, name the category and, once the probe has recorded allocation sites, the line.
"""

from __future__ import annotations

import time

EVERY = 200  # steps between progress lines

# What each leak keeps every step, and what the monitor should say about it.
LEAKS = {
    "graph": "keeps each step's evaluation loss with its graph (total_loss += loss): "
             "an activations leak",
    "outputs": "appends each step's evaluation output, graph and all, to a list: "
               "an activations leak",
    "cache": "stores a new tensor per step in a dict that is never emptied: a leak of other tensors",
}


def leak_kind(value) -> str | None:
    """The leak asked for: None, a kind, or True (a bare ``--leak``) for the graph leak."""
    if value is None or value is False:
        return None
    if value is True:
        return "graph"
    if value not in LEAKS:
        from gputui.errors import UserError

        raise UserError(f"unknown leak {value!r}; choose one of: {', '.join(LEAKS)}")
    return value


class Leak:
    """Holds what the chosen leak keeps alive, and adds to it after each step."""

    def __init__(self, kind: str | None):
        self.kind = kind
        self.total_loss = 0.0
        self.outputs: list = []
        self.cache: dict = {}

    def after_step(self, step: int, model, loss_fn, x, y) -> None:
        if self.kind == "graph":
            self.total_loss = self.total_loss + loss_fn(model(x), y)  # evaluated with grad: kept
        elif self.kind == "outputs":
            self.outputs.append(model(x))  # still carries grad_fn (use .detach())
        elif self.kind == "cache":
            self.cache[step] = x * 1.0  # a new tensor every step, never evicted


def demo_train(options) -> int:
    kind = leak_kind(options.demo_train.leak)
    import torch
    from torch import nn

    from gputui.probe import runtime

    steps = options.demo_train.steps
    device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = runtime.start(via="demo")
    where = probe.server.path if probe.server is not None else "no socket (see problems)"
    print(f"gputui demo-train: pid {probe.pid}, training an MLP with Adam on {device}; "
          f"the probe listens on {where}.")
    if kind is not None:
        print(f"The loop {LEAKS[kind]}. Within a few dozen steps the monitor should call it a leak; "
              f"the probe then records allocation sites for a few steps to name the line.")
    print(f"Watch it: run `gputui` in another pane (or `gputui probe {probe.pid}`). Ctrl-C stops.",
          flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(4096, 256, device=device)
    targets = torch.randint(0, 10, (4096,), device=device)
    loss_fn = nn.functional.cross_entropy
    leak = Leak(kind)
    step, started = 0, time.perf_counter()
    try:
        while steps is None or step < steps:
            start = (step * 64) % (len(inputs) - 64)
            x, y = inputs[start:start + 64], targets[start:start + 64]
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            leak.after_step(step, model, loss_fn, x, y)
            step += 1
            if step % EVERY == 0 or step == steps:
                print(progress(probe, step, loss.item(), time.perf_counter() - started), flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {step} steps")
    finally:
        del leak
        runtime.stop()
    return 0


def memory_now(steps) -> str:
    """The latest figure a leak verdict is judged on: allocated on CUDA, the C heap in use on CPU."""
    for s in reversed(steps):
        if s.device is not None and s.device.startswith("cuda") and s.allocated is not None:
            return f"allocated {s.allocated / 2**20:.1f} MiB"
        if s.host_allocated is not None:
            return f"heap in use {s.host_allocated / 2**20:.1f} MiB"
    return "memory not read yet"


def progress(probe, step: int, loss: float, elapsed: float) -> str:
    """One progress line: the step, the loss, the pace, the probe's latest figures and verdict."""
    line = (f"step {step:6d}  loss {loss:.4f}  {elapsed / step * 1e3:.1f} ms/step  "
            f"{memory_now(probe.board.records())}")
    if probe.leak_state is not None:
        line += f"  probe's verdict: {probe.leak_state.replace('_', ' ')}"
    sites = probe.sites.sites()
    if sites and probe.sites.recorded_steps:
        line += f"  (sites recorded over {len(probe.sites.recorded_steps)} steps)"
    return line
