"""``gputui estimate``'s FSDP2 what-if: one rank of the job sharded N ways, measured on a fake process group
and fake tensors, held against the bytes FSDP2's rules give (dim 0 split N ways, padded) and against
the per-rank figures of the real 2-rank FSDP2 job of tests/sharded_job.py."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from gputui.estimate import sharded  # noqa: E402

if sharded.available() is not None:
    pytest.skip(sharded.available(), allow_module_level=True)

import sharded_job  # noqa: E402
from cli_helpers import ROOT, gputui, no_traceback  # noqa: E402

from gputui import units  # noqa: E402
from gputui.estimate.job import load  # noqa: E402
from gputui.estimate.run import estimate  # noqa: E402
from gputui.estimate.step import Settings, measure  # noqa: E402
from gputui.plain.estimate import text  # noqa: E402

JOB = '''
import torch
from torch import nn


def build(batch_size=32, rows=128):
    model = nn.Sequential(nn.Linear(64, rows), nn.ReLU(), nn.Linear(rows, 10))
    x, y = torch.randn(batch_size, 64), torch.randint(0, 10, (batch_size,))
    return model, x, torch.optim.Adam(model.parameters()), lambda out: nn.functional.cross_entropy(out, y)


def odd(batch_size=32):
    return build(batch_size, rows=130)
'''


@pytest.fixture
def job(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return str(script)


def steady(function, world_size):
    measured = measure(function, Settings(world_size=world_size))
    return measured, next(p for p in measured.phases if p.phase == "steady")


def test_a_rank_holds_what_the_real_fsdp2_jobs_rank_holds(job):
    """The model of tests/sharded_job.py: each of 2 ranks holds half of every parameter, gradient and
    Adam moment (its step counters on the host), as that real gloo job's ranks were summed to hold."""
    measured, after = steady(load(f"{job}:build"), 2)
    half = sharded_job.PARAMETER_BYTES // 2
    c = after.categories
    assert (c.parameters, c.gradients, c.optimizer_state) == (half, half, 2 * half)
    assert measured.host_state == 4 * 4  # a 4-byte step counter for each of the 4 parameters
    # and nothing else stays: the gathered parameters FSDP2 freed (storage.resize_(0)) are not counted
    assert after.total == 4 * half + 32 * 64 * 4 + 32 * 8  # the batch and labels, held by the job, are the rest
    assert measured.optimizer == "Adam"


def test_fsdp2s_padding_rows_are_counted(job):
    """130 rows over 4 ranks: rank 0 holds ceil(130/4) = 33 of each, 10 rows: 3 (padded, not 2.5)."""
    _, after = steady(load(f"{job}:odd"), 4)
    shards = (33 * 64 + 33 + 3 * 130 + 3) * 4
    assert shards == 10152 and shards > (64 * 130 + 130 + 130 * 10 + 10) * 4 // 4
    c = after.categories
    assert (c.parameters, c.gradients, c.optimizer_state) == (shards, shards, 2 * shards)


def test_the_what_if_row_is_measured_and_the_zero_row_computed(job):
    result = estimate(f"{job}:build", Settings(), device_total=1 << 30, gpus=2, fsdp2=True)
    rows = {w.change: w for w in result.what_ifs}
    fsdp2 = rows["FSDP2 over 2 GPUs, a rank"]
    assert fsdp2.measured is True and rows["ZeRO-2 over 2 GPUs"].measured is False
    rank = measure(load(f"{job}:build"), Settings(world_size=2))
    assert fsdp2.peak == max(p.total for p in rank.phases)
    assert fsdp2.saving == result.peak - fsdp2.peak


def test_tied_weights_stay_in_the_root_and_the_gpt_shards(tmp_path):
    """examples/estimate_gpt.py ties its head to the embedding: FSDP2 wants them in one group."""
    function = load(f"{ROOT / 'examples' / 'estimate_gpt.py'}:build")
    whole, one = steady(function, None)[1], steady(function, 8)[1]
    assert one.categories.parameters < whole.categories.parameters / 7
    assert one.categories.optimizer_state == 2 * one.categories.parameters


def test_a_bf16_rank_holds_half_the_bytes(job):
    """--precision bf16 with FSDP2: the model cast on fake tensors (Module.to cannot swap them there)."""
    measured = measure(load(f"{job}:build"), Settings(world_size=2, precision="bf16"))
    c = measured.phases[-1].categories
    quarter = sharded_job.PARAMETER_BYTES // 4
    assert (c.parameters, c.gradients, c.optimizer_state) == (quarter, quarter, 2 * quarter)


