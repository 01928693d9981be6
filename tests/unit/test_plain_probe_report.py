"""``gputui probe PID`` as text: the leak verdict and advice that --once gives, and a step table
that shows what a CPU-only job has (host memory) instead of columns of n/a."""

import dataclasses
import re
import subprocess
import sys
import time
from datetime import timezone

import pytest
from cli_helpers import ROOT, gputui
from plain_data import probe_text

from gputui.model import MemoryCategories, ProbeDevice, ProbeReport, StepRecord

KIB, MIB = 1 << 10, 1 << 20
BASE = 300 * MIB


def cpu_job(n=80):
    """A CPU-only job whose host memory beyond its tensors grows 64 KiB a step (a dict of tensors).

    As the probe does, memory is read at three steps in four; the others carry their time only.
    """
    steps = tuple(StepRecord(
        step=s, ended_at=100.0 + s * 0.005, duration=0.005, device="cpu", allocated=4 * MIB,
        categories=MemoryCategories(MIB, MIB, 2 * MIB, 0, None),
        host_allocated=4 * MIB + BASE + s * 64 * KIB, host_memory=4 * MIB + BASE + 400 * MIB,
    ) if s % 4 else StepRecord(step=s, ended_at=100.0 + s * 0.005, duration=0.005)
        for s in range(1, n + 1))
    return ProbeReport(pid=7, taken_at=steps[-1].ended_at, torch_version="2.13.0+cpu",
                       command=("python", "train.py"), devices=(ProbeDevice("cpu"),), steps=steps)


def test_a_cpu_jobs_step_table_shows_measured_steps_and_host_memory():
    lines = probe_text(cpu_job(), width=120, tz=timezone.utc).splitlines()
    head = lines.index("Last 10 of 60 measured steps (steps 1 to 80; the probe reads memory every few steps)")
    assert lines[head + 1:head + 4] == [
        "STEP  TIME ALLOCATED HOST MEM",
        "  67 5.0ms   4.00MiB   704MiB",
        "  69 5.0ms   4.00MiB   704MiB",  # step 68 was not measured
    ]
    assert "n/a" not in "\n".join(lines[head:head + 12])


def test_the_step_tables_heading_names_the_steps_a_window_spans_not_how_many_it_holds():
    # A long job's report keeps the latest steps only: 60 of them here, the job at its 900th.
    report = cpu_job(900)
    report = dataclasses.replace(report, steps=report.steps[-60:])
    lines = probe_text(report, width=120, tz=timezone.utc).splitlines()
    assert "Last 10 of 45 measured steps (steps 841 to 900; the probe reads memory every few steps)" in lines


def test_the_report_carries_the_verdict_and_advice_without_a_gpu_snapshot():
    out = probe_text(cpu_job(), width=200, tz=timezone.utc)
    leak = next(line for line in out.splitlines() if line.lstrip().startswith("leak: "))
    assert "host memory in use grows 64.0 KiB per step" in leak and "(other +64.0 KiB/step)" in leak
    assert any(line.lstrip().startswith("advice 1: ") for line in out.splitlines())


def test_a_cpu_jobs_untracked_growth_is_a_part_of_its_own():
    # Host memory beyond the tracked tensors grew 64 KiB a step from step 1 to step 79 (the last read).
    lines = probe_text(cpu_job(), width=120, tz=timezone.utc).splitlines()
    assert "  cpu:  untracked growth 4.88MiB (host memory beyond the tracked tensors, since step 1)" in lines


def test_demo_probe_prints_verdict_advice_and_time_to_oom():
    result = subprocess.run([sys.executable, "-m", "gputui", "--demo", "leaky", "probe", "51200"],
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    leak = next(line for line in lines if line.startswith("  leak: "))
    assert "allocated grows 48.0 MiB per step" in leak and "out of memory at step" in leak
    assert any(line.startswith("  advice 1: ") for line in lines)
    assert any("context+libs 500MiB" in line for line in lines)  # NVML's share, from the GPUs now


# A real CPU job whose measured steps are now and then long ones (it saves a checkpoint): the probe's
# measured steps grow rare, and its figures would go stale between them.
STALLING_JOB = """
import os, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import loops
from gputui.probe import runtime
torch.set_num_threads(1)
probe = runtime.start()
job = loops.make_job()
step, started = 0, time.monotonic()
while time.monotonic() - started < 120:
    step += 1
    if probe.tracker._measuring and step % 8 == 0:
        time.sleep(0.2)
    loops.clean(job, 1)
    if step == 300:
        print("ready", os.getpid(), flush=True)
"""


def test_gputui_probe_shows_figures_read_at_the_jobs_latest_steps(tmp_path):
    pytest.importorskip("torch")  # a real training job
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GPUTUI_PROBE_DIR": str(tmp_path),
           "COLUMNS": "200"}
    job = subprocess.Popen([sys.executable, "-c", STALLING_JOB, str(ROOT / "examples")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = job.stdout.readline().split()
        assert ready[:1] == ["ready"], job.stderr.read() if job.poll() is not None else ready
        lags = []
        for _ in range(3):
            time.sleep(1.5)
            result = gputui(env, "probe", ready[1], timeout=60)
            assert result.returncode == 0, result.stderr
            out = result.stdout
            step = int(re.search(r"^probe torch \S+  step (\d+)", out, re.M).group(1))
            read = re.search(r"^figures read at step (\d+), (.*)$", out, re.M)
            assert read.group(2) == "just now", out
            lags.append(step - int(read.group(1)))
    finally:
        job.kill()
        job.wait()
    # The promise is in time: "just now" (read under 1.5 s before the report) at every ask, where the
    # old probe said "read at step 45, 5 s before". In steps the lag follows the machine's load: this
    # job makes a step every few ms, and a loaded 2-core machine took up to 140 steps to answer.
    assert step > 300 and max(lags) <= 500, lags


def test_each_advice_gives_its_fix_under_its_title():
    lines = probe_text(cpu_job(), width=100, tz=timezone.utc).splitlines()
    title = lines.index("  advice 1: A collection of tensors keeps growing")
    assert lines[title + 1:title + 4] == [
        "    Bound it, or keep numbers instead of tensors:",
        "        cache[key] = value.detach()          # no graph; or value.item() for a number",
        "        if len(cache) > LIMIT: cache.pop(next(iter(cache)))",
    ]
    narrow = probe_text(cpu_job(), width=40, ascii=True, tz=timezone.utc).splitlines()
    title = narrow.index("  advice 1: A collection of tensors k...")
    assert narrow[title + 1:title + 4] == [  # words wrapped, code cropped
        "    Bound it, or keep numbers instead of",
        "    tensors:",
        "        cache[key] = value.detach()  ...",
    ]
