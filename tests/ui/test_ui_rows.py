"""The process table's rows without Textual: sorting, the `/` filter, only-mine, the tree, cells."""

import dataclasses

from ui_data import GIB, MIB, T0, process, training_snapshot

from gputui.analysis import vocabulary as vocab
from gputui.model.verdicts import ProcessTrend
from gputui.ui import format as fmt
from gputui.ui.table.cells import trend_text
from gputui.ui.table.columns import columns_for
from gputui.ui.table.rows import build_rows


def keys(rows):
    return [r.key for r in rows]


def test_default_order_is_gpu_memory_biggest_first():
    rows = build_rows(training_snapshot())
    assert keys(rows) == ["3100/0", "2003/3", "2002/2", "2001/1", "2000/0", "3200/1"]
    assert rows[0].cells["gpu_memory"] == "12.0G"
    assert rows[-1].cells["gpu_memory"] == "300M"


def test_sort_by_pid_ascending_and_unknown_values_last():
    assert keys(build_rows(training_snapshot(), sort="pid", reverse=False)) == [
        "2000/0", "2001/1", "2002/2", "2003/3", "3100/0", "3200/1"]
    # Xorg has no SM figure: it goes last whichever way the sort runs.
    for reverse in (True, False):
        assert keys(build_rows(training_snapshot(), sort="sm", reverse=reverse))[-1] == "3200/1"
    assert keys(build_rows(training_snapshot(), sort="sm", reverse=True))[:2] == ["2003/3", "2002/2"]


def test_sort_by_user_then_pid_breaks_ties():
    assert keys(build_rows(training_snapshot(), sort="user", reverse=False)) == [
        "2000/0", "2001/1", "2002/2", "2003/3", "3100/0", "3200/1"]


def test_filter_matches_command_user_and_pid_case_insensitively():
    snap = training_snapshot()
    assert keys(build_rows(snap, filter_text="JUPYTER")) == ["3100/0"]
    assert keys(build_rows(snap, filter_text="carol")) == ["3200/1"]
    assert keys(build_rows(snap, filter_text="2002")) == ["2002/2"]
    assert keys(build_rows(snap, filter_text="rank=1")) == ["2001/1"]
    assert build_rows(snap, filter_text="no such thing") == []


def test_only_mine_keeps_one_users_processes():
    assert keys(build_rows(training_snapshot(), only_user="bob")) == ["3100/0"]


def test_tree_puts_ranks_under_torchrun_under_the_shell():
    rows = build_rows(training_snapshot(), tree=True)
    assert keys(rows) == ["3000/-", "3100/0", "900/-", "1000/-", "2003/3", "2002/2", "2001/1",
                          "2000/0", "3200/1"]
    commands = [r.cells["command"] for r in rows]
    assert commands[:4] == ["bash", "└─ jupyter-lab", "-bash", "└─ torchrun --nproc-per-node=4 train.py"]
    assert commands[4] == "   ├─ python train.py --rank=3"
    assert commands[7] == "   └─ python train.py --rank=0"
    assert rows[2].process is None and rows[2].parent.name == "bash"


def test_tree_with_a_filter_keeps_only_the_ancestors_of_matches():
    rows = build_rows(training_snapshot(), tree=True, filter_text="rank=2", ascii=True)
    assert keys(rows) == ["900/-", "1000/-", "2002/2"]
    assert rows[2].cells["command"] == "   `- python train.py --rank=2"


def test_tree_survives_a_parent_loop():
    loop = [process(10, 0, ppid=11), process(11, 1, ppid=10)]
    snap = dataclasses.replace(training_snapshot(), processes=tuple(loop), parents=())
    assert sorted(keys(build_rows(snap, tree=True))) == ["10/0", "11/1"]


def test_cells_say_na_for_unknown_and_show_the_process_state():
    gone = process(4000, 2, state="gone", command=(), name=None, note="exited", cpu_percent=None,
                   host_memory=None, started_at=None)
    snap = training_snapshot(extra=[gone])
    row = next(r for r in build_rows(snap) if r.pid == 4000)
    assert row.cells["cpu"] == "n/a" and row.cells["host_memory"] == "n/a"
    assert row.cells["elapsed"] == "n/a"
    assert row.cells["command"] == "[exited]"
    assert row.styles["command"] == "$text-muted"
    xorg = next(r for r in build_rows(snap) if r.pid == 3200)
    assert xorg.cells["type"] == "G" and xorg.cells["command"] == "[Xorg]"
    bob = next(r for r in build_rows(snap) if r.pid == 3100)
    assert bob.cells["elapsed"] == "1d 01h"


