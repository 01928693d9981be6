"""The text picture of a snapshot (--once, --watch) and of probe reports, from hand-built snapshots.

Golden files live in tests/golden/; regenerate with GPUTUI_REGEN_GOLDEN=1 and review the diff.
"""

import dataclasses
import re
from datetime import timezone

import pytest
from plain_data import T, check_golden, once_text, probe_text, training_report, workstation

from gputui.model import (
    Host,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
)
from gputui.plain.report import render_probe_list
from gputui.plain.styled import Line, flow, text

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def show(snapshot, **kw):
    return once_text(snapshot, tz=timezone.utc, **{"width": 100, **kw})


# ------------------------------------------------------------------------------------ lines

def test_flow_wraps_whole_chunks_and_crops_only_what_cannot_fit():
    lines = flow([text("aaaa"), text("bbbb"), text("cccccccccccccc")], 12, first=text("T"), indent=2)
    assert [line.plain for line in lines] == ["T  aaaa", "  bbbb", "  ccccccc..."]


def test_crop_keeps_styles_and_counts_visible_width():
    line = Line().add("abc", "ok").add("defgh", "bad")
    cut = line.cropped(6, "…")
    assert cut.plain == "abcde…" and cut.pieces[-1] == ("…", "bad")
    assert cut.write(color=True) == "\x1b[32mabc\x1b[0m\x1b[31mde\x1b[0m\x1b[31m…\x1b[0m"


# ------------------------------------------------------------------------------------ snapshot

def test_header_names_host_time_driver_and_cuda():
    first = show(workstation()).splitlines()[0]
    assert first == "ws-01  2026-01-05 09:00:00 UTC  driver 550.54.15  CUDA 12.4  simulated: workstation"


def test_device_block_shows_every_reading_and_the_slowdown():
    out = show(workstation(), width=140)
    assert ("[0] NVIDIA GeForce RTX 4090  71°C  fan 55%  402/450W  P2  SM 2520/2820MHz  mem 10501MHz"
            "  mem-bw 40%  slowed: power cap") in out
    assert "12.0/24.0GiB" in out and " 87%" in out


def test_lost_gpu_says_lost_and_shows_no_bars():
    lines = show(workstation()).splitlines()
    i = lines.index("[1] NVIDIA RTX A4000  LOST  GPU is lost")
    assert lines[i + 1].startswith("[2] ")


def test_unsupported_fields_read_na_never_zero():
    out = show(workstation())
    assert "[2] NVIDIA A100-SXM4-40GB  temp n/a  fan n/a  n/a/400W  cuda:1  MIG" in out
    assert "GPU n/a" in out


def test_mig_instances_listed_under_their_gpu():
    # named GPU:GPU instance, as the process table names the processes in it (not its MIG device index)
    assert "    MIG 2:1  3g.20gb  GI 1 CI 0  4.0/20.0GiB" in show(workstation()).splitlines()


def test_process_rows_carry_every_column_and_notes():
    lines = show(workstation(), width=120).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("PID"))
    # The monitor's labels and cells (gputui.analysis.vocabulary): "GPU MEM", "HOST MEM", "ELAPSED".
    assert header == " PID USER  GPU TYPE GPU MEM SM% CPU% HOST MEM ELAPSED COMMAND"
    row = next(line for line in lines if line.startswith("4242"))
    assert row.split() == ["4242", "alice", "0", "C", "10.0G", "85%", "102%", "3.0G", "1:02:03",
                           "python", "train.py", "--lr", "3e-4"]
    assert any(line.startswith("5555 bob") and line.endswith("python3 [access denied]") for line in lines)
    # An unknown user is "n/a", as the monitor's USER column says it (it was "?" here only).
    assert any(line.startswith("7777 n/a") and line.endswith("[exited]") for line in lines)
    assert any(line.startswith("6666 n/a   2:1 C") and "[host pid not visible in this container]" in line
               for line in lines)
    assert any(line.startswith("1001 root") and " G " in line and "3d 00h" in line for line in lines)


