"""``gputui estimate``: the table and verdict, the JSON document, the rule of thumb's 850M-parameter
check on the meta device, and a clear line with exit 2 for every bad SCRIPT:FUNCTION."""

from __future__ import annotations

import json
import os
import time

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
    tensors (no real memory), in seconds."""
    started = time.perf_counter()
    result = estimate(f"{GPT}:gpt_850m", Settings(), device_total=16 * 10**9)
    assert time.perf_counter() - started < 60
    steady = result.phase("steady").categories
    assert steady.parameters == 4 * PARAMS_850M
    assert steady.gradients == 4 * PARAMS_850M
    # AdamW's two moments, and one 4-byte step count per parameter tensor
    tensors = 2 + 25 * 12 + 2  # embeddings (the head tied to wte), 12 a block, the final LayerNorm
    assert steady.optimizer_state == 8 * PARAMS_850M + 4 * tensors
    model_states = steady.parameters + steady.gradients + steady.optimizer_state
    assert model_states == pytest.approx(13.6e9, rel=0.01)
    assert result.fits() is False
    assert result.runs_out_in() == "optimizer"
    assert result.device_usable == 16 * 10**9 - CUDA_CONTEXT


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
    out = gputui(env, "estimate", f"{script}:shape", "--batch-size", "2")
    assert out.returncode == 2 and "shape() takes no batch_size" in out.stderr


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
