"""Render the live monitor's pictures for README.md and docs/ into screenshots/ (SVG, and PNG via rsvg-convert).

Deterministic: simulated scenarios on a fixed clock (tests/still.py), times shown in UTC. Run after
a change to the monitor's look:  python scripts/screenshots.py [NAME ...]  (PICTURES' names; none: all)
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ["TZ"] = "UTC"
time.tzset()

from gputui.alerts.settings import AlertSettings  # noqa: E402
from tests.still import still_app, still_hosts_app, still_replay_app  # noqa: E402

OUT = ROOT / "screenshots"

# name, scenario, seconds into it, terminal size, keys to press first, and the widget of the detail
# screen to scroll to the top (None: the top of the screen). Every picture is a size a terminal
# shows; the detail screen is taller than that, so its top, its probe view and its analysis are
# pictures of their own. The leaky job holds the most GPU memory, so Enter opens its detail screen.
# README.md or a docs/ page links every one of them (tests/ui/test_ui_screenshots.py checks). Where the scenario is a
# table of host names, the picture is the many-host view (None: a host that does not answer); where
# it is "replay:SCENARIO", gputui replay of that scenario recorded for 180 s, paused at 2:00. An optional
# seventh item "alerts": the app raises alerts, shown as toasts (no bell, no desktop notification).
PICTURES = (
    ("training-node", "training-node", 120, (120, 40), (), None),
    ("workstation", "workstation", 90, (120, 34), (), None),
    ("leaky", "leaky", 120, (120, 34), (), None),
    ("detail", "leaky", 120, (120, 40), ("enter",), None),
    ("detail-probe", "leaky", 120, (120, 40), ("enter",), "#detail-probe"),
    ("detail-analysis", "leaky", 120, (120, 40), ("enter",), "#detail-analysis"),
    ("narrow", "leaky", 120, (50, 15), (), None),
    ("compact", "training-node", 120, (80, 24), (), None),
    ("tree", "workstation", 90, (120, 34), ("t",), None),
    ("mig", "mig", 60, (120, 30), (), None),
    ("help", "leaky", 120, (100, 40), ("question_mark",), None),
    ("faults", "faults", 60, (120, 34), (), None),
    ("jobs", "torchrun", 120, (120, 40), ("j", "home"), None),
    ("job-detail", "dataparallel", 120, (120, 40), ("j", "home", "enter"), None),
    ("hosts", {"node1": "training-node", "node2": "leaky", "node3": None, "node4": "workstation",
               "node5": "mig"}, 120, (120, 40), (), None),
    ("replay", "replay:leaky", 120, (120, 40), (), None),
    ("oom-ended", "leaky", 200, (120, 24), ("end",), None),
    # Who holds the GPUs idle (w): the shared Kubernetes node 11 minutes in, its notebook pod idle on two GPUs.
    ("idle", "shared-k8s", 660, (100, 14), ("w",), None),
    # The leaky job's alerts as the live monitor's toasts (a big pane: over the charts) and its alert line; in a
    # narrow pane, the line alone and the list (!).
    ("alerts", "leaky", 120, (120, 34), (), None, "alerts"),
    ("alert-list", "leaky", 120, (50, 15), ("exclamation_mark",), None, "alerts"),
    # Eight GPUs folded into one line in a pane too short for a line each.
    ("folded", "training-node", 120, (40, 10), (), None),
)


async def shoot(name: str, scenario: str | dict, seconds: float, size: tuple[int, int], keys,
                scroll_to: str | None, shows: str | None = None) -> Path:
    if isinstance(scenario, dict):
        app = still_hosts_app(scenario, seconds=seconds)
        title = f"gputui --hosts {','.join(scenario)}"
    elif scenario.startswith("replay:"):
        with tempfile.TemporaryDirectory() as scratch:
            app = still_replay_app(scenario[len("replay:"):], Path(scratch, "run.rec"), at=seconds)
        title = "gputui replay run.rec"
    else:
        alerts = AlertSettings(bell=False, desktop="off") if shows == "alerts" else None
        app = still_app(scenario, seconds=seconds, alerts=alerts)
        title = f"gputui --demo {scenario}"
    # Tests run without toasts unless asked: the alerts' picture shows them.
    async with app.run_test(size=size, notifications=shows == "alerts") as pilot:
        while not app.samples or (shows == "alerts" and not app.notices.newest_first()):
            await pilot.pause(0.05)  # (the alerts come from the alert channel's thread)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.5)
        if scroll_to is not None:
            screen = app.screen
            screen.query_one("#detail-body").scroll_to_widget(screen.query_one(scroll_to),
                                                              animate=False, top=True)
            await pilot.pause(0.3)
        path = OUT / f"{name}.svg"
        path.write_text(for_librsvg(app.export_screenshot(title=title)))
    return path


TEXT = re.compile(r'(<text [^>]*?)x="([0-9.]+)"([^>]*?textLength="([0-9.]+)"[^>]*>)([^<]*)(</text>)')
BRAILLE = re.compile("[\u2800-\u28ff]")


def for_librsvg(svg: str) -> str:
    """Textual's SVG made to draw in librsvg as it does in a terminal.

    Textual pads spans with no-break spaces; without xml:space="preserve" librsvg drops the leading
    ones and labels run into their values ("driver560.35.03"). librsvg ignores textLength, and the
    monospace fonts have no braille (the per-step chart's dots): the fallback font's wider glyphs
    ran past the plot's frame (and librsvg ignores lists of x too). Each such glyph becomes a text of its
    own at its cell's x, as a terminal places it.
    """
    def place(match: re.Match) -> str:
        head, x, rest, length, text, tail = match.groups()
        glyphs = html.unescape(text)
        if not BRAILLE.search(glyphs) or len(glyphs) < 2:
            return match.group(0)
        cell = float(length) / len(glyphs)
        rest = rest.replace(f'textLength="{length}"', f'textLength="{cell:.1f}"')
        return "".join(f'{head}x="{float(x) + i * cell:.1f}"{rest}{html.escape(glyph)}{tail}'
                       for i, glyph in enumerate(glyphs))

    return TEXT.sub(place, svg.replace("<svg ", '<svg xml:space="preserve" ', 1))


def main() -> int:
    OUT.mkdir(exist_ok=True)
    converter = shutil.which("rsvg-convert")
    if converter is None:
        print("rsvg-convert not found (apt-get install librsvg2-bin): writing SVG only", file=sys.stderr)
    wanted = set(sys.argv[1:])  # names of pictures to render again; none: all of them
    for picture in PICTURES:
        if wanted and picture[0] not in wanted:
            continue
        svg = asyncio.run(shoot(*picture))
        if converter:
            subprocess.run([converter, str(svg), "-o", str(svg.with_suffix(".png"))], check=True)
        print(svg.relative_to(ROOT), "and .png" if converter else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
