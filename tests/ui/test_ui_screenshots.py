"""The pictures of README.md and docs/: every picture scripts/screenshots.py makes is linked from one of
them, exists, and is the size of a terminal a user has (none taller than 40 rows or wider than 120
columns)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pictures() -> tuple:
    """scripts/screenshots.py's PICTURES, read without running the script (it sets TZ on import)."""
    tree = ast.parse((ROOT / "scripts" / "screenshots.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PICTURES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("scripts/screenshots.py has no PICTURES")


def linked_pictures() -> set[str]:
    """The screenshots README.md (screenshots/NAME.png) and the pages of docs/ (../screenshots/) show."""
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    return {name for page in pages
            for name in re.findall(r"\]\((?:\.\./)?screenshots/([\w-]+)\.png\)", page.read_text())}


def test_the_docs_link_every_picture_the_script_makes():
    made = {name for name, *_ in pictures()}
    linked = linked_pictures()
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


def svg_fixer():
    """scripts/screenshots.py's for_librsvg, taken out without running the script (it sets TZ)."""
    import html

    tree = ast.parse((ROOT / "scripts" / "screenshots.py").read_text())
    names = ("for_librsvg", "TEXT", "BRAILLE")
    wanted = [node for node in tree.body if getattr(node, "name", None) in names
              or isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets)]
    space: dict = {"re": re, "html": html}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "screenshots.py", "exec"), space)
    return space["for_librsvg"]


def test_braille_dots_are_placed_one_per_cell_so_they_stay_inside_the_plot_frame():
    svg = ('<svg class="x"><text class="r1" x="100" y="10" textLength="36.6" clip-path="url(#c)">⢀⣀⠤</text>'
           '<text class="r2" x="136.6" y="10" textLength="24.4" clip-path="url(#c)">&#160;│</text></svg>')
    fixed = svg_fixer()(svg)
    assert fixed.startswith('<svg xml:space="preserve" class="x">')
    texts = re.findall(r'<text class="r1" x="([0-9.]+)" y="10" textLength="([0-9.]+)"[^>]*>([^<]*)</text>', fixed)
    assert texts == [("100.0", "12.2", "⢀"), ("112.2", "12.2", "⣀"), ("124.4", "12.2", "⠤")]
    assert '<text class="r2" x="136.6" y="10" textLength="24.4" clip-path="url(#c)">&#160;│</text>' in fixed
