"""A live job's room to grow in ``gputui probe PID``: headroom (the GPU's free memory and the job's
cache), the largest batch that would fit from its measured step, and the what-ifs computed from its
categories with analysis/whatif.py's savings (the ones ``gputui estimate`` computes too)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from cli_helpers import ROOT
from plain_data import probe_text

from gputui.analysis.whatif import headroom, headrooms
from gputui.model import AllocatorStats, Device, MemoryCategories, ProbeDevice, ProbeReport, Snapshot, StepRecord
from gputui.model.verdicts import ProcessTrend

GIB = 1 << 30
MIB = 1 << 20


def job(categories=True) -> tuple[ProbeReport, Snapshot]:
    cats = MemoryCategories(parameters=1 * GIB, gradients=1 * GIB, optimizer_state=2 * GIB, activations=0,
                            other=0, buffers=0) if categories else None
    step = StepRecord(step=10, ended_at=100.0, device="cuda:0", allocated=4 * GIB, peak_forward=8 * GIB,
                      peak_backward=9 * GIB, peak_optimizer=6 * GIB, categories=cats, activations_peak=4 * GIB)
    device = ProbeDevice("cuda:0", uuid="GPU-1", allocator=AllocatorStats(allocated=4 * GIB, reserved=10 * GIB,
                                                                         inactive_split=1 * GIB),
                         categories=cats)
    report = ProbeReport(pid=7, taken_at=100.0, devices=(device,), steps=(step,))
    snapshot = Snapshot(taken_at=100.0, devices=(Device(index=0, uuid="GPU-1", memory_total=24 * GIB,
                                                        memory_free=6 * GIB),))
    return report, snapshot


def test_headroom_and_the_largest_batch_from_the_step():
    report, snapshot = job()
    room = headroom(report, report.devices[0], snapshot)
    assert room is not None
    assert (room.free, room.cache, room.headroom) == (6 * GIB, 5 * GIB, 11 * GIB)  # cache less fragmentation
    assert room.step_peak == 9 * GIB and room.activations == 4 * GIB
    # the peak (9) can grow into reserved (10) + free (6): 7 GiB more, 1.75 more batches of activations
    assert room.batch_factor == pytest.approx(2.75)
    rows = {w.change: w for w in room.what_ifs}
    assert rows["8-bit optimizer state"].saving == 3 * GIB // 2
    assert rows["ZeRO-2 over 8 GPUs"].saving == (2 + 1) * GIB * 7 // 8
    assert rows["half the micro-batch, 2x accumulation"].saving == 2 * GIB
    assert all(w.peak == 9 * GIB - w.saving and not w.measured for w in room.what_ifs)


def test_without_nvml_or_a_measured_step():
    report, snapshot = job()
    assert headroom(report, report.devices[0], None) is None
    report, snapshot = job(categories=False)
    room = headroom(report, report.devices[0], snapshot)
    assert room is not None and room.batch_factor is None and room.what_ifs == ()


def test_the_report_says_it_beside_the_advice():
    report, snapshot = job()
    out = probe_text(report, snapshot, width=200)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Will it fit (cuda:0): "))
    assert "headroom 11.0 GiB (free 6.00 GiB + cache 5.00 GiB)" in lines[at]
    assert "largest batch that would fit: about 2.8x the current one" in lines[at]
    assert lines[at + 1] == "  what if 8-bit optimizer state: saves 1.50 GiB (peak 7.50 GiB, computed)"


def test_a_what_if_that_raises_the_peak_says_it_costs_more():
    from gputui.analysis.text import headroom_lines
    from gputui.model import Headroom, WhatIf

    room = Headroom("cuda:0", free=GIB, cache=0, what_ifs=(WhatIf("activation checkpointing", 9 * GIB + 392 * MIB,
                                                                  -392 * MIB, False),
                                                          WhatIf("SGD with momentum", 9 * GIB, 0, False)))
    assert headroom_lines(room)[1:] == [
        "what if activation checkpointing: costs 392 MiB more (peak 9.38 GiB, computed)",
        "what if SGD with momentum: saves nothing (peak 9.00 GiB, computed)"]


def leaking_job() -> tuple[ProbeReport, Snapshot]:
    """job()'s, 40 steps on, each keeping 24 MiB more alive (and reserving it)."""
    report, snapshot = job()
    (last,) = report.steps
    steps = tuple(dataclasses.replace(
        last, step=s, ended_at=100.0 + (s - 40) * 0.5, duration=0.5, allocated=4 * GIB + s * 24 * MIB,
        reserved=10 * GIB + s * 24 * MIB, peak_forward=8 * GIB + s * 24 * MIB, peak_backward=9 * GIB + s * 24 * MIB,
        peak_optimizer=6 * GIB + s * 24 * MIB) for s in range(1, 41))
    return dataclasses.replace(report, steps=steps), snapshot


