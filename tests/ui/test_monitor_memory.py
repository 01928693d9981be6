"""The live monitor's memory kept down by plain code (issue 46): what it does not show is not loaded, and
its history stops growing at its span. Each check runs the real app, driven by Textual's pilot, in a fresh
Python, so what it has loaded is its own."""

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parents[1]

# The process, job and waste screens, and the plotting library of the process screen's step chart: 2.5 MB
# of resident memory, loaded when one of them is first opened.
SCREENS = ("gputui.ui.screens.detail", "gputui.ui.screens.job_detail", "gputui.ui.screens.waste", "textual_plotext")

SAMPLES_UNDER_THE_HELP_SCREEN = f"""
import asyncio, sys
sys.path.insert(0, {str(TESTS)!r})
from ui_data import make_app, settle, training_snapshot

SCREENS = {SCREENS!r}
app = make_app([training_snapshot(100.0 + n) for n in range(50)], interval=0.25)

async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        help_screen = type(app.screen).__name__
        await settle(pilot, app.samples + 2)  # drawn while the help screen shows
        under_help = [m for m in SCREENS if m in sys.modules]
        await pilot.press("escape", "enter")
        await settle(pilot, app.samples + 1)
        print(repr((help_screen, under_help, type(app.screen).__name__, [m for m in SCREENS if m in sys.modules])))

asyncio.run(main())
"""


def printed_last(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_samples_drawn_under_another_screen_load_no_detail_screen():
    """A sample that comes while the main screen is not showing (the help screen; the first sample, taken
    while Textual starts, before the main screen is mounted) once imported every detail screen to ask
    whether one was showing: 2.5 MB for screens that had never been opened."""
    assert printed_last(SAMPLES_UNDER_THE_HELP_SCREEN) == ("HelpScreen", [], "ProcessDetail", list(SCREENS))
