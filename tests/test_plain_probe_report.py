"""``gputui probe PID`` as text: the leak verdict and advice that --once gives, and a step table
that shows what a CPU-only job has (host memory) instead of columns of n/a."""

import subprocess
import sys
from datetime import timezone

from gputui.model import MemoryCategories, ProbeDevice, ProbeReport, StepRecord
from gputui.plain.report import render_probe
from cli_helpers import ROOT

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
    lines = render_probe(cpu_job(), width=120, tz=timezone.utc).splitlines()
    head = lines.index("Last 10 of 60 measured steps (80 steps in all; the probe reads memory every "
                       "few steps)")
    assert lines[head + 1:head + 4] == [
        "STEP  TIME ALLOCATED HOST MEM",
        "  67 5.0ms   4.00MiB   704MiB",
        "  69 5.0ms   4.00MiB   704MiB",  # step 68 was not measured
    ]
    assert "n/a" not in "\n".join(lines[head:head + 12])


def test_the_report_carries_the_verdict_and_advice_without_a_gpu_snapshot():
    out = render_probe(cpu_job(), width=200, tz=timezone.utc)
    leak = next(line for line in out.splitlines() if line.lstrip().startswith("leak: "))
    assert "host memory in use grows 64.0 KiB per step" in leak and "(other +64.0 KiB/step)" in leak
    assert any(line.lstrip().startswith("advice 1: ") for line in out.splitlines())


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


def test_each_advice_gives_its_fix_under_its_title():
    lines = render_probe(cpu_job(), width=100, tz=timezone.utc).splitlines()
    title = lines.index("  advice 1: A collection of tensors keeps growing")
    assert lines[title + 1:title + 4] == [
        "    Bound it, or keep numbers instead of tensors:",
        "        cache[key] = value.detach()          # no graph; or value.item() for a number",
        "        if len(cache) > LIMIT: cache.pop(next(iter(cache)))",
    ]
    narrow = render_probe(cpu_job(), width=40, ascii=True, tz=timezone.utc).splitlines()
    title = narrow.index("  advice 1: A collection of tensors k...")
    assert narrow[title + 1:title + 4] == [  # words wrapped, code cropped
        "    Bound it, or keep numbers instead of",
        "    tensors:",
        "        cache[key] = value.detach()  ...",
    ]