def test_growing_memory_gets_a_marker_with_its_rate():
    growing = ProcessTrend("growing", rate=2 * MIB / 60, level=5 * GIB, time_to_oom=600.0)
    rows = build_rows(training_snapshot(), trends={(2001, 1): growing}, sort="trend")
    assert rows[0].key == "2001/1"
    assert rows[0].cells["trend"] == "▲2.0M/m 10m"  # rate per minute, then time to OOM
    assert rows[0].styles["trend"] == "$error"
    assert trend_text(ProcessTrend("growing", rate=None), ascii=True) == ("^", "$warning")
    assert trend_text(ProcessTrend("steady", rate=0.0)) == ("", "")


def test_columns_per_layout():
    assert columns_for("tiny") == ("pid", "probe", "gpu", "gpu_memory", "trend_mark", "command")
    assert "elapsed" not in columns_for("compact")
    # A full-width trend (11 cells) takes the user's place at 80 columns; no trend shown, it stays.
    assert columns_for("compact", width=80) == ("pid", "probe", "gpu", "gpu_memory", "trend", "sm", "command")
    assert columns_for("compact", width=80, sort_column="gpu_memory", trend_width=0) == (
        "pid", "probe", "user", "gpu", "gpu_memory", "trend", "sm", "command")
    assert "type" not in columns_for("normal", width=100) and "type" in columns_for("normal", width=120)
    wide = columns_for("wide")
    assert wide[-1] == "command" and "started" in wide and "memory_util" in wide
    assert columns_for("normal", ("pid", "command")) == ("pid", "command")
    assert columns_for("tiny", ("pid", "user", "command")) == ("pid", "command")
    assert columns_for("tiny", ("pid", "trend", "command")) == ("pid", "trend_mark", "command")


def test_narrow_trend_keeps_the_arrow_and_the_time_to_oom():
    growing = ProcessTrend("growing", rate=2 * MIB / 60, level=5 * GIB, time_to_oom=600.0)
    row = next(r for r in build_rows(training_snapshot(), trends={(2001, 1): growing}) if r.pid == 2001)
    assert row.cells["trend_mark"] == "▲10m" and row.styles["trend_mark"] == "$error"
    assert trend_text(growing, ascii=True, short=True) == ("^10m", "$error")


def test_column_widths_fit_the_sort_mark_and_the_trends_shown():
    from gputui.ui.table.columns import column_widths

    widths = column_widths(("pid", "gpu_memory", "trend", "command"), "gpu_memory", trend_width=0)
    assert widths == {"pid": 7, "gpu_memory": 9, "trend": 5}  # "GPU MEM ▼"; "TREND" alone
    assert column_widths(("trend",), "trend", trend_width=11) == {"trend": 11}
    assert column_widths(("trend",), None, trend_width=3) == {"trend": 5}


def test_formatting_words():
    assert vocab.bar(0.5, 10) == ("█████", "░░░░░")
    assert vocab.bar(0.01, 10, vocab.ASCII) == ("#", ".........")
    assert vocab.bar(None, 3) == ("", "···")
    assert vocab.slowdown(("idle", "sw_power_cap", "hw_thermal")) == "power cap, HW thermal"
    assert vocab.slowdown(("idle",)) == ""
    assert fmt.resample([1, None, 5, 2, 8, 3], 2) == [5.0, 8.0]
    assert fmt.ascii_spark([0.0, 9.0], 4) == "  .@"
    assert vocab.level(0.95) == "high" and vocab.level(0.75) == "mid" and vocab.level(0.1) == "low"


# -- probed processes: markers, forecasts, rows for processes NVML does not list --------------

def _leak(**changes):
    from gputui.model.verdicts import LeakVerdict

    base = LeakVerdict("leak", category="activations", allocated_per_step=48 * MIB, step_time=0.4,
                       oom_step=538, oom_in=84.8, oom_at=T0 + 90.0)
    return dataclasses.replace(base, **changes)


def _probed(snap, pid=2001):
    from gputui.model import ProbeReport

    return dataclasses.replace(snap, probes=(ProbeReport(pid=pid, taken_at=T0, command=("python", "x.py")),))


