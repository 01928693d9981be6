"""Take docs/web.md's pictures of ``gputui web`` in a real browser, into screenshots/web/ (PNG).

Debian's Chromium (apt-get install chromium), driven by Playwright (pip install playwright) with its browser
taken from the system, opens the page of ``gputui --demo SCENARIO web`` as a user would, presses the keys and
takes the window. The demo's clock starts at the same simulated time each run; the seconds it has run when
a picture is taken, and the sampled CPU figures, differ a little from run to run.

    python scripts/web_screenshots.py            # every picture
    python scripts/web_screenshots.py readonly   # PICTURES' names
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots" / "web"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}

# name, scenario, keys pressed once the process table is shown, the words waited for after them
PICTURES = (
    ("monitor", "training-node", (), "PROCESSES"),
    ("readonly", "training-node", ("K",), "is read-only: it sends no"),
    ("detail", "leaky", ("Enter",), "Back"),
)


def take(browser, url: str, name: str, keys: tuple[str, ...], shown: str) -> None:
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(url)
        wait_for(page, "PROCESSES")
        time.sleep(3.0)  # a few samples: the history charts and the CPU figures have something to show
        page.locator(".xterm-helper-textarea").focus()  # where a click on the terminal puts the keys
        for key in keys:
            page.keyboard.press(key)
        wait_for(page, shown)
        time.sleep(1.0)
        page.screenshot(path=str(OUT / f"{name}.png"))
        print(f"screenshots/web/{name}.png")
    finally:
        page.close()


def wait_for(page, words: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = page.locator(".xterm-rows")
        if rows.count() and words in rows.inner_text():
            return
        page.wait_for_timeout(100)
    raise RuntimeError(f"the page did not show {words!r} within {seconds:g} s")


def main(names: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    wanted = [p for p in PICTURES if not names or p[0] in names]
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        # Without WebGL xterm.js draws text the script can wait for (its DOM renderer); it looks the same.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-3d-apis"])
        try:
            for scenario in dict.fromkeys(p[1] for p in wanted):
                server = subprocess.Popen([sys.executable, "-m", "gputui", "--demo", scenario, "web", "--listen",
                                           "127.0.0.1:0"], cwd=ROOT, text=True, stderr=subprocess.PIPE)
                try:
                    line = server.stderr.readline()
                    if not line.startswith("gputui web: http"):
                        raise RuntimeError(line + server.stderr.read())
                    url = line.split()[2].rstrip(",")
                    for name, _, keys, shown in (p for p in wanted if p[1] == scenario):
                        take(browser, url, name, keys, shown)
                finally:
                    server.terminate()
                    server.wait(timeout=30)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