def test_without_the_fake_process_group_the_row_is_left_out_with_why(job, monkeypatch):
    from gputui.errors import UserError

    why = "FSDP2 on a fake process group is not available in this torch (no fake_pg)"
    monkeypatch.setattr(sharded, "available", lambda: why)
    result = estimate(f"{job}:build", Settings(), gpus=2, fsdp2=True)
    assert [w.change for w in result.what_ifs if "FSDP2" in w.change] == []
    assert "ZeRO-2 over 2 GPUs" in {w.change for w in result.what_ifs}
    assert result.left_out == (f"FSDP2 over 2 GPUs, a rank: {why}",)
    assert text(result).splitlines()[-1] == f"left out: FSDP2 over 2 GPUs, a rank: {why}"
    with pytest.raises(UserError, match="^FSDP2 on a fake process group is not available"):
        measure(load(f"{job}:build"), Settings(world_size=2))


def test_the_sharded_step_runs_only_when_asked(job, monkeypatch):
    """It is several times slower than the plain step (bench/bench_estimate.py): the what-ifs leave it out."""
    def refused(world_size):
        raise AssertionError(f"a sharded step over {world_size} ranks was run, unasked")

    monkeypatch.setattr(sharded, "fake_world", refused)
    result = estimate(f"{job}:build", Settings(), gpus=2, max_batch=True, device_total=1 << 30)
    assert [w.change for w in result.what_ifs][-1] == "ZeRO-2 over 2 GPUs" and result.left_out == ()


def test_fsdp2_refusing_the_model_is_a_left_out_row_in_one_line(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import torch\n\n"  # FSDP2 wants one dtype in a group: a float64 bias beside fp32 weights
                      "def build():\n    model = torch.nn.Linear(4, 4)\n"
                      "    model.bias = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))\n"
                      "    return model, torch.randn(2, 4)\n")
    result = estimate(f"{script}:build", Settings(), gpus=2, fsdp2=True)
    (why,) = result.left_out  # torch writes the two dtypes as a set: in either order
    assert why.startswith("FSDP2 over 2 GPUs, a rank: the training step's forward phase raised AssertionError: "
                          "FSDP expects uniform original parameter dtype but got {torch.float")
    assert "torch.float64" in why and "\n" not in why
    assert "SGD with momentum" in {w.change for w in result.what_ifs}  # the other rows stay


def test_a_resize_in_place_is_counted_where_it_happens():
    """FSDP2 frees a gathered parameter with storage.resize_(0) and makes it again with resize_(size):
    the ledger is told at once, so a phase's peak holds the gathered bytes and the free ends them."""
    from gputui.estimate.ledger import Ledger

    before = dict(vars(torch.UntypedStorage))
    with Ledger() as ledger, sharded.resizes_told(ledger):
        gathered = torch.empty(256)
        assert ledger.total == 1024
        gathered.untyped_storage().resize_(0)
        assert ledger.total == 0
        ledger.phase("forward")
        gathered.untyped_storage().resize_(4096)
        gathered.untyped_storage().resize_(0)
        assert (ledger.total, ledger.peaks["forward"].total) == (0, 4096)
    assert dict(vars(torch.UntypedStorage)) == before  # the class as it was


def test_gputui_estimate_fsdp2_on_the_example():
    """The command as users type it: the row measured, at the sharded step's own peak; over one GPU, why not."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    env.update(COLUMNS="80", PYTHONPATH=str(ROOT))
    gpt = f"{ROOT / 'examples' / 'estimate_gpt.py'}:build"
    out = gputui(env, "estimate", gpt, "--fsdp2", "--zero-gpus", "2", "--device-memory", "1GiB")
    assert out.returncode == 0, out.stderr
    rank_peak = max(p.total for p in measure(load(gpt), Settings(world_size=2)).phases)
    words = out.stdout.splitlines()[-1].split()
    assert words[:7] == ["FSDP2", "over", "2", "GPUs,", "a", "rank", units.size_compact(rank_peak)]
    assert (words[7], words[-1]) == ("saves", "measured")
    out = gputui(env, "estimate", gpt, "--fsdp2", "--zero-gpus", "1", "--no-what-if")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == [
        "", "left out: FSDP2 over 1 GPU: one GPU shards nothing, give --zero-gpus 2 or more"]
    no_traceback(out)
