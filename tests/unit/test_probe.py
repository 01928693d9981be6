"""The probe on a real CPU training loop (an MLP with Adam): categories, activations, steps, peaks, sites."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gputui.probe import categories, runtime, saved_tensor_hooks  # noqa: E402
from gputui.probe.steps import BACKWARD, FORWARD, IDLE  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import loops  # noqa: E402
from clocks import JobClock  # noqa: E402

# What autograd keeps for backward in loops.make_job()'s MLP (batch 64): the input batch (64x256
# floats), and the outputs of the two ReLUs (64x512 each), which the next Linear also saves (same
# storage, counted once). Weights saved by the Linears are parameters, not activations.
ACTIVATIONS = 64 * 256 * 4 + 2 * 64 * 512 * 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def probe():
    p = runtime.start(budget=1.0, serve=False)  # budget 1.0: measure every step
    yield p
    runtime.stop()


@pytest.fixture
def every_step(monkeypatch):
    """A probe that measures every step whatever the machine's load: on a JobClock (5 ms steps, 50 us
    readings), where the real clock lets a loaded machine's slow reading skip a tiny step's measure."""
    with JobClock().charging(monkeypatch) as clock:
        p = runtime.start(budget=1.0, serve=False, clock=clock)
        try:
            yield p
        finally:
            runtime.stop()


def param_bytes(model: nn.Module) -> int:
    return sum(p.nbytes for p in model.parameters())


def step(job, x, y):
    job.optimizer.zero_grad()
    loss = nn.functional.cross_entropy(job.model(x), y)
    loss.backward()
    job.optimizer.step()


def fresh_batch(job):
    # A batch of its own (not a slice of the dataset tensor), so its storage is exactly the batch.
    x, y = job.batch_at(0)
    return x.clone(), y.clone()


def test_categories_match_what_the_model_and_adam_hold(probe):
    job = loops.make_job()
    x, y = fresh_batch(job)
    for _ in range(3):
        step(job, x, y)
    params = param_bytes(job.model)
    n_params = len(list(job.model.parameters()))
    (device,) = probe.report().devices
    assert device.device == "cpu" and device.allocator is None
    cats = device.categories
    assert cats.parameters == params == 1_597_480
    assert cats.gradients == params
    # Adam keeps exp_avg and exp_avg_sq per parameter (2x), plus a 0-dim float32 "step" tensor each.
    assert cats.optimizer_state == 2 * params + 4 * n_params
    # Backward freed them: between steps the figure is the latest measured step's peak, named by it.
    assert probe.tracker.activations.total() == 0
    assert (cats.activations, cats.activations_step) == (probe.report().steps[-1].activations_peak, 3)
    assert cats.activations > 0
    assert cats.other is None  # no allocator on CPU: not known, not zero


def test_activations_are_seen_during_forward_and_gone_after_backward(probe):
    job = loops.make_job()
    x, y = fresh_batch(job)
    step(job, x, y)  # the probe learns the parameters at the first optimizer step
    job.optimizer.zero_grad()
    out = job.model(x)
    assert probe.tracker.phase == FORWARD
    assert probe.tracker.activations.total() == ACTIVATIONS
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    assert probe.tracker.phase == BACKWARD
    assert probe.tracker.activations.total() == 0
    job.optimizer.step()
    assert probe.tracker.phase == IDLE


def test_a_graph_kept_without_backward_counts_until_dropped(probe):
    job = loops.make_job()
    x, _ = fresh_batch(job)
    step(job, x, job.batch_at(0)[1])
    kept = [job.model(x) for _ in range(3)]  # evaluation with grad enabled: graphs stay
    assert probe.tracker.activations.total() == 3 * ACTIVATIONS - 2 * 64 * 256 * 4  # x shared
    del kept
    assert probe.tracker.activations.total() == 0  # the probe's own bookkeeping holds no cycle


class Pooled(nn.Module):
    """BERT's pooler in small: an encoder output made by the forward pass (4 x 32 x 64 floats, which
    no op saves), of which only the first token is saved, by the pooler's Linear."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 64)
        self.pooler = nn.Linear(64, 8)

    def forward(self, x):
        hidden = self.encoder(x) + 1  # (the add saves nothing: the pooler's view is all that keeps it)
        return self.pooler(hidden[:, 0])


