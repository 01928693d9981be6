"""The probe inside sharded training: real 2-rank FSDP2, FSDP1 and DeepSpeed ZeRO-1/2/3 jobs (gloo, CPU),
each rank's figures held against the truth summed in the rank, and the job view adding the ranks' shards up.

Under FSDP and ZeRO-3 each rank holds half of every parameter, gradient and Adam moment; for forward and
backward FSDP gathers the unsharded parameters, which are counted apart (``gathered``) and not as
activations. Under ZeRO-1/2 each rank holds the whole model and shards the optimizer: an fp32 copy of
its half, Adam's moments of it, and (for the step) its half of the gradients.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)", allow_module_level=True)

import sharded_job  # noqa: E402
from cli_helpers import ROOT  # noqa: E402

from gputui import units  # noqa: E402
from gputui.analysis.jobs import analyse_job  # noqa: E402
from gputui.model import Job, JobRank, ProbeReport, Snapshot  # noqa: E402
from gputui.model.codec import from_jsonable  # noqa: E402
from gputui.plain.jobs import model_line  # noqa: E402

TIMEOUT = 180.0  # two ranks importing torch (and DeepSpeed) on a loaded 2-core machine
# The first DeepSpeed job on a machine compiles DeepSpeed's shared-memory op (g++, once, cached in
# ~/.cache/torch_extensions): up to a few minutes more on a loaded 2-core machine.
FIRST_DEEPSPEED_TIMEOUT = 480.0
ZERO12 = ("zero1", "zero2")
# ZeRO-1/2 flatten the model into one buffer padded to a multiple of 4 elements (2 ranks x DeepSpeed's
# alignment of 2): 9610 parameters become 9612, 4806 a rank.
PADDED = 9612 * 4


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_job(kind: str, out: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE",)}
    # (the checkout first, then whatever else the caller's path holds: a GPU machine's carried packages)
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(PYTHONPATH=os.pathsep.join(path), OMP_NUM_THREADS="1", GPUTUI_PROBE_DIR=str(out))
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(Path(sharded_job.__file__)), kind, free_port(), str(out)],
                          env=env, capture_output=True, text=True,
                          timeout=FIRST_DEEPSPEED_TIMEOUT if kind.startswith("zero") else TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"{kind} job: {time.monotonic() - started:.1f} s")
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


# slow: real framework training (two ranks, a minute each kind on a loaded machine)
@pytest.fixture(scope="module", params=["fsdp2", "fsdp1", "zero1", "zero2", "zero3"])
def ranks(request, tmp_path_factory):
    if request.param.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (pip install deepspeed, DS_BUILD_OPS=0)")
    return run_job(request.param, tmp_path_factory.mktemp(request.param))


def test_each_rank_shows_its_local_shards(ranks):
    for index, rank in enumerate(ranks):
        report = from_jsonable(ProbeReport, rank["report"])
        truth = rank["truth"]
        kind = rank["kind"]
        assert report.problems == ()
        # each rank holds half of each parameter (both Linears' row counts are even); ZeRO-3 twice:
        # the model's partition and the optimizer's fp32 copy of it; ZeRO-1/2 the whole (padded) model
        # and the fp32 copy of its half
        whole = PADDED if kind in ZERO12 else sharded_job.PARAMETER_BYTES
        copies = {"zero1": 3, "zero2": 3, "zero3": 2}.get(kind, 1)
        assert truth["parameters"] == copies * whole // 2
        step, now = report.steps[-1].categories, report.devices[0].categories
        for cats in (step, now):
            assert (cats.parameters, cats.gradients, cats.optimizer_state) == (
                truth["parameters"], truth["gradients"], truth["optimizer_state"])
        # Adam: two moments per shard, and a 4-byte step counter for each of the 4 parameters (FSDP2),
        # of the 2 flat parameters (FSDP1), of ZeRO's one flat partition
        counters = {"fsdp2": 4, "fsdp1": 2}.get(kind, 1)
        assert truth["optimizer_state"] == 2 * whole // 2 + counters * 4
        if kind in ZERO12:
            # Rank 0's half of the gradients lies inside the first weight's gradient: a view, which keeps
            # all of it (64 x 128 floats); rank 1's is a flat tensor of its own.
            assert truth["gradients"] == (64 * 128 * 4, PADDED // 2)[index]


def test_gathered_parameters_are_their_own_category_not_activations(ranks):
    for rank in ranks:
        report = from_jsonable(ProbeReport, rank["report"])
        step, now = report.steps[-1].categories, report.devices[0].categories
        # the weights autograd saves are the gathered ones: not activations
        assert now.activations == sharded_job.ACTIVATION_BYTES
        assert report.steps[-1].activations_peak == sharded_job.ACTIVATION_BYTES
        if rank["kind"] in ZERO12:  # (the whole model is there all along: nothing is gathered)
            assert step.gathered is None and now.gathered is None
            continue
        # Inside the first Linear's forward both are unsharded: its own, and the root's (the last
        # Linear), which FSDP keeps gathered from the root's forward until its backward.
        assert step.gathered == now.gathered == sharded_job.FIRST + sharded_job.LAST


def test_the_job_view_adds_the_ranks_up_to_the_whole_model(ranks):
    reports = tuple(from_jsonable(ProbeReport, rank["report"]) for rank in ranks)
    job = Job(key="master 127.0.0.1", name="sharded_job.py", grouped_by="master", world_size=2,
              ranks=tuple(JobRank(pid=r.pid, rank=i, probed=True) for i, r in enumerate(reports)))
    model = analyse_job(job, Snapshot(taken_at=time.time(), probes=reports, jobs=(job,))).model
    if ranks[0]["kind"] in ZERO12:  # each rank holds the whole model, as DDP's replicas do: nothing to add up
        assert model is None
        return
    assert model is not None
    copies = 2 if ranks[0]["kind"] == "zero3" else 1  # (ZeRO-3: the model's partitions and fp32 copies)
    assert (model.parameters, model.ranks, model.world_size) == (copies * sharded_job.PARAMETER_BYTES, 2, 2)
    assert model.gradients == sharded_job.PARAMETER_BYTES
    assert model.optimizer_state == sum(r["truth"]["optimizer_state"] for r in ranks)
    assert model.gathered == sharded_job.PARAMETER_BYTES
    assert model_line(model) == (f"sharded model, 2 ranks added up: parameters {units.size(model.parameters)}, "
                                 "gradients 37.5 KiB, "
                                 f"optimizer state {units.size(model.optimizer_state)}; a rank gathers up to "
                                 "37.5 KiB unsharded for forward/backward")
