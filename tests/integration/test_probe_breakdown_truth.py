"""The probe's breakdown against the truth computed in the same process: frozen weights that no
optimizer holds, buffers, a loop with no optimizer at all, frozen weights saved for backward.

The truth counts each storage once, as the probe does.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from probe_truth import fresh_reading, storage_bytes  # noqa: E402
from torch import nn  # noqa: E402

from gputui.probe import runtime  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_frozen_backbone_and_batchnorm_buffers_are_counted_exactly():
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 256))
    for p in backbone.parameters():
        p.requires_grad_(False)
    head = nn.Linear(256, 10)
    model = nn.Sequential(backbone, head)
    optimizer = torch.optim.Adam(head.parameters())  # only the head: the backbone is fixed
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(5):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        step = probe.report().steps[-1].categories
        cats = fresh_reading(probe, lambda: model(x))
    finally:
        runtime.stop()
    params = storage_bytes(model.parameters())
    buffers = storage_bytes(model.buffers())
    grads = storage_bytes(p.grad for p in head.parameters())
    state = storage_bytes(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))
    assert (step.parameters, step.gradients, step.optimizer_state, step.buffers) == (params, grads, state, buffers)
    assert (cats.parameters, cats.gradients, cats.optimizer_state, cats.buffers) == (params, grads, state, buffers)
    assert step.parameters == (64 * 256 + 256 + 2 * 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4
    assert step.buffers == 2 * 256 * 4 + 8  # running mean and variance, and the batch counter


def test_a_loop_without_an_optimizer_still_shows_its_model():
    # word_language_model as shipped: p.data updated by hand, no torch.optim at all.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * 8, 100))
    tokens = torch.randint(0, 100, (16, 8))
    targets = torch.randint(0, 100, (16,))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(3):
            model.zero_grad()
            nn.functional.cross_entropy(model(tokens), targets).backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
        cats = fresh_reading(probe, lambda: model(tokens))
    finally:
        runtime.stop()
    assert cats.parameters == storage_bytes(model.parameters()) == (100 * 32 + 32 * 8 * 100 + 100) * 4
    assert cats.gradients == storage_bytes(p.grad for p in model.parameters())
    assert cats.optimizer_state == 0 and cats.buffers == 0


def test_frozen_weights_saved_for_backward_are_parameters_not_activations():
    # A frozen block between trained ones (nanoGPT with a frozen layer): backward through it needs its
    # weight, which autograd saves; that is a parameter, not an activation.
    torch.manual_seed(0)
    first, frozen, last = nn.Linear(64, 128), nn.Linear(128, 128), nn.Linear(128, 10)
    frozen.requires_grad_(False)
    model = nn.Sequential(first, frozen, last)
    optimizer = torch.optim.SGD([*first.parameters(), *last.parameters()], lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(4):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            activations = probe.tracker.tally()["cpu"][3]  # what is saved now, before backward
            loss.backward()
            optimizer.step()
    finally:
        runtime.stop()
    # Saved inside the model: x (by the first layer, for its weight's gradient) and the frozen layer's
    # output (by the last); the frozen layer saves its weight only (its input needs no gradient), and
    # the weights are parameters. (The loss, computed outside any module, is not seen: issue 12.)
    assert activations == (32 * 64 + 32 * 128) * 4


def test_a_model_that_is_no_module_has_unknown_activations_and_says_so():
    # Weights as plain tensors, no torch.nn.Module: the probe sees the optimizer's steps but no
    # forward pass, so it cannot know the activations: None (not 0), and the report says why.
    from gputui.model.probe import LIMIT_NO_FORWARD

    torch.manual_seed(0)
    w = torch.randn(64, 10, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(4):
            optimizer.zero_grad()
            nn.functional.cross_entropy(x @ w, y).backward()
            optimizer.step()
        report = probe.report()
    finally:
        runtime.stop()
    assert report.limits == (LIMIT_NO_FORWARD,)
    last = report.steps[-1]
    assert last.categories.parameters == 64 * 10 * 4 and last.categories.activations is None
    assert last.activations_peak is None
    assert report.devices[0].categories.activations is None
