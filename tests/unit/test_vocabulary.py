"""One text vocabulary (gputui.analysis.vocabulary): --once and the monitor say the same thing the same way.

Each test draws one value with both renderers and compares what they say: the process table's labels and
cells, the throttle words, the temperature, the ASCII bars and the colour levels.
"""

import dataclasses
import re
from datetime import timezone

from plain_data import once_text, workstation

from gputui.ui.table.cells import Context, process_cells
from gputui.ui.table.columns import COLUMNS
from gputui.ui.widgets.bars import LEVEL_STYLES, meter, plain
from gputui.ui.widgets.devices import render_device

SHARED = ("pid", "user", "gpu", "type", "gpu_memory", "sm", "cpu", "host_memory", "elapsed")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# --once's ANSI colours by the monitor's level names
ONCE_COLOURS = {"low": "\x1b[32m", "mid": "\x1b[33m", "high": "\x1b[31m"}


def once(snapshot, **kw):
    return once_text(snapshot, tz=timezone.utc, **{"width": 200, **kw})


def test_once_labels_the_process_columns_as_the_monitor_does():
    header = next(line for line in once(workstation()).splitlines() if line.lstrip().startswith("PID"))
    assert " ".join(header.split()) == " ".join(COLUMNS[c].label for c in (*SHARED, "command"))


def test_once_words_each_process_cell_as_the_monitor_does():
    snapshot = workstation()
    lines = once(snapshot).splitlines()
    for p in snapshot.processes:
        cells, _ = process_cells(p, Context(taken_at=snapshot.taken_at))
        row = next(line for line in lines if line.startswith(f"{p.pid} "))
        assert " ".join(row.split()).startswith(" ".join(cells[c] for c in SHARED) + " "), row
        assert row.endswith(cells["command"][-20:]), (row, cells["command"])


def test_throttle_words_and_temperature_are_the_same_in_both():
    device = dataclasses.replace(
        workstation().devices[0], temperature=84, temperature_slowdown=88,
        throttle_reasons=("hw_slowdown", "sw_thermal", "app_clocks", "idle"))
    snapshot = dataclasses.replace(workstation(), devices=(device,))
    monitor = " ".join(plain(words) for words in render_device(device, "normal", 200))
    text = once(snapshot)
    # nvidia-smi's words; application clocks and idle are settings, not a slowdown
    assert "slowed: HW slowdown, SW thermal\n" in text or "slowed: HW slowdown, SW thermal " in text
    assert "⚠ HW slowdown, SW thermal" in monitor
    assert " 84°C " in text and " 84°C " in monitor
    # 4 degrees below the slowdown temperature: yellow in both
    assert ONCE_COLOURS["mid"] + "84°C" in once(snapshot, color=True)
    assert ("84°C", LEVEL_STYLES["mid"]) in render_device(device, "normal", 200)[0]


def test_ascii_bars_use_the_same_glyphs():
    text = once(workstation(), ascii=True, width=72)
    bar = re.search(r"MEM (#+)(\.+) 12\.0/24\.0GiB", text)
    assert bar is not None, text
    assert plain(meter(0.5, 8, ascii=True)) == "[####....]"


def test_a_nearly_full_gpu_is_the_same_colour_in_both():
    # 92 % of GPU memory is a training job's cache at work: yellow, not red, in both views
    device = dataclasses.replace(workstation().devices[0], memory_used=int(22.08 * 2**30), memory_total=24 * 2**30)
    text = once(dataclasses.replace(workstation(), devices=(device,)), color=True)
    assert re.search(re.escape(ONCE_COLOURS["mid"]) + "█+", text), ANSI.sub("", text)
    assert any(style == LEVEL_STYLES["mid"] and "█" in piece
               for piece, style in render_device(device, "normal", 200)[0])