def test_a_slice_of_what_the_forward_made_counts_whole_and_a_slice_of_the_dataset_by_its_elements(every_step):
    probe = every_step
    torch.manual_seed(0)
    model = Pooled()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset = torch.randn(40, 32, 16)  # held by the job all along: batches are views of it
    for i in range(3):
        optimizer.zero_grad()
        out = model(dataset[4 * i:4 * i + 4])
        if i == 2:
            # The batch (4 x 32 x 16 floats of the 80 KiB dataset), saved by the encoder's Linear, and
            # the whole encoder output the pooler's 4 x 64 view keeps alive.
            assert probe.tracker.activations.total() == 4 * 32 * 16 * 4 + 4 * 32 * 64 * 4
        out.sum().backward()
        optimizer.step()
    assert [s.activations_peak for s in probe.report().steps] == [4 * 32 * 16 * 4 + 4 * 32 * 64 * 4] * 3


def test_a_slice_of_a_tensor_the_job_holds_that_requires_grad_counts_by_its_elements(every_step):
    probe = every_step
    torch.manual_seed(0)
    model = nn.Linear(16, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(40, 16, requires_grad=True)  # a leaf of the job's, sliced (not the model's)
    for i in range(2):
        optimizer.zero_grad()
        out = model(inputs[4 * i:4 * i + 4])
        assert probe.tracker.activations.total() == 4 * 16 * 4  # the slice, not the 40 rows
        out.sum().backward()
        optimizer.step()


def test_steps_are_detected_with_phase_peaks(probe):
    job = loops.make_job()
    x, y = fresh_batch(job)
    for _ in range(5):
        step(job, x, y)
    report = probe.report()
    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5]
    params = param_bytes(job.model)
    state = 2 * params + 4 * len(list(job.model.parameters()))
    for record in report.steps[1:]:
        assert record.duration > 0 and record.device == "cpu"
        assert record.allocated == params + params + state  # parameters, gradients, state
        # zero_grad(set_to_none) freed the gradients: forward peaks at parameters + state + activations.
        assert record.peak_forward == params + state + ACTIVATIONS
        assert record.peak_backward == 2 * params + state
        assert record.peak_optimizer == 2 * params + state
        assert record.categories.activations == 0


def test_every_top_level_forward_and_accumulated_backward_stay_in_one_step(probe):
    job = loops.make_job()
    x, y = fresh_batch(job)
    for _ in range(2):
        job.optimizer.zero_grad()
        for _ in range(4):  # gradient accumulation: four micro-batches per optimizer step
            nn.functional.cross_entropy(job.model(x), y).backward()
        job.optimizer.step()
    assert probe.tracker.step_count == 2


def test_a_second_optimizer_does_not_split_steps(probe):
    job = loops.make_job()
    head = nn.Linear(10, 2)
    other = torch.optim.SGD(head.parameters(), lr=0.1)
    x, y = fresh_batch(job)
    for _ in range(3):
        job.optimizer.zero_grad()
        other.zero_grad()
        head(job.model(x)).sum().backward()
        job.optimizer.step()
        other.step()
    assert probe.tracker.step_count == 3
    # Both optimizers' parameters are counted.
    (device,) = probe.report().devices
    assert device.categories.parameters == param_bytes(job.model) + param_bytes(head)


def test_budget_limits_readings_but_not_step_records():
    p = runtime.start(budget=0.0, serve=False)
    try:
        job = loops.make_job()
        loops.clean(job, 4)
        steps = p.report().steps
    finally:
        runtime.stop()
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert steps[0].allocated is not None  # the first step is always measured
    assert all(s.allocated is None and s.duration > 0 for s in steps[1:])


def test_failures_inside_hooks_are_contained_and_reported(probe, monkeypatch):
    job = loops.make_job()
    x, y = fresh_batch(job)

    def broken(*args, **kwargs):
        raise RuntimeError("injected failure")

    class ExplodingKeys(frozenset):
        def __contains__(self, key):
            raise ValueError("injected in pack")

    monkeypatch.setattr(categories, "tally", broken)
    step(job, x, y)  # readings fail in the optimizer hooks: the step goes on
    probe.tracker.activations.model_keys = ExplodingKeys()
    job.optimizer.zero_grad()
    loss = nn.functional.cross_entropy(job.model(x), y)
    loss.backward()  # the pack hook failed and handed autograd the tensor itself
    assert all(p.grad is not None for p in job.model.parameters())
    report = probe.report()  # the report still comes, with the problems listed
    text = "\n".join(report.problems)
    assert "RuntimeError: injected failure" in text
    assert "saved-tensor hook: ValueError: injected in pack" in text


def test_stop_removes_every_hook():
    p = runtime.start(serve=False)
    runtime.stop()
    job = loops.make_job()
    loops.clean(job, 2)
    assert p.tracker.step_count == 0
    assert saved_tensor_hooks.any_on_top() is False
    assert not torch.nn.modules.module._global_forward_hooks


