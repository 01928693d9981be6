"""The probe in every rank: a real 2-rank DDP job (gloo, CPU) under ``gputui run -- torchrun``.

While it trains, ``gputui probes --json`` lists one probe per worker (not the launcher), each with its
rank, and the categories on each rank are the model's: parameters and gradients its exact bytes, SGD's
momentum the same again.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT, gputui

pytest.importorskip("torch.distributed")
import ddp_job  # noqa: E402

DEADLINE = 45.0  # seconds for both ranks to train and be seen


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_PROBE", "PYTHONPATH")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return clean


def probes_now(env):
    result = gputui(env, "probes", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def trained(report):
    (device,) = report["devices"]
    return len(report["steps"]) >= 3 and (device["categories"]["gradients"] or 0) > 0


def test_each_rank_of_a_ddp_job_has_its_own_probe(env, tmp_path):
    stop = tmp_path / "stop"
    started = time.monotonic()
    job = subprocess.Popen(
        [sys.executable, "-m", "gputui", "run", "--", sys.executable, "-m", "torch.distributed.run",
         "--standalone", "--nproc-per-node=2", str(Path(ddp_job.__file__)), str(stop)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            document = probes_now(env)
            reports = document["probes"]
            if len(reports) == 2 and all(trained(r) for r in reports):
                break
            assert job.poll() is None, job.communicate()
            assert time.monotonic() - started < DEADLINE, document
            time.sleep(0.5)
        ranks = sorted((r["placement"]["rank"], r["placement"]["local_rank"], r["placement"]["world_size"])
                       for r in reports)
        assert ranks == [(0, 0, 2), (1, 1, 2)]
        (rendezvous,) = {r["placement"]["rendezvous"] for r in reports}
        assert rendezvous.startswith("torchelastic ")  # --standalone gives the run an id of its own
        # the collector's grouping, from /proc (CPU ranks are in no NVML list): one job, under its launcher
        (grouped,) = document["jobs"]
        assert (grouped["grouped_by"], grouped["launcher"], grouped["world_size"]) == ("launcher", "torchrun", 2)
        assert [(r["rank"], r["probed"]) for r in grouped["ranks"]] == [(0, True), (1, True)]
        assert grouped["name"] == "ddp_job.py (torchrun)"
        for report in reports:
            assert report["command"][-2].endswith("ddp_job.py")  # a worker, not the launcher
            (device,) = report["devices"]
            cats = device["categories"]
            assert cats["parameters"] == ddp_job.PARAMETER_BYTES
            assert cats["gradients"] == ddp_job.PARAMETER_BYTES
            assert cats["optimizer_state"] == ddp_job.PARAMETER_BYTES  # SGD's momentum buffers
    finally:
        stop.touch()
        out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    announced = [line for line in err.splitlines() if line.startswith("gputui: probe started")]
    assert len(announced) == 2, err
    assert sorted(line.split("(")[1].split(")")[0] for line in announced) == ["rank 0 of 2", "rank 1 of 2"]
    print(f"DDP test: {time.monotonic() - started:.1f} s")
