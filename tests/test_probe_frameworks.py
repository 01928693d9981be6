"""The probe on the training code of real frameworks, on CPU, against the truth summed inside the job:
optimizer.step(closure) (Lightning's automatic optimization, LBFGS) and activation checkpointing.

The phases come from what runs: a closure's forward and backward are forward and backward phases,
and optimizer.step() is only what runs after the closure returns. Reentrant checkpointing runs the
checkpointed blocks again inside backward: neither a new forward pass, nor models of their own, nor
activations saved a second time.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from gputui.analysis.phases import headline, phase_account  # noqa: E402
from gputui.analysis.process import analyse  # noqa: E402
from gputui.model import Snapshot  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from probe_truth import saved_bytes, storage_bytes  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _no_probe_left():
    yield
    runtime.stop()


def mlp(width=256):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10))


def state_tensors(optimizer) -> list:
    found = []
    for state in optimizer.state.values():
        for value in state.values():
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, torch.Tensor):
                    found.append(item)
    return found


def tracked_now(model, optimizer) -> int:
    """Parameters, gradients and optimizer state held now, each storage once (the probe's tally)."""
    tensors = list(model.parameters()) + [p.grad for p in model.parameters() if p.grad is not None]
    return storage_bytes(tensors + state_tensors(optimizer))


def closure_loop(optimizer_of, steps):
    """A loop that steps with optimizer.step(closure), the closure zeroing gradients, running the
    forward and the backward; the highest (tracked + activations) at a closure's forward end, per step."""
    model = mlp()
    optimizer = optimizer_of(model)
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    activations = saved_bytes(model, lambda: model(x))
    highest: list[int] = []

    def closure():
        optimizer.zero_grad()
        highest[-1] = max(highest[-1], tracked_now(model, optimizer) + activations)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    probe = runtime.start(serve=False, budget=1.0)
    for _ in range(steps):
        highest.append(0)
        optimizer.step(closure)
    return probe.report().steps, highest, activations, tracked_now(model, optimizer)


@pytest.mark.parametrize("optimizer_of, unseen", [
    (lambda model: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), 0),
    (lambda model: torch.optim.Adam(model.parameters()), 0),
    # LBFGS makes two scalars of state (``al``) between the first step's closures: on CPU the probe
    # counts optimizer state anew at a step's end, so the first step's forward peak misses them.
    (lambda model: torch.optim.LBFGS(model.parameters(), max_iter=4, history_size=3), 2 * 4),
], ids=["sgd", "adam", "lbfgs"])
def test_a_closure_steps_forward_and_backward_are_phases_of_their_own(optimizer_of, unseen):
    steps, highest, activations, end = closure_loop(optimizer_of, 4)
    assert activations == 512 * 64 * 4 + 512 * 256 * 4  # the input, and the hidden layer ReLU keeps
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert steps[0].peak_forward == highest[0] - unseen
    for s, truth in zip(steps[1:], highest[1:]):
        # Forward's peak is what the job held when its (highest, for LBFGS) forward pass ended.
        assert s.peak_forward == truth
    for s in steps:
        assert s.activations_peak == activations
        assert s.peak_backward is not None
        assert s.peak_optimizer is not None and s.peak_optimizer >= s.allocated
    assert steps[-1].allocated == end
    assert headline(phase_account(steps[-1], steps[-2], cpu=True)).startswith("Step 4 peaks in forward at ")


def test_a_closure_keeps_its_result_and_its_exceptions():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    losses = []

    def closure():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss)
        if len(losses) == 2:
            raise ValueError("the job's own")
        return loss

    probe = runtime.start(serve=False, budget=1.0)
    assert optimizer.step(closure=closure) is losses[0]  # (by keyword, as Lightning passes it)
    with pytest.raises(ValueError, match="the job's own"):
        optimizer.step(closure)
    assert optimizer.step(closure) is losses[2]
    report = probe.report()
    assert [s.step for s in report.steps] == [1, 2]  # (the step that raised never ended)
    assert report.problems == ()


@pytest.mark.parametrize("mode", ["none", "reentrant", "non-reentrant"])
def test_checkpointed_blocks_count_once_and_are_no_models_of_their_own(mode):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.stem = nn.Linear(128, 128)
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 128))
                                        for _ in range(4))
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            x = self.stem(x)
            for block in self.blocks:
                x = block(x) if mode == "none" else checkpoint(block, x, use_reentrant=mode == "reentrant")
            return self.head(x)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))
    activations = saved_bytes(model, lambda: model(x))
    probe = runtime.start(serve=False, budget=1.0)
    for _ in range(6):  # (past the steps that learn which modules are the models)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    report = probe.report()
    row = 256 * 128 * 4  # one activation the width of the model
    # The truth: no checkpointing keeps every block's input and hidden layer; checkpointing keeps only
    # what goes into each block (the stem's input, the blocks' and the head's).
    assert activations == (6 * row + 4 * 4 * row if mode == "none" else 6 * row)
    params = storage_bytes(model.parameters())
    state = 2 * params + 20 * 4  # Adam's two moments and a step counter for each of the 20 tensors
    cats = report.devices[0].categories
    assert (cats.parameters, cats.gradients, cats.optimizer_state) == (params, params, state)
    assert cats.activations == activations  # tolerance: none, the same bytes
    assert list(probe.tracker.categories.modules) == [model]  # the blocks are no models of their own
    for s in report.steps[1:]:
        assert s.activations_peak == activations
        # Forward ends with the model, its state and the activations (gradients zeroed before it).
        assert s.peak_forward == params + state + activations


@pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated:FutureWarning")  # (lightning's)
def test_a_lightning_job_has_its_phases_and_the_advice_on_activations():
    lightning = pytest.importorskip("lightning", reason="lightning is not installed (pip install lightning)")
    from torch.utils.data import DataLoader, TensorDataset

    class Classifier(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(width=1024)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(1)
    data = TensorDataset(torch.randn(512 * 8, 64), torch.randint(0, 10, (512 * 8,)))
    module = Classifier()
    activations = saved_bytes(module.net, lambda: module.net(torch.randn(512, 64)))
    params = storage_bytes(module.parameters())
    trainer = lightning.Trainer(max_steps=8, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    probe = runtime.start(serve=False, budget=1.0)
    trainer.fit(module, DataLoader(data, batch_size=512))
    report = probe.report()
    steps = report.steps
    assert [s.step for s in steps] == list(range(1, 9))
    assert activations == 512 * 64 * 4 + 512 * 1024 * 4  # 2.13 MiB
    for s in steps:
        assert s.activations_peak == activations
        # Lightning zeroes the gradients between training_step and backward: forward ends on the model
        # and the activations alone; the step ends on the model and its gradients.
        assert s.peak_forward == params + activations
        assert s.allocated == 2 * params
    assert headline(phase_account(steps[-1], steps[-2], cpu=True)) == "Step 8 peaks in forward at 2.42 MiB"
    advice = analyse(Snapshot(taken_at=report.taken_at, devices=(), processes=()), None, report).advice
    assert [a.title for a in advice] == ["Activations dominate the step's peak memory"]
    assert "A step peaks at 2.42 MiB, 1.83 MiB (76%) above what it keeps between steps" in advice[0].detail
