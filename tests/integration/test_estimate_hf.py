"""``gputui estimate`` on models as frameworks hand them over: a Hugging Face model built from a config
(examples/estimate_hf.py) computing its own loss from the batch's labels, a ModelOutput without one, a
model taking the batch as keyword arguments; GPT-2, BERT and Llama (grouped-query attention) against a
real CPU step and with the attention kernels a GPU would run; and a script importing a missing library,
in one line."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from cli_helpers import ROOT, gputui, no_traceback  # noqa: E402

from gputui.estimate.attention import EFFICIENT, FLASH, MATH  # noqa: E402
from gputui.estimate.job import Job, load  # noqa: E402
from gputui.estimate.run import estimate  # noqa: E402
from gputui.estimate.step import Settings, measure  # noqa: E402

HF = str(ROOT / "examples" / "estimate_hf.py")
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed (pip install transformers)")


@pytest.fixture
def env():
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(COLUMNS="80", PYTHONPATH=str(ROOT))
    return clean


@dataclass
class Output:
    """Not a dict: a framework's own output class with a loss attribute."""

    loss: torch.Tensor
    logits: torch.Tensor


def test_the_loss_the_model_computed_is_taken_else_its_first_tensors_mean():
    job = Job(torch.nn.Linear(2, 2), None)
    loss, logits = torch.tensor(2.5), torch.ones(3, 4) * 3
    assert job.loss_of(Output(loss, logits)) is loss
    assert job.loss_of({"loss": loss, "logits": logits}) is loss
    # a dict (a ModelOutput given no labels) without a loss: its logits' mean
    assert job.loss_of({"loss": None, "logits": logits}).item() == 3.0
    assert job.loss_of({"logits": logits, "hidden": torch.zeros(2)}).item() == 3.0


@needs_transformers
def test_a_hugging_face_model_from_a_config_is_measured_with_its_own_loss():
    from transformers.utils import ModelOutput

    spec = importlib.util.spec_from_file_location("estimate_hf", HF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):
        model, batch = module.gpt2(batch_size=2)
        output = model(**batch)
    assert isinstance(output, ModelOutput) and output.loss.dim() == 0
    numel = sum(p.numel() for p in model.parameters())  # the head tied to the embedding: counted once
    result = estimate(f"{HF}:gpt2", Settings(), device_total=16 << 30, gpus=2, fsdp2=True)
    steady = result.phase("steady").categories
    assert (steady.parameters, steady.gradients, steady.optimizer_state) == (4 * numel, 4 * numel, 8 * numel)
    assert result.fits() is True
    rows = {w.change: w for w in result.what_ifs}
    assert rows["FSDP2 over 2 GPUs, a rank"].measured and rows["FSDP2 over 2 GPUs, a rank"].saving > 0


@needs_transformers
def test_a_hugging_face_model_without_labels_trains_on_its_logits(tmp_path):
    script = tmp_path / "nolabels.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\nimport estimate_hf\n\n"
                      "def job(batch_size=2):\n    model, batch = estimate_hf.gpt2(batch_size)\n"
                      "    return model, {'input_ids': batch['input_ids']}\n")
    with_labels = estimate(f"{HF}:gpt2", Settings(batch_size=2), what_if=False)
    without = estimate(f"{script}:job", Settings(), what_if=False)
    assert without.phase("steady").total == with_labels.phase("steady").total
    # no cross-entropy over the vocabulary: a smaller forward pass
    assert without.phase("forward").total < with_labels.phase("forward").total


@needs_transformers
@pytest.mark.slow  # three real CPU training loops under the probe
@pytest.mark.parametrize("kind, tolerance", [("llama", 0.01), ("gpt2", 1e-5), ("bert", 1e-5)])
def test_hugging_face_models_are_estimated_as_a_real_cpu_step_runs_them(kind, tolerance, one_torch_thread):
    """Issue 45: Llama's grouped-query attention runs the CPU's flash kernel (query, key, value, output
    and a logsumexp kept for backward); the estimate ran the meta device's math kernel (the attention
    matrix and the repeated key and value heads kept): 10.8 % too much in the forward pass. GPT-2 and
    BERT train with attention dropout, which the CPU's flash kernel does not take: math, as before."""
    from estimate_truth import PHASES, compare

    c = compare(kind)
    assert c.estimated_static() == c.probe_static
    assert c.estimated_activations() == pytest.approx(c.probe_activations, rel=tolerance)
    estimated, real = c.estimated_peaks(), c.real_peaks()
    for phase in PHASES:
        assert estimated[phase] == pytest.approx(real[phase], rel=tolerance), phase


@needs_transformers
def test_a_gpu_runs_fused_attention_where_torch_would_pick_it():
    """fp32 GPT-2 with attention dropout: the memory-efficient kernel (it takes dropout, the CPU's flash
    does not); Llama's grouped heads in fp32: math (the efficient kernel takes no grouped heads), in bf16
    flash. Two steps of 2 and 4 layers."""
    kernels = {(kind, precision): measure(load(f"{HF}:{kind}"), Settings(precision=precision)).attention
               for kind, precision in (("gpt2", "fp32"), ("llama", "fp32"), ("llama", "bf16"))}
    assert kernels == {("gpt2", "fp32"): {EFFICIENT: 4}, ("llama", "fp32"): {MATH: 8}, ("llama", "bf16"): {FLASH: 8}}


def test_a_model_taking_the_batch_as_keywords(tmp_path):
    script = tmp_path / "kw.py"
    script.write_text("import torch\n\nclass M(torch.nn.Module):\n"
                      "    def __init__(self):\n        super().__init__()\n"
                      "        self.lin = torch.nn.Linear(8, 8)\n\n"
                      "    def forward(self, **batch):\n"
                      "        return {'loss': (self.lin(batch['x']) - batch['y']).pow(2).mean()}\n\n"
                      "def job():\n    return M(), {'x': torch.randn(4, 8), 'y': torch.randn(4, 8)}\n")
    result = estimate(f"{script}:job", Settings(), what_if=False)
    assert result.phase("steady").categories.parameters == (8 * 8 + 8) * 4


def test_a_script_importing_a_missing_library_is_one_line(env, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import gputui_no_such_library\n\ndef job():\n    pass\n")
    out = gputui(env, "estimate", f"{script}:job")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"gputui: {script} imports gputui_no_such_library, not installed in this Python ({out.args[0]})"]
    no_traceback(out)
