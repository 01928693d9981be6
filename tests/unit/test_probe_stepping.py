"""The probe's pieces, each with one job: the step state machine (stepping.py) steps without any hook of
the Tracker's, the board gives the recent steps' durations, and no probe module grows past a size one
person reads in a sitting."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputui.probe.board import Board  # noqa: E402
from gputui.probe.steps import StepEntry  # noqa: E402

PROBE = Path(__file__).resolve().parents[2] / "gputui" / "probe"
MOST_LINES = 500  # tracking.py had 832 (hooks, step state machine and forwarding in one class)


def test_the_board_gives_the_latest_steps_durations_oldest_first():
    board = Board(max_steps=4)
    for step, duration in enumerate((0.5, 0.25, None, 0.125, 0.0625), start=1):
        board.steps.append(StepEntry(step, 100.0 + step, duration, "cpu"))
    assert board.recent_durations(3) == [None, 0.125, 0.0625]
    assert board.recent_durations(9) == [0.25, None, 0.125, 0.0625]  # (the board keeps 4)


def test_the_step_state_machine_counts_steps_with_no_hook_installed():
    from gputui.probe.stepping import Stepping

    now = [10.0]
    stepping = Stepping(clock=lambda: now[0], wallclock=lambda: 1000.0 + now[0])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(4))], lr=0.1)
    stepping.active = True  # (what Tracker.install sets)
    for _ in range(6):
        now[0] += 0.25
        stepping._optimizer_post(optimizer, (optimizer,), {})
    assert stepping.step_count == 6
    assert stepping.board.recent_durations(6) == [None, 0.25, 0.25, 0.25, 0.25, 0.25]
    assert [entry.step for entry in stepping.board.steps] == [1, 2, 3, 4, 5, 6]
    assert stepping.board.steps[0].record is not None  # the first step is measured
    assert stepping.problems.lines() == ()


def test_no_probe_module_is_over_the_size_one_reads_in_a_sitting():
    sizes = {path.name: len(path.read_text().splitlines()) for path in PROBE.glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MOST_LINES} == {}
