"""``gputui estimate``: the table and verdict, the JSON document, the rule of thumb's 850M-parameter
check on the meta device, and a clear line with exit 2 for every bad SCRIPT:FUNCTION."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from cli_helpers import ROOT, gputui, no_traceback  # noqa: E402

from gputui import units  # noqa: E402
from gputui.estimate.run import estimate  # noqa: E402
from gputui.estimate.step import Settings  # noqa: E402
from gputui.model.estimate import CUDA_CONTEXT  # noqa: E402
from gputui.plain.schema import SCHEMA  # noqa: E402

GPT = str(ROOT / "examples" / "estimate_gpt.py")
PARAMS_850M = 849_419_200  # numel of examples/estimate_gpt.py:gpt_850m, the tied head counted once


@pytest.fixture
def env(tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(COLUMNS="80", PYTHONPATH=str(ROOT))
    return clean


def test_850m_fp32_adam_does_not_fit_16gb_and_runs_out_in_the_optimizer_step():
    """The rule of thumb: 16 bytes a parameter of model states (13.6 GB) before activations, on meta
    tensors (no real memory). How long it takes is bench/bench_estimate.py's to measure, not a test's."""
    result = estimate(f"{GPT}:gpt_850m", Settings(), device_total=16 * 10**9)
    steady = result.phase("steady").categories
    assert steady.parameters == 4 * PARAMS_850M
    assert steady.gradients == 4 * PARAMS_850M
    # AdamW's two moments on the device; its 4-byte step count per parameter tensor on the host
    tensors = 2 + 25 * 12 + 2  # embeddings (the head tied to wte), 12 a block, the final LayerNorm
    assert steady.optimizer_state == 8 * PARAMS_850M
    assert result.host_state == 4 * tensors
    model_states = steady.parameters + steady.gradients + steady.optimizer_state
    assert model_states == pytest.approx(13.6e9, rel=0.01)
    assert result.fits() is False
    assert result.runs_out_in() == "optimizer"
    assert result.device_usable == 16 * 10**9 - CUDA_CONTEXT



def test_the_speed_goal_is_the_benchs_to_print(env):
    """bench/bench_estimate.py times the estimate (the 850M GPT by default) against its goal of a minute."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_estimate.py"), "--job", f"{GPT}:build"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{GPT}:build (torch {torch.__version__}, ")
    assert re.fullmatch(r"estimate with the what-ifs: \d+\.\d s \(goal: under 60 s, met\)", lines[1]), lines
    assert re.fullmatch(r"estimate alone \(--no-what-if\): \d+\.\d s", lines[2]), lines
    assert re.fullmatch(r"estimate with the what-ifs and --fsdp2 \(8 ranks\): \d+\.\d s, the FSDP2 row -?\d+\.\d s",
                        lines[3]), lines
    assert re.fullmatch(r"peak resident memory: \d+ MiB", lines[4]), lines

def test_table_and_verdict_fit_80_columns(env):
    out = gputui(env, "estimate", "examples/estimate_gpt.py:gpt_850m", "--device-memory", "16GB", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["examples/estimate_gpt.py:gpt_850m", "one training step with AdamW in fp32"]
    assert max(len(line) for line in lines) <= 80
    assert lines[4].split() == ["phase", "params", "grads", "optim", "activ", "buffers", "other", "total"]
    assert [line[:15].strip() for line in lines[5:10]] == [
        "model created", "forward", "backward", "optimizer step", "steady state"]
    assert lines[5].split()[2] == units.size_compact(4 * PARAMS_850M)  # the parameters
    assert "does not fit: runs out in the optimizer step, needs 15.8 GiB of 14.2 GiB" in out.stdout


def test_a_change_that_raises_the_peak_says_it_costs_more(env):
    # cnn_batchnorm's activations are tiny: checkpointing's recomputed outputs outweigh what it frees
    job = str(ROOT / "examples" / "estimate_models.py") + ":cnn_batchnorm"
    saving = next(w.saving for w in estimate(job, Settings()).what_ifs if w.change == "activation checkpointing")
    assert saving < 0 and units.size_compact(-saving) == "1.00MiB"
    out = gputui(env, "estimate", job, "--max-batch", "--device-memory", "1GiB")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("activation checkpointing "))
    assert row.split()[3:7] == ["costs", "1.00MiB", "more", "measured"], row
    table = out.stdout[out.stdout.index("what if"):].splitlines()
    assert "saves -" not in out.stdout and max(len(line) for line in table) == 80  # max batch's column: the widest


def test_a_small_job_fits_with_what_is_spare(env):
    out = gputui(env, "estimate", f"{GPT}:build", "--batch-size", "4", "--device-memory", "16GiB")
    assert out.returncode == 0, out.stderr
    usable = 16 * 2**30 - CUDA_CONTEXT
    peak = estimate(f"{GPT}:build", Settings(batch_size=4)).peak
    assert f"fits with {units.size(usable - peak)} to spare: peak {units.size(peak)}" in out.stdout


def test_json_is_one_valid_document(env):
    jsonschema = pytest.importorskip("jsonschema")
    out = gputui(env, "estimate", f"{GPT}:build", "--json", "--device-memory", "1MiB", "--optimizer", "sgd")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["schema"] == "gputui.estimate"
    assert document["estimate"]["optimizer"] == "SGD"
    assert document["fits"] is False
    assert document["runs_out_in"] == "created"  # 1 MiB is less than the CUDA context alone


def test_precision_halves_parameters_and_checkpointing_cuts_activations():
    fp32 = estimate(f"{GPT}:build", Settings())
    bf16 = estimate(f"{GPT}:build", Settings(precision="bf16"))
    assert 2 * bf16.phase("steady").categories.parameters == fp32.phase("steady").categories.parameters
    checkpointed = estimate(f"{GPT}:build", Settings(checkpointing=True))
    assert checkpointed.phase("forward").categories.activations < fp32.phase("forward").categories.activations / 3


BAD_JOBS = {
    "no colon": ("examples/estimate_gpt.py", "give SCRIPT:FUNCTION"),
    "missing file": ("nowhere.py:build", "nowhere.py: no such file"),
    "missing function": (f"{GPT}:nope", "has no function nope"),
}


@pytest.mark.parametrize("case", BAD_JOBS)
def test_bad_job_is_one_line_and_exit_2(env, case):
    spec, words = BAD_JOBS[case]
    out = gputui(env, "estimate", spec)
    assert out.returncode == 2
    assert words in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    no_traceback(out)


def test_wrong_return_and_the_users_exception(env, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("def shape():\n    return 3\n\n"
                      "def broken(batch_size=2):\n    raise ValueError('no data here')\n")
    out = gputui(env, "estimate", f"{script}:shape")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "gputui: shape() returned int: return (model, batch[, optimizer[, loss]]) or a dict with those keys")
    out = gputui(env, "estimate", f"{script}:broken", "--batch-size", "2")
    assert out.returncode == 2
    first, *rest = out.stderr.splitlines()
    assert first == "gputui: broken() raised ValueError: no data here"
    assert "Traceback" in rest[0] and "no data here" in rest[-1]  # their traceback, below the line
    assert "gputui/estimate" not in out.stderr  # their frames, not ours
    out = gputui(env, "estimate", f"{script}:shape", "--batch-size", "2")
    assert out.returncode == 2 and "shape() takes no batch_size" in out.stderr


def test_the_users_model_raising_in_the_step(env, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import torch\n\nclass Bad(torch.nn.Module):\n    def forward(self, x):\n"
                      "        raise RuntimeError('shapes do not match')\n\n"
                      "def job():\n    return Bad(), torch.randn(2, 2), torch.optim.SGD([torch.nn.Parameter("
                      "torch.zeros(1))])\n")
    out = gputui(env, "estimate", f"{script}:job")
    assert out.returncode == 2
    first, *rest = out.stderr.splitlines()
    assert first == "gputui: the training step's forward phase raised RuntimeError: shapes do not match"
    assert any("in forward" in line for line in rest) and "gputui/estimate" not in out.stderr



@pytest.fixture
def no_numpy(env, tmp_path):
    """A machine without NumPy (a fresh venv: torch does not require it), on this one that has it: a
    ``numpy`` that cannot be imported, first on the path, so torch warns "Failed to initialize NumPy"."""
    stub = tmp_path / "no_numpy" / "numpy"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    env = {**env, "PYTHONPATH": f"{stub.parent}{os.pathsep}{env['PYTHONPATH']}"}
    loaded = subprocess.run([sys.executable, "-c", "import torch.utils._python_dispatch"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Failed to initialize NumPy" in loaded.stderr  # what torch 2.13 prints there, unfiltered
    return env


def test_torchs_warnings_as_it_loads_leave_an_error_one_line(no_numpy, tmp_path):
    """Torch's warnings at import are about its environment, not the job: left out. The user's own
    warnings, from their job, still show above gputui's line."""
    out = gputui(no_numpy, "estimate", "nowhere.py:build")
    assert out.returncode == 2
    assert out.stderr == "gputui: nowhere.py: no such file\n"
    script = tmp_path / "job.py"
    script.write_text("import warnings\n\ndef shape():\n    warnings.warn('my data is odd')\n    return 3\n")
    out = gputui(no_numpy, "estimate", f"{script}:shape")
    assert out.returncode == 2
    first, *_, last = out.stderr.splitlines()
    assert first.endswith("UserWarning: my data is odd")
    assert last == "gputui: shape() returned int: return (model, batch[, optimizer[, loss]]) or a dict with those keys"
    assert "NumPy" not in out.stderr

@pytest.mark.parametrize("text, size", [("16GiB", 16 << 30), ("80G", 80 << 30), ("24000MiB", 24000 << 20),
                                        ("16GB", 16 * 10**9), ("1.5 TiB", 3 << 39), ("512", 512)])
def test_sizes_as_typed(text, size):
    assert units.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "16XB", "-1G", "nanG", "infG", "1e999G"])
def test_not_a_size(text):
    with pytest.raises(ValueError, match="is no size"):
        units.parse_size(text)


def test_gpu_capacity_comes_from_the_collector(env):
    out = gputui(env, "--demo", "estimate", f"{GPT}:build", "--gpu", "0")
    assert out.returncode == 0, out.stderr
    assert "GPU 0 (NVIDIA GeForce RTX 4090): 23.3 GiB usable" in out.stdout
    out = gputui(env, "--demo", "estimate", f"{GPT}:build", "--gpu", "9")
    assert out.returncode == 2 and "no GPU 9" in out.stderr


def test_amp_runs_under_autocast_on_fake_tensors():
    """amp keeps fp32 weights, gradients and state; the forward's activations are mostly bf16."""
    fp32 = estimate(f"{GPT}:build", Settings())
    amp = estimate(f"{GPT}:build", Settings(precision="amp"))
    assert amp.phase("steady").categories == fp32.phase("steady").categories
    assert amp.phase("forward").categories.activations < 0.75 * fp32.phase("forward").categories.activations


OLD_STYLE_OPTIMIZER = """\
import torch

class CountingSGD(torch.optim.Optimizer):
    \"\"\"As Adam before torch 2.13: a step counter made with torch.tensor(0.0), no device named,
    and read back with .item().\"\"\"

    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["moment"] = torch.zeros_like(p)
                state["step"] += 1
                state["moment"].mul_(0.9).add_(p.grad)
                p.add_(state["moment"], alpha=-group["lr"] / state["step"].item())

def job():
    model = torch.nn.Linear(256, 128)
    return model, torch.randn(32, 256), CountingSGD(model.parameters())
"""


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_an_optimizer_that_reads_a_scalar_it_made_without_a_device(tmp_path, precision):
    """Torch 2.11's Adam on the meta device failed with "Tensor.item() cannot be called on meta
    tensors" (seen on an H100 machine): tensors the step makes without a device go to the CPU, as in
    a real GPU job, so the counter is readable and the moments still count."""
    script = tmp_path / "old_style.py"
    script.write_text(OLD_STYLE_OPTIMIZER)
    result = estimate(f"{script}:job", Settings(precision=precision))
    steady = result.phase("steady").categories
    weights = (256 * 128 + 128) * 4
    assert steady.parameters == weights and steady.gradients == weights
    assert steady.optimizer_state == weights  # the moments; the counters are CPU tensors in a GPU job too
    assert result.host_state == 2 * 4


SMALL_CNN = """\
import torch
from torch import nn

def job(fused=False):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))
    return model, torch.randn(4, 3, 32, 32), torch.optim.Adam(model.parameters(), fused=fused)

def fused():
    return job(fused=True)
"""
CNN_PARAMS = 4 * (8 * 3 * 3 * 3 + 8 + 8 + 8 + 8 * 30 * 30 * 10 + 10)  # bytes: conv, BatchNorm, linear
CNN_TENSORS = 6  # a weight and a bias each


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_adams_step_counters_are_the_hosts(tmp_path, precision):
    """Without capturable or fused, torch keeps Adam's step counters on the CPU in a GPU job: the
    device's optimizer state is exactly the two moments, twice the parameters (was 2P + 24 B here)."""
    script = tmp_path / "cnn.py"
    script.write_text(SMALL_CNN)
    result = estimate(f"{script}:job", Settings(precision=precision), what_if=False)
    for phase in ("backward", "optimizer", "steady"):
        categories = result.phase(phase).categories
        assert categories.parameters == CNN_PARAMS
        assert categories.optimizer_state == 2 * CNN_PARAMS, phase
    assert result.host_state == 4 * CNN_TENSORS


@pytest.mark.parametrize("optimizer, moments", [("adagrad", 1), ("rmsprop", 1), ("adamw", 2)])
def test_the_chosen_optimizers_step_counters_are_the_hosts(optimizer, moments):
    """--optimizer's too: Adagrad makes its counters as it is built, with no device (the CPU in a GPU
    job; the meta device here, before the optimizer was built with the CPU as the default device)."""
    from gputui.estimate.job import build, load

    tensors = len(list(build(load(f"{GPT}:build"), None).model.parameters()))
    result = estimate(f"{GPT}:build", Settings(optimizer=optimizer), what_if=False)
    steady = result.phase("steady").categories
    assert steady.optimizer_state == moments * steady.parameters
    assert result.host_state == 4 * tensors

def test_fused_adams_step_counters_are_the_devices(tmp_path):
    """Fused, torch keeps the counters on the parameters' device. Torch 2.13 refuses fused=True for
    meta tensors (in the job's own function), and runs it on the CPU: amp's fake CPU tensors."""
    script = tmp_path / "cnn.py"
    script.write_text(SMALL_CNN)
    result = estimate(f"{script}:fused", Settings(precision="amp"), what_if=False)
    assert result.phase("steady").categories.optimizer_state == 2 * CNN_PARAMS + 4 * CNN_TENSORS
    assert result.host_state == 0


def test_capturable_adams_step_counters_are_the_devices():
    """Capturable, the counters are on the parameters' device too. Torch 2.13 steps it on CUDA only
    (on the meta device and the CPU alike it refuses), having made the state: that state is counted."""
    from gputui.estimate.job import Job
    from gputui.estimate.ledger import Ledger
    from gputui.estimate.step import classify

    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), capturable=True)
    model(torch.randn(2, 4)).sum().backward()
    with pytest.raises(AssertionError, match="capturable=True"):
        optimizer.step()
    ledger = Ledger()
    classify(ledger, Job(model, None, optimizer))
    weights = (4 * 3 + 3) * 4
    assert ledger.now()["optimizer_state"] == 2 * weights + 2 * 4
    assert ledger.host == 0


