"""The README's pictures: every picture scripts/screenshots.py makes is linked from README.md, exists,
and is the size of a terminal a user has (none taller than 40 rows or wider than 120 columns)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pictures() -> tuple:
    """scripts/screenshots.py's PICTURES, read without running the script (it sets TZ on import)."""
    tree = ast.parse((ROOT / "scripts" / "screenshots.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PICTURES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("scripts/screenshots.py has no PICTURES")


def test_readme_links_every_picture_the_script_makes():
    made = {name for name, *_ in pictures()}
    linked = set(re.findall(r"\]\(screenshots/([\w-]+)\.png\)", (ROOT / "README.md").read_text()))
    assert made == linked, {"not linked": made - linked, "not made": linked - made}
    for name in made:
        assert (ROOT / "screenshots" / f"{name}.png").is_file(), name
        assert (ROOT / "screenshots" / f"{name}.svg").is_file(), name


def test_pictures_are_a_terminal_tall_and_wide():
    for name, _scenario, _seconds, (width, height), *_ in pictures():
        assert width <= 120 and height <= 40, (name, width, height)


def test_the_detail_screen_is_shown_in_parts():
    parts = {name: rest[-1] for name, *rest in pictures() if name.startswith("detail")}
    assert parts == {"detail": None, "detail-probe": "#detail-probe", "detail-analysis": "#detail-analysis"}