def test_processes_sorted_by_gpu_then_memory():
    rows = [line.split()[0] for line in show(workstation()).splitlines()
            if re.match(r"^\s*\d+ ", line)]
    assert rows[:5] == ["4242", "5555", "1001", "7777", "6666"]


def test_probe_summary_explains_the_nvml_figure():
    out = show(workstation(), width=140)
    # NVML charges 10 GiB; reserved 9.5 GiB; allocated 8 GiB: of the 1.5 GiB held free, 300 MiB are
    # stuck in split blocks and 1.21 GiB is reusable cache (as the live monitor's bar counts them);
    # context+libs 512 MiB.
    assert ("      cuda:0:  allocated 8.00GiB  reserved 9.50GiB  cache 1.21GiB  fragmented 300MiB"
            "  context+libs 512MiB") in out
    assert "        params 1.00GiB  grads 1.00GiB  optimizer 2.00GiB  activations 3.00GiB  other 1.00GiB" in out
    assert "    probe torch 2.13.0  step 412 in 0.21s  end 5.00GiB  peak fwd 7.00GiB  bwd 8.00GiB  opt 8.50GiB" in out
    assert ("      last OOM  08:50:00  cuda:0  asked 2.00GiB  free 1.00GiB  allocated 20.0GiB"
            "  at train.py:42 in forward") in out


def test_probe_summary_shows_the_parameters_fsdp_gathers_as_a_step_peak():
    snapshot = workstation()
    report = snapshot.probes[0]
    (device,) = report.devices
    sharded = dataclasses.replace(device, categories=dataclasses.replace(device.categories, gathered=1 << 29))
    snapshot = dataclasses.replace(snapshot, probes=(dataclasses.replace(report, devices=(sharded,)),
                                                     *snapshot.probes[1:]))
    assert ("        params 1.00GiB  grads 1.00GiB  optimizer 2.00GiB  activations 3.00GiB  gathered 512MiB "
            "(step peak)  other 1.00GiB") in show(snapshot, width=140)


def test_probe_of_a_process_nvml_does_not_list_is_still_shown():
    lines = show(workstation()).splitlines()
    i = lines.index("Probed processes not listed by NVML")
    assert lines[i + 1:i + 3] == ["777 python eval.py", "    probe torch 2.13.0+cpu  step 3 in 4.8ms"]


def test_problems_are_listed_last():
    assert show(workstation()).splitlines()[-1] == "! GPU 1: GPU is lost"


def test_empty_machine():
    out = show(Snapshot(taken_at=T, host=Host(hostname="box")))
    assert out.splitlines()[1:] == ["No GPUs found.", "", "No GPU processes."]


@pytest.mark.parametrize("width", [40, 41, 60, 79, 80, 100, 132, 200])
@pytest.mark.parametrize("ascii", [False, True])
def test_every_line_fits_the_width(width, ascii):
    for line in show(workstation(), width=width, ascii=ascii).splitlines():
        assert len(line) <= width, line


def test_width_below_the_minimum_is_raised_to_it():
    assert max(len(line) for line in show(workstation(), width=10).splitlines()) <= 40


def test_narrow_terminal_drops_columns_but_keeps_pid_gpu_memory_and_command():
    lines = show(workstation(), width=40).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("PID"))
    assert header.split() == ["PID", "GPU", "GPU", "MEM", "COMMAND"]


def test_ascii_output_is_pure_ascii_with_hash_bars():
    snap = workstation()
    weird = snap.processes[0].__class__(pid=9, device_index=0, command=("python", "résumé—train.py"))
    out = show(Snapshot(**{**snap.__dict__, "processes": snap.processes + (weird,)}), ascii=True, width=60)
    out.encode("ascii")  # raises if anything is not ASCII
    assert "71C" in out and "#" in out and "..." in out and "…" not in out
    assert re.search(r"MEM #+\.+ 12\.0/24\.0GiB", out)  # the monitor's empty cells: "." as "░", lighter


def test_unicode_output_uses_block_bars():
    out = show(workstation())
    assert re.search(r"MEM █+░+ 12\.0/24\.0GiB", out) and "71°C" in out


