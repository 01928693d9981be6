"""The seed question from a real loop: why memory jumps after forward, after backward and at the first
optimizer.step(). The first steps' records outlive the window of recent steps, and each phase's peak is
what the probe tracks at its boundaries (CPU) and, for forward, where the forward pass returns: the
gradients a loop zeroes only after it (Lightning's closure, many plain loops) are alive through it. A
closure's passes (LBFGS, Lightning): test_probe_frameworks.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from probe_truth import saved_bytes, state_tensors, storage_bytes  # noqa: E402
from torch import nn  # noqa: E402

from gputui.analysis.phases import headline, phase_account  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from gputui.probe.steps import BACKWARD, FORWARD, IDLE, PhasePeaks, PhaseReading, phase_peak  # noqa: E402

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


def zero_grad_after_forward(loop: str, steps: int = 4):
    """A loop that zeroes the gradients after the forward pass, as Lightning's closure does and many plain
    loops do: the last step's gradients live through the forward. ``loop``: "plain", "closure"
    (optimizer.step(closure)) or "evaluated" (plain, a pass without autograd first). Returns the
    probe's steps and, per step, the truth summed inside the job where the model's forward returns
    (parameters, live gradients, Adam's state and the activations it saved), with the parameter bytes."""
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 64))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 64)
    activations = saved_bytes(model, lambda: model(x))
    truth: list[int] = []

    def forward_ends(module, args, output):
        if not torch.is_grad_enabled():
            return
        params = list(model.parameters())
        held = storage_bytes(params + [p.grad for p in params if p.grad is not None] + state_tensors(optimizer))
        truth.append(held + activations)

    def one_pass():
        if loop == "evaluated":
            with torch.no_grad():
                model(x)  # (opens the forward phase, saves nothing)
        out = model(x)
        optimizer.zero_grad()
        out.square().mean().backward()
        return out

    model.register_forward_hook(forward_ends)
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(steps):
            if loop == "closure":
                optimizer.step(one_pass)
            else:
                one_pass()
                optimizer.step()
        report = probe.report()
    finally:
        runtime.stop()
    assert report.problems == ()
    return report.steps, truth, activations, param_bytes(model)


@pytest.mark.parametrize("loop", ["plain", "closure", "evaluated"])
def test_the_forward_peak_holds_the_gradients_alive_until_zero_grad_after_it(loop):
    steps, truth, activations, params = zero_grad_after_forward(loop)
    assert activations == 256 * 64 * 4 + 256 * 1024 * 4  # the input, and what ReLU keeps: 1.06 MiB
    state = 2 * params + 4 * 4  # Adam's moments and its 4 step counters
    assert [s.step for s in steps] == [1, 2, 3, 4] and len(truth) == 4
    # Step 1 has no gradients yet; then the last step's are alive until zero_grad, after the forward.
    assert truth == [params + activations] + [2 * params + state + activations] * 3
    assert [s.peak_forward for s in steps] == truth
    for s in steps[1:]:
        # The other phases as before: backward starts after zero_grad, the optimizer ends on the new gradients.
        assert s.peak_backward == params + state + activations
        assert s.peak_optimizer == s.allocated == 2 * params + state
    # (The phase boundaries alone said 2.57 MiB: the gradients, freed before backward started, left out.)
    account = phase_account(steps[-1], steps[-2], cpu=True)
    assert headline(account) == "Step 4 peaks in forward at 3.08 MiB"
    assert account.lines[-1] == ("CPU: tensors the probe tracks, at phase boundaries and where the forward pass "
                                 "returns (temporaries inside a phase are not seen)")


def test_on_cuda_the_forward_peak_holds_the_gradients_where_the_allocator_s_peak_no_longer_rises():
    # CUDA's readings are the allocator's: its current bytes and its all-time peak, never reset (the
    # job's own max_memory_allocated() stays its own). A phase's peak is exact where that peak rose within
    # it; from the second step of the loop above on, each forward ends at the same top the first one
    # set, so the counter says nothing, and the readings where forward starts (the last step's gradients
    # alive) and where backward starts (zeroed, the activations saved) each miss part of it.
    params, activations = 528640, 1114112  # (the loop above: its model, and what its forward saves)
    grads, state = params, 2 * params + 16
    top = params + grads + state + activations
    peaks = PhasePeaks()
    peaks.reset(True)
    peaks.close(IDLE, FORWARD, PhaseReading(allocated=params + grads + state, peak=top), saved=0)
    peaks.forward_returned(activations)  # (the Tracker: activations held on the step's device)
    peaks.close(FORWARD, BACKWARD, PhaseReading(allocated=params + state + activations, peak=top), saved=activations)
    assert peaks.peak(FORWARD) == top
    # (The boundaries alone, as before: the gradients left out.)
    assert phase_peak(PhaseReading(allocated=params + grads + state, peak=top),
                      PhaseReading(allocated=params + state + activations, peak=top)) == top - grads
