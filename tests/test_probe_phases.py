"""The seed question from a real loop: why memory jumps after forward, after backward and at the first
optimizer.step(). The first steps' records outlive the window of recent steps, and each phase's peak is
what the probe tracks at its boundaries (CPU). A closure's passes (LBFGS, Lightning): test_probe_frameworks.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gputui.analysis.phases import headline, phase_account  # noqa: E402
from gputui.probe import runtime  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_the_first_step_is_kept_and_says_where_its_peak_comes_from():
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    probe = runtime.start(serve=False, budget=1.0, max_steps=20)
    try:
        for _ in range(200):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        steps = probe.report().steps
    finally:
        runtime.stop()
    params = param_bytes(model)
    assert params == (64 * 256 + 256 + 256 * 10 + 10) * 4  # 75.0 KiB
    # Steps 1 and 2 stay in front of the 128 measured steps kept beyond the window of the last 20.
    assert [s.step for s in steps] == [1, 2] + list(range(73, 201))
    first = steps[0]
    assert first.allocated_at_start == params  # the model, before its first forward pass
    assert first.categories.optimizer_state == 2 * params + 4 * 4  # Adam's moments, and 4 step counters
    # Forward: the model plus what it saved; backward: plus gradients; optimizer.step(): plus the state.
    assert first.peak_forward == params + first.activations_peak
    assert first.peak_optimizer == first.allocated == 4 * params + 16
    account = phase_account(first, None, cpu=True)
    assert headline(account) == "Step 1 peaks in optimizer.step() at 300 KiB"
    assert "left behind: gradients +75.0 KiB, optimizer state +150 KiB (created at this step)" in account.lines
    assert account.lines[0] == "started at 75.0 KiB (the model: 75.0 KiB)"
    # Later steps start with the state already there, and add no new state.
    later = phase_account(steps[-1], steps[-2], cpu=True)
    assert later.lines[0] == "started at 225 KiB (the model: 75.0 KiB)"
    assert not any(line.startswith("left behind") for line in later.lines)