def test_bars_have_the_same_length_for_every_gpu():
    out = show(workstation(), width=80)
    lengths = {len(m) for m in re.findall(r"MEM ([█░]+)", out)}
    assert len(lengths) == 1


def test_colour_only_when_asked_and_levels_colour_the_load():
    plain = show(workstation())
    coloured = show(workstation(), color=True)
    assert "\x1b[" not in plain
    assert ANSI.sub("", coloured) == plain
    assert "\x1b[33m402/450W\x1b[0m" in coloured  # 89 % of the power limit: yellow (red from 90 %)
    assert "\x1b[32m71°C\x1b[0m" in coloured  # 13 degrees below slowdown: green
    assert "\x1b[1;31mLOST\x1b[0m" in coloured
    assert "\x1b[33mslowed: power cap\x1b[0m" in coloured


def test_golden_handmade_snapshot():
    check_golden("handmade-100.txt", show(workstation(), width=100))
    check_golden("handmade-40-ascii.txt", show(workstation(), width=40, ascii=True))


# ------------------------------------------------------------------------------------ probe texts

def test_probe_report_text_has_allocator_steps_and_oom():
    out = probe_text(training_report(), width=120, tz=timezone.utc)
    lines = out.splitlines()
    assert lines[0] == "process 4242  python train.py --lr 3e-4"
    assert "allocator cuda:0:  allocated 8.00GiB (peak 12.0GiB)  reserved 9.50GiB (peak 14.0GiB)" in out
    assert "segments 40  alloc retries 2  OOMs 1  expandable_segments off" in out
    assert "Last 2 of 2 steps" in lines
    assert " 412 0.21s   5.00GiB  9.50GiB  7.00GiB  8.00GiB  8.50GiB" in lines
    assert "OOM message: CUDA out of memory. Tried to allocate 2.00 GiB" in lines
    assert lines[lines.index("OOM message: CUDA out of memory. Tried to allocate 2.00 GiB") + 1:][:2] == [
        "  train.py:30 in main", "  train.py:42 in forward"]
    assert "no figures read yet (the probe reads at the training loop's next step)" in lines
    read = dataclasses.replace(training_report(), read_at=T - 60, read_at_step=410, taken_at=T)
    assert "figures read at step 410, 60 s before the report" in probe_text(read, width=120).splitlines()


def test_probe_list_table_and_unreachable_probes():
    out = render_probe_list([training_report(), training_report(99)], {31337: "the probe has gone away"},
                            width=100)
    assert out.splitlines() == [
        " PID RANK TORCH  ALLOCATED RESERVED STEP COMMAND",
        "4242    - 2.13.0   8.00GiB  9.50GiB  412 python train.py --lr 3e-4",
        "  99    - 2.13.0   8.00GiB  9.50GiB  412 python train.py --lr 3e-4",
        "31337 did not answer: the probe has gone away",
    ]


def test_probe_list_shows_a_cpu_jobs_host_memory():
    cpu_job = ProbeReport(pid=777, taken_at=T, torch_version="2.13.0+cpu", command=("python", "eval.py"),
                          devices=(ProbeDevice("cpu"),),
                          steps=(StepRecord(step=3, ended_at=T, host_memory=3 << 29),
                                 StepRecord(step=4, ended_at=T)))  # a step the figure was not read at
    out = render_probe_list([training_report(), cpu_job], {}, width=100)
    assert out.splitlines() == [
        " PID RANK TORCH      ALLOCATED RESERVED STEP HOST MEM COMMAND",
        "4242    - 2.13.0       8.00GiB  9.50GiB  412      n/a python train.py --lr 3e-4",
        " 777    - 2.13.0+cpu       n/a      n/a    4  1.50GiB python eval.py",
    ]


def test_probe_list_when_none_says_how_to_start_one():
    out = render_probe_list([], {}, width=200)
    assert out.splitlines()[0] == "No probed processes found."
    assert "gputui run -- python train.py" in out and "GPUTUI_PROBE=1" in out