def test_probe_column_marks_probed_processes_and_names_what_leaks():
    from gputui.ui.table.cells import probe_mark

    snap = _probed(training_snapshot())
    rows = {r.key: r for r in build_rows(snap, leaks={2001: _leak(state="clean")})}
    assert rows["2001/1"].cells["probe"] == "●" and rows["2001/1"].styles["probe"] == "$accent"
    assert rows["2000/0"].cells["probe"] == ""
    assert probe_mark(_leak()) == ("A", "bold $error")
    assert probe_mark(_leak(state="cache_growth", category="cache")) == ("C", "bold $warning")
    assert probe_mark(_leak(state="warming_up"), ascii=True) == ("*", "$accent")


def test_probe_matches_the_pid_in_this_namespace():
    # A container's process: NVML's pid is the host's, the probe reports the local one.
    snap = training_snapshot(extra=[process(90001, 2, local_pid=41, gpu_memory=GIB)])
    row = next(r for r in build_rows(_probed(snap, pid=41)) if r.pid == 90001)
    assert row.cells["probe"] == "●" and row.report.pid == 41


def test_trend_prefers_the_probes_forecast_and_counts_it_from_now():
    from gputui.ui.table.cells import growth_of

    nvml = ProcessTrend("growing", rate=2 * MIB, level=5 * GIB, time_to_oom=600.0)
    # NVML's rate, the probe's forecast (oom_at - now = 90 s rather than oom_in 84.8 s).
    assert growth_of(nvml, _leak(), now=T0) == (2 * MIB, 90.0)
    assert growth_of(nvml, _leak(oom_at=None), now=T0) == (2 * MIB, 84.8)
    # NVML has not seen it grow yet: the probe's per-step growth over its step time.
    assert growth_of(ProcessTrend("warming_up"), _leak(), now=T0) == (120 * MIB, 90.0)
    assert growth_of(nvml, _leak(state="clean"), now=T0) == (2 * MIB, 600.0)
    assert growth_of(None, _leak(state="clean")) == (None, None)
    assert trend_text(ProcessTrend("warming_up"), leak=_leak(), now=T0) == ("▲7.0G/m 90s", "$error")



def test_probed_process_nvml_does_not_list_is_a_row_at_the_end():
    from gputui.model import AllocatorStats, ProbeDevice, ProbeReport

    cpu = ProbeReport(pid=7777, taken_at=T0, command=("python", "cpu_job.py"),
                      devices=(ProbeDevice("cpu"),))
    gpu = ProbeReport(pid=7778, taken_at=T0, command=(),
                      devices=(ProbeDevice("cuda:0", allocator=AllocatorStats(allocated=GIB, reserved=2 * GIB)),))
    snap = dataclasses.replace(training_snapshot(), probes=(gpu, cpu))
    rows = build_rows(snap, leaks={7777: _leak()})
    assert keys(rows)[-2:] == ["7777/probe", "7778/probe"]
    cpu_row, gpu_row = rows[-2:]
    assert (cpu_row.cells["gpu"], cpu_row.cells["gpu_memory"], cpu_row.cells["probe"]) == ("cpu", "-", "A")
    assert cpu_row.cells["trend"] == "▲7.0G/m 90s" and cpu_row.cells["user"] == "n/a"
    assert (gpu_row.cells["gpu"], gpu_row.cells["gpu_memory"]) == ("-", "2.0G")
    assert gpu_row.cells["command"] == "[probed process 7778]"
    assert keys(build_rows(snap, filter_text="cpu_job")) == ["7777/probe"]
    assert keys(build_rows(snap, tree=True))[-2:] == ["7777/probe", "7778/probe"]


def test_mbw_share_joins_the_table_from_120_columns_while_the_command_keeps_its_room():
    at_120 = columns_for("normal", width=120, sort_column="gpu_memory", trend_width=5)
    assert at_120[-2:] == ("memory_util", "command") and "type" in at_120 and "elapsed" in at_120
    assert "memory_util" not in columns_for("normal", width=119, sort_column="gpu_memory", trend_width=5)
    # A rising trend's text ("▲7.0G/m 2m") needs the cells: MBW% gives way first, TYPE stays.
    crowded = columns_for("normal", width=120, sort_column="gpu_memory", trend_width=11)
    assert "memory_util" not in crowded and "type" in crowded
    assert columns_for("normal", ("pid", "command"), width=150) == ("pid", "memory_util", "command")
