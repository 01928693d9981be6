"""The OOM flight recorder on a real CPU job (issue 18): a probed job that runs out of host memory under
an address-space limit leaves a report, and ends exactly as it would without the probe."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT

from gputui.analysis.breakdown import breakdown_of
from gputui.link import oom_file
from gputui.model import ProbeReport, from_jsonable

JOB = Path(__file__).parents[1] / "oom_job.py"
FORWARD_LINE = next(n for n, line in enumerate(JOB.read_text().splitlines(), 1) if "the allocation that fails" in line)

pytest.importorskip("torch")


def run_job(tmp_path: Path, probed: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTUI_")}
    env.update(PYTHONPATH=str(ROOT), GPUTUI_PROBE_DIR=str(tmp_path / "probes"), GPUTUI_OOM_DIR=str(tmp_path / "oom"))
    (tmp_path / "probes").mkdir(mode=0o700, exist_ok=True)
    if probed:
        env["GPUTUI_PROBE"] = "1"
    return subprocess.run([sys.executable, str(JOB)], env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The job without the probe, then with it."""
    plain_dir, probed_dir = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("probed")
    return (run_job(plain_dir, probed=False), plain_dir), (run_job(probed_dir, probed=True), probed_dir)


def last_line(stderr: str, startswith: str) -> str:
    return [line for line in stderr.splitlines() if line.startswith(startswith)][-1]


def test_the_job_ends_as_it_would_without_the_probe(runs):
    (plain, _), (probed, _) = runs
    assert plain.stdout.splitlines()[0] == probed.stdout.splitlines()[0] == "limited"
    assert plain.returncode == probed.returncode == 1
    error = last_line(plain.stderr, "RuntimeError")
    assert "can't allocate memory" in error
    # the same exception in the same words (where the limit is met, and so the size asked, may differ:
    # the probe's own memory is in the address space too)
    assert re.sub(r"\d+", "N", last_line(probed.stderr, "RuntimeError")) == re.sub(r"\d+", "N", error)
    assert "never ran out" not in plain.stderr


def test_the_report_names_the_step_the_phase_and_the_line(runs):
    _, (probed, where) = runs
    files = list((where / "oom").iterdir())
    assert len(files) == 1 and files[0].name.startswith("oom-") and files[0].suffix == ".json"
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    # the last line on stderr says where the report is, after the traceback
    assert probed.stderr.splitlines()[-1] == (f"gputui: out of memory: a report of what filled it is in {files[0]} "
                                              "(`gputui oom` prints it)")
    report = from_jsonable(ProbeReport, oom_file.read(files[0]))
    oom = report.last_oom
    assert oom is not None and oom.device == "cpu" and "can't allocate memory" in oom.message
    assert oom.phase == "forward"
    assert oom.where[-1].startswith(f"{JOB}:{FORWARD_LINE} in forward")
    assert oom.line == f"{JOB}:{FORWARD_LINE} in forward"  # the job's own line, innermost
    assert oom.step is not None and oom.step > 3  # past the warm-up, under the limit
    assert report.steps[-1].step == oom.step  # the steps done, the failing one the next
    assert oom.requested == 128 << 20  # the forward pass's scratch
    # the leak that filled it was seen before: what keeps it, once (a module's globals are also its
    # top-level frame's locals: one keeper)
    keeps = next(n for n, line in enumerate(JOB.read_text().splitlines(), 1) if "the leak: every" in line)
    assert [(k.name, k.where) for k in report.keepers] == [("kept", (f"{JOB}:{keeps} in step",))]


def test_the_reports_breakdown_adds_up(runs):
    _, (_, where) = runs
    report = from_jsonable(ProbeReport, oom_file.read(next((where / "oom").iterdir())))
    (device,) = report.devices
    categories = device.categories
    assert categories is not None
    weights = 2 * (2048 * 2048 + 2048) * 4
    assert categories.parameters == weights and categories.gradients == weights
    assert categories.optimizer_state == weights  # SGD's momentum
    breakdown = breakdown_of(report, device, None)
    assert breakdown is not None
    assert sum(item.size for item in breakdown.items) == breakdown.total


def test_nothing_is_left_behind_but_the_report(runs):
    _, (_, where) = runs
    assert list((where / "probes").iterdir()) == []  # the socket went with the job