# -- --max-batch and the what-ifs


def test_the_largest_batch_fits_and_one_percent_more_does_not():
    room_total = 64 << 20
    result = estimate(f"{GPT}:build", Settings(), device_total=room_total + CUDA_CONTEXT, max_batch=True,
                      what_if=False)
    largest = result.largest_batch
    assert largest is not None and largest > 8
    assert result.safe_batch is not None and 0.8 * largest <= result.safe_batch < largest
    fits = estimate(f"{GPT}:build", Settings(batch_size=largest), device_total=room_total + CUDA_CONTEXT,
                    what_if=False)
    assert fits.fits() is True
    over = estimate(f"{GPT}:build", Settings(batch_size=largest + largest // 100 + 1),
                    device_total=room_total + CUDA_CONTEXT, what_if=False)
    assert over.fits() is False


def test_what_ifs_measured_and_computed():
    from gputui.analysis.whatif import eight_bit_optimizer, zero_sharding

    result = estimate(f"{GPT}:build", Settings(batch_size=8), device_total=16 << 30)
    rows = {w.change: w for w in result.what_ifs}
    assert [w.measured for w in result.what_ifs] == [True] * 5 + [False] * 2
    assert rows["bf16 weights and activations"].peak == estimate(f"{GPT}:build", Settings(
        batch_size=8, precision="bf16")).peak
    assert rows["batch 4, 2x accumulation"].peak == estimate(f"{GPT}:build", Settings(batch_size=4)).peak
    assert rows["activation checkpointing"].saving > 0.3 * result.peak
    # computed: each phase's peak less the saving there; the highest phase is the backward pass
    # (no gradients yet at its peak), where the optimizer state alone is saved
    state = result.phase("backward").categories.optimizer_state
    assert eight_bit_optimizer(result.phase("backward").categories) == 3 * state // 4
    assert rows["8-bit optimizer state"].peak == max(
        p.total - eight_bit_optimizer(p.categories) for p in result.phases)
    assert rows["ZeRO-2 over 8 GPUs"].peak == max(
        p.total - zero_sharding(8)(p.categories) for p in result.phases)
    for w in result.what_ifs:
        assert w.saving == result.peak - w.peak


def test_max_batch_needs_a_device_and_a_batch_size(env, tmp_path):
    out = gputui(env, "estimate", f"{GPT}:build", "--max-batch")
    assert out.returncode == 2 and "--max-batch needs the device" in out.stderr
    script = tmp_path / "fixed.py"
    script.write_text("import torch\ndef job():\n    return torch.nn.Linear(2, 2), torch.randn(4, 2)\n")
    out = gputui(env, "estimate", f"{script}:job", "--max-batch", "--device-memory", "1GiB")
    assert out.returncode == 2 and "--max-batch needs FUNCTION to take batch_size" in out.stderr


def test_largest_batch_fit():
    from gputui.analysis.whatif import largest_batch

    assert largest_batch({2: 300, 4: 500}, 1000) == 9  # 100 fixed, 100 a sample
    assert largest_batch({2: 300, 4: 500}, 50) == 0  # the fixed part alone does not fit
    assert largest_batch({2: 300, 4: 300}, 1000) is None  # a sample costs nothing here


def test_the_command_lines_choices_are_what_the_step_runs():
    from gputui.estimate.step import DTYPES, OPTIMIZERS
    from gputui.model.estimate import OPTIMIZER_CHOICES, PRECISIONS

    assert tuple(OPTIMIZERS) == OPTIMIZER_CHOICES
    assert (*DTYPES, "amp") == PRECISIONS