def test_stop_mid_recording_lets_go_of_everything():
    """`gputui detach` stops the probe on the training thread in the middle of a CPU site recording:
    the recording's function mode must leave torch's stack, and nothing may keep the probe alive."""
    import gc
    import weakref

    job = loops.make_job()
    runtime.start(budget=1.0, serve=False)
    loops.clean(job, 2)
    runtime.current().sites.request(5)
    loops.clean(job, 2)  # (the keeping line reads this frame's locals: no name here holds the probe)
    assert runtime.current().sites.on and not runtime.current().sites.process_wide  # a function mode
    alive, mode = weakref.ref(runtime.current()), weakref.ref(runtime.current().sites._mode)
    runtime.stop()
    gc.collect()
    assert mode() is None  # off torch's function mode stack: the job's calls no longer go through it
    assert alive() is None  # no hook, mode or callback holds the probe (its 4 MiB OOM reserve with it)


def test_probing_context_manager_starts_and_stops():
    import gputui.probe

    with gputui.probe.probing(serve=False) as p:
        loops.clean(loops.make_job(), 2)
        assert p.tracker.step_count == 2
    assert runtime.current() is None


def _line_of(marker: str) -> int:
    for number, text in enumerate((EXAMPLES / "loops.py").read_text().splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(marker)


def test_site_recording_finds_the_growing_line_and_switches_off(probe):
    job = loops.make_job()
    loops.clean(job, 2)
    answer = probe.desk.record_sites({"steps": 5})
    assert answer["recording"] is True
    loops.leak_cache(job, 8)
    report = probe.report()
    assert report.recording is False and len(report.recorded_steps) == 5
    where = f"{EXAMPLES / 'loops.py'}:{_line_of('the leak: a new tensor per step')} in leak_cache"
    site = next(s for s in report.sites if s.where == where)
    growth = [b - a for a, b in zip(site.live_bytes, site.live_bytes[1:])]
    assert growth == [64 * 256 * 4] * 4  # one 64x256 float batch kept per step
    assert site.stack[-1] == where
    assert report.recording_cost is not None and report.recording_cost >= 0
    # Off again: no torch function mode left behind, no tensor watching.
    assert not torch.overrides._get_current_function_mode_stack()
    assert probe.tracker.activations.saw_tensor is None


def test_site_recording_of_a_clean_loop_shows_nothing_growing(probe):
    job = loops.make_job()
    loops.clean(job, 2)
    probe.desk.record_sites({"steps": 4})
    loops.clean(job, 6)
    report = probe.report()
    assert len(report.recorded_steps) == 4
    for site in report.sites:
        assert len(set(site.live_bytes[1:])) == 1, site  # flat after the first recorded step


def test_record_sites_rejects_bad_parameters(probe):
    with pytest.raises(ValueError):
        probe.desk.record_sites({"steps": "many"})
    with pytest.raises(ValueError):
        probe.desk.record_sites({"steps": 0})
    assert probe.desk.record_sites({"on": False}) == {"recording": False, "steps": 0,
                                                  "starts_at_step": None}


class _ModelOutput(dict):
    """As transformers' ModelOutput: a dict whose keys are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _ComputesItsLoss(nn.Module):
    """As a Hugging Face model given labels: the loss is computed inside forward."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x, labels=None):
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return _ModelOutput(loss=loss, logits=logits)


def test_no_note_about_a_loss_outside_any_module_when_the_model_computes_its_loss(probe):
    model = _ComputesItsLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for _ in range(3):
        optimizer.zero_grad()
        model(x, labels=y).loss.backward()
        optimizer.step()
    assert probe.report().limits == ()


def test_a_loss_computed_in_the_loop_keeps_the_note(probe):
    job = loops.make_job()
    x, y = fresh_batch(job)
    for _ in range(3):
        step(job, x, y)  # F.cross_entropy on the model's output, outside it
    (limit,) = probe.report().limits
    assert limit.startswith("Activations leave out what a loss function saves outside any module")


def test_recorded_sites_rank_what_grows_before_what_is_held(probe):
    job = loops.make_job()
    held = torch.randn(1 << 18)  # 1 MiB made while recording, and kept: held, not growing
    loops.clean(job, 2)
    probe.desk.record_sites({"steps": 5})
    loops.clean(job, 1)
    held = held * 2  # (at the first recorded step)
    loops.leak_cache(job, 8)
    report = probe.report()
    where = f"{EXAMPLES / 'loops.py'}:{_line_of('the leak: a new tensor per step')} in leak_cache"
    assert report.sites[0].where == where  # 64 KiB a step, below the 1 MiB held
    assert max(report.sites[0].live_bytes) < max(s.live_bytes[-1] for s in report.sites) == held.nbytes