def test_gputui_oom_prints_the_latest_report(runs):
    _, (_, where) = runs
    # No COLUMNS: into a pipe the lines are whole (a COLUMNS=80 left in the environment cut the OOM message)
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "PYTHONPATH": str(ROOT),
           "GPUTUI_OOM_DIR": str(where / "oom"), "NO_COLOR": "1"}
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"OOM report {next((where / 'oom').iterdir())}, written ")
    assert any("can't allocate memory" in line for line in lines), shown.stdout  # (what it said, if not)
    report = from_jsonable(ProbeReport, oom_file.read(next((where / "oom").iterdir())))
    assert f"  in the forward pass of step {report.last_oom.step + 1}; at {JOB}:{FORWARD_LINE} in forward" in lines
    as_json = subprocess.run([sys.executable, "-m", "gputui", "oom", "--json"], env=env, capture_output=True,
                             text=True, timeout=60)
    document = json.loads(as_json.stdout)
    assert document["schema"] == "gputui.probe-report" and document["report"]["last_oom"]["phase"] == "forward"


def test_gputui_oom_without_a_report_says_where_it_looked(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUTUI_OOM_DIR": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 2
    assert shown.stderr.strip().splitlines()[-1] == (
        f"gputui: no OOM report in {tmp_path}: a probed job leaves one there when an out-of-memory error ends it "
        "(set GPUTUI_OOM_DIR to look elsewhere)")
    (tmp_path / "not.json").write_text("{}")
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom", str(tmp_path / "not.json")], env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 2 and "is not an OOM report" in shown.stderr and "Traceback" not in shown.stderr


def test_reports_are_private_and_the_newest_are_kept(tmp_path):
    for i in range(oom_file.KEEP + 3):
        path = oom_file.write({"pid": 7, "taken_at": float(i)}, 7, tmp_path, now=1_700_000_000 + i)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    kept = sorted(tmp_path.iterdir())
    assert len(kept) == oom_file.KEEP
    assert oom_file.latest(tmp_path) == kept[-1]
    assert oom_file.read(kept[-1]) == {"pid": 7, "taken_at": float(oom_file.KEEP + 2)}
    assert {stat.S_IMODE(p.stat().st_mode) for p in kept} == {0o600}
    with pytest.raises(FileExistsError):  # never over another report (or through a planted link)
        oom_file.write({}, 7, tmp_path, now=1_700_000_000 + oom_file.KEEP + 2)


def test_a_cuda_oom_in_the_optimizer_names_the_jobs_line_not_torchs():
    """The stack of a CUDA OOM seen on an H100 (torch 2.11): the job's `optimizer.step()` line, then
    seven frames inside torch. The phase is the optimizer's; the line is the job's own, though the
    innermost frames kept in `where` are all torch's."""
    from traceback import FrameSummary

    from gputui.probe.oom import phase_of, user_line

    torch_dir = str(Path(pytest.importorskip("torch").__file__).parent)
    frames = [FrameSummary("/home/me/train.py", 15, "<module>"),
              FrameSummary(f"{torch_dir}/optim/optimizer.py", 533, "wrapper"),
              FrameSummary(f"{torch_dir}/optim/optimizer.py", 81, "_use_grad"),
              FrameSummary(f"{torch_dir}/optim/adam.py", 248, "step"),
              FrameSummary(f"{torch_dir}/optim/adam.py", 971, "adam"),
              FrameSummary(f"{torch_dir}/optim/adam.py", 791, "_multi_tensor_adam")]
    assert phase_of(frames) == "optimizer"
    assert user_line(frames) == "/home/me/train.py:15 in <module>"
    assert user_line(frames[1:]) is None


def test_a_real_cuda_oom_report_reads_back_with_the_jobs_line(tmp_path):
    """A report a probe wrote on an H100 as a job ran out in Adam's step (tests/fixtures/torch)."""
    real = ROOT / "tests" / "fixtures" / "torch" / "real-h100-oom-report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom", str(real)], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "  in the optimizer's step of step 207; at /home/user/oom_job.py:15 in <module>" in lines
    assert any(line.startswith("  last OOM") and line.endswith("at /home/user/oom_job.py:15 in <module>")
               for line in lines)
    report = from_jsonable(ProbeReport, oom_file.read(real))
    oom = report.last_oom
    assert (oom.device, oom.requested, oom.allocated, oom.reserved) == ("cuda:0", 64 << 20, 2417115136, 2501902336)
    (device, _) = report.devices
    breakdown = breakdown_of(report, device, None)
    assert breakdown is not None and sum(item.size for item in breakdown.items) == breakdown.total
    assert device.categories.parameters == device.categories.gradients == 134250496  # 2 x Linear(4096, 4096)
