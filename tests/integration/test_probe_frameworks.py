"""The probe on the training code of real frameworks, on CPU, against the truth summed inside the job:
optimizer.step(closure) (Lightning's automatic optimization, LBFGS), activation checkpointing, and the
jobs of tests/framework_jobs.py (transformers' Trainer on GPT-2 and BERT, accelerate, PEFT's LoRA,
Lightning), each skipped with the reason where its framework is not installed.

The phases come from what runs: a closure's forward and backward are forward and backward phases,
and optimizer.step() is only what runs after the closure returns. Reentrant checkpointing runs the
checkpointed blocks again inside backward: neither a new forward pass, nor models of their own, nor
activations saved a second time.
"""

from __future__ import annotations

import functools
import importlib.util

import pytest

torch = pytest.importorskip("torch")
import framework_jobs  # noqa: E402
from probe_truth import saved_bytes, state_tensors, storage_bytes  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from gputui.analysis.phases import headline, phase_account  # noqa: E402
from gputui.analysis.process import analyse  # noqa: E402
from gputui.model import Snapshot  # noqa: E402
from gputui.probe import runtime  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _no_probe_left():
    yield
    runtime.stop()


def mlp(width=256):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10))


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
        # Lightning zeroes the gradients between training_step and backward: training_step's forward ends
        # on the model, the last step's gradients (none at step 1) and the activations; the step ends on
        # the model and its gradients.
        assert s.peak_forward == (1 if s.step == 1 else 2) * params + activations
        assert s.allocated == 2 * params
    assert headline(phase_account(steps[-1], steps[-2], cpu=True)) == "Step 8 peaks in forward at 2.71 MiB"
    advice = analyse(Snapshot(taken_at=report.taken_at, devices=(), processes=()), None, report).advice
    assert [a.title for a in advice] == ["Activations dominate the step's peak memory"]
    assert "A step peaks at 2.71 MiB, 2.12 MiB (78%) above what it keeps between steps" in advice[0].detail


# -- real framework jobs (tests/framework_jobs.py), each step against the truth summed in the job ----------

# What each job holds at a step's end, (parameters, gradients, optimizer state, buffers): GPT-2's tied
# embedding and head counted once; BERT's position and token-type ids (two 64-long int64 buffers); LoRA's
# frozen GPT-2 counted as parameters, the adapters alone with gradients and AdamW's two moments (and a
# 4-byte step counter for each of their 8 tensors).
HOLDS = {"compile": (547840, 547840, 2 * 547840 + 28 * 4, 0), "checkpointing": (547840, 547840, 2 * 547840 + 28 * 4, 0),
         "hf-gpt2": (547840, 547840, 2 * 547840 + 28 * 4, 0), "hf-bert": (433676, 433676, 2 * 433676 + 41 * 4, 1024),
         "peft-lora": (556032, 8192, 2 * 8192 + 4 * 4, 0), "accelerate": (547840, 547840, 2 * 547840 + 28 * 4, 0),
         "lightning": (1228840, 1228840, 2 * 1228840 + 4 * 4, 0)}


@functools.cache
def framework_run(name: str) -> framework_jobs.Run:
    """The job run once under the probe (every step measured), for all the tests that look at it."""
    job, needs = framework_jobs.JOBS[name]
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install {' '.join(missing)}, or the test extra)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return job()
    finally:
        torch.set_num_threads(threads)


# slow: real framework training (a few seconds each, a framework's import included)
@pytest.mark.filterwarnings("ignore")  # (the frameworks' own deprecation notices)
@pytest.mark.parametrize("name", sorted(HOLDS))
def test_a_framework_jobs_categories_are_exact_at_every_step(name):
    run = framework_run(name)
    report = run.report
    assert report.problems == ()
    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5, 6] and len(run.truth) == 6
    for step, truth in zip(report.steps, run.truth):
        assert step.categories is not None
        assert tuple(getattr(step.categories, c) for c in framework_jobs.CATEGORIES) == tuple(
            truth.categories.values()) == HOLDS[name], step.step
    now = report.devices[0].categories
    assert tuple(getattr(now, c) for c in framework_jobs.CATEGORIES) == HOLDS[name]


# slow: real framework training
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", [
    "hf-gpt2", "accelerate", "peft-lora", "lightning", "compile", "checkpointing",
    # BERT's pooler saves hidden[:, 0], a 1 KiB view of the last layer's 32 KiB output, which the graph
    # alone keeps alive: counted whole (activations.computed_by_graph), not by the elements it uses.
    "hf-bert",
])
def test_a_framework_jobs_activations_and_phase_peaks_are_the_jobs(name):
    run = framework_run(name)
    for step, truth in zip(run.report.steps, run.truth):
        assert step.activations_peak == run.activations, step.step
        # On the CPU a phase's peak is the highest of what the job held at its boundaries.
        assert (step.peak_forward, step.peak_backward, step.peak_optimizer) == (
            truth.forward, truth.backward, truth.optimizer), step.step


# slow: real framework training
@pytest.mark.filterwarnings("ignore")
def test_a_closure_stepped_lightning_job_peaks_where_the_job_did():
    run = framework_run("lightning")
    params, grads, state, _ = HOLDS["lightning"]
    activations = 64 * 64 * 4 + 64 * 4096 * 4  # the input and the hidden layer ReLU keeps
    assert run.activations == activations
    first, *later = zip(run.report.steps, run.truth)
    # Step 1: forward on the model alone, backward ends with its gradients, Adam makes its state.
    assert (first[0].peak_forward, first[0].peak_backward, first[0].peak_optimizer) == (
        params + activations, params + grads, params + grads + state)
    for step, truth in later:
        # training_step runs with the last step's gradients, which Lightning frees only before backward:
        # forward peaks where the model returns, gradients and activations both alive (5.70 MiB; the
        # readings at the phase boundaries alone said 4.69); backward ends on the new gradients.
        assert step.peak_forward == truth.forward == params + grads + state + activations
        assert step.peak_backward == step.peak_optimizer == params + grads + state