def test_a_job_growing_toward_oom_is_not_told_it_has_room_for_a_larger_batch():
    report, snapshot = leaking_job()
    (room,) = headrooms(report, snapshot)
    # 6 GiB free at 24 MiB a step: 256 steps of 0.5 s, 128 s (the cache above the peak grows along
    # with the leak: it is no room).
    assert room.batch_factor is None
    assert room.withheld == "allocated grows 24.0 MiB per step (leak), out of memory in about 2 min"
    head = probe_text(report, snapshot, width=300).splitlines()
    line = next(x for x in head if x.startswith("Will it fit (cuda:0): "))
    assert line.endswith("; no larger batch fits: allocated grows 24.0 MiB per step (leak), "
                         "out of memory in about 2 min")
    assert "largest batch" not in line
    assert room.what_ifs  # what the changes save still holds


def test_nvmls_growing_trend_withholds_the_larger_batch_too():
    report, snapshot = job()  # one step: the probe has no verdict yet
    trend = ProcessTrend("growing", rate=10 * MIB, time_to_oom=600.0)
    (room,) = headrooms(report, snapshot, trend=trend)
    assert room.batch_factor is None
    assert room.withheld == "memory grows 600 MiB/min (NVML), out of memory in about 10 min"
    (steady,) = headrooms(report, snapshot, trend=ProcessTrend("steady", rate=0.0))
    assert steady.batch_factor == pytest.approx(2.75) and steady.withheld is None


def demo_probe_json(scenario: str, pid: int) -> dict:
    result = subprocess.run([sys.executable, "-m", "gputui", "--demo", scenario, "probe", str(pid), "--json"],
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_demo_probe_json_carries_the_headroom():
    document = demo_probe_json("training-node", 48231)  # rank 0, warm and steady
    (room,) = document["headroom"]
    step = document["report"]["steps"][-1]
    stats = document["report"]["devices"][0]["allocator"]
    assert room["cache"] == stats["reserved"] - stats["allocated"] - stats["inactive_split"]
    peak = max(step["peak_forward"], step["peak_backward"], step["peak_optimizer"])
    assert room["withheld"] is None
    assert room["batch_factor"] == pytest.approx(
        1 + (room["free"] + stats["reserved"] - peak) / step["activations_peak"])


def test_demo_probe_json_withholds_the_leaky_jobs_larger_batch():
    (room,) = demo_probe_json("leaky", 51200)["headroom"]
    assert room["batch_factor"] is None
    assert room["withheld"].startswith("allocated grows 48.0 MiB per step (leak), out of memory in about ")


def test_the_probe_document_and_report_show_the_judgements_headroom_and_work_out_none(monkeypatch):
    """One computation per judgement: ``gputui probe`` prints the headroom the Judge made, in JSON and
    text alike; neither output works it out again (it did, without the judged leak verdict)."""
    from gputui.analysis import whatif
    from gputui.plain.document import probe_document
    from gputui.plain.report import render_probe
    from gputui.sample.judge import judge_report

    report, snapshot = job()
    judgement = judge_report(report, snapshot)
    assert judgement is not None and [r.batch_factor for r in judgement.headroom] == [pytest.approx(2.75)]
    calls = []
    monkeypatch.setattr(whatif, "headroom", lambda *a, **k: calls.append(a))  # any new working-out is seen
    marked = dataclasses.replace(judgement, headroom=(dataclasses.replace(judgement.headroom[0], batch_factor=9.5),))
    (room,) = probe_document(report, snapshot, marked)["headroom"]
    assert room["batch_factor"] == 9.5
    assert "9.5x" in render_probe(report, snapshot, marked, width=120)
    assert calls == []
    assert probe_document(report, snapshot, None)["headroom"] == []
