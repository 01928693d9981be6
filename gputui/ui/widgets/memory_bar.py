"""Where a probed process's GPU memory goes: its breakdown (gputui.analysis.breakdown) as a stacked
bar with a legend, adding up to what nvidia-smi shows for the process."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from gputui import units
from gputui.analysis.vocabulary import PART_LETTERS
from gputui.model.breakdown import Breakdown, BreakdownItem

# How each part of the breakdown is drawn: its theme colour, and its letter in --ascii (the bar's
# fill there, and the legend's key: the vocabulary's letters, the probe column's too).
COLOURS = {
    "parameters": "$primary",
    "gradients": "$secondary",
    "optimizer_state": "$success",
    "buffers": "$success-darken-2",
    "activations": "$error",
    "gathered": "$error-lighten-2",
    "other": "$primary-lighten-3",
    "untracked": "$foreground-darken-3",
    "untracked_growth": "$warning-darken-2",
    "cache": "$warning",
    "fragmentation": "$error-darken-2",
    "context": "$foreground-darken-1",
}
STYLES = {key: (colour, PART_LETTERS[key]) for key, colour in COLOURS.items()}


def cells(items: tuple[BreakdownItem, ...], total: int, width: int) -> list[int]:
    """How many cells of a ``width``-wide bar each item gets: every non-empty item at least one,
    rounding by largest remainder, so the bar is always exactly ``width`` wide."""
    if not items or width <= 0 or total <= 0:
        return [0] * len(items)
    width = max(width, len(items))
    exact = [i.size * width / total for i in items]
    given = [max(1, int(e)) for e in exact]
    while sum(given) > width:  # the minimum of one cell overshot: take from the biggest
        given[given.index(max(given))] -= 1
    order = sorted(range(len(items)), key=lambda k: exact[k] - int(exact[k]), reverse=True)
    k = 0
    while sum(given) < width:
        given[order[k % len(order)]] += 1
        k += 1
    return given


def bar(b: Breakdown, width: int, *, ascii: bool = False) -> Content:
    """The breakdown as one stacked bar ``width`` cells wide (letters for colours in --ascii)."""
    return Content.assemble(*[
        ((STYLES[item.key][1] if ascii else "█") * n, STYLES[item.key][0])
        for item, n in zip(b.items, cells(b.items, b.total, width))])


def swatch(key: str, ascii: bool = False) -> str:
    """A part's key in a legend: a block of its colour, or its letter in --ascii."""
    return f"[{STYLES[key][1]}]" if ascii else "██"


class MemoryBreakdown(Widget):
    """The stacked bar and its legend (item, bytes, share)."""

    DEFAULT_CSS = "MemoryBreakdown { height: auto; }"

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii
        self.breakdown: Breakdown | None = None

    def show(self, breakdown: Breakdown | None) -> None:
        if breakdown != self.breakdown:
            resized = (breakdown is None) != (self.breakdown is None) or (
                breakdown is not None and self.breakdown is not None
                and (len(breakdown.items), breakdown.note) != (len(self.breakdown.items), self.breakdown.note))
            self.breakdown = breakdown
            self.refresh(layout=resized)

    def render(self) -> Content:
        b = self.breakdown
        if b is None:
            return Content.styled("No memory figures from the probe yet.", "$text-muted")
        width = max(10, (self.size.width or 80))
        lines = [Content.assemble(("Where its memory goes: ", "bold"), (units.size(b.total), "bold"),
                                  (f" ({b.basis})", "$text-muted")), bar(b, width, ascii=self.ascii)]
        for item in b.items:
            style = STYLES[item.key][0]
            share = f"{100 * item.size / b.total:5.1f}%" if b.total else ""
            lines.append(Content.assemble((swatch(item.key, self.ascii), style), " ",
                                          (f"{units.size(item.size):>10}", "bold"), f" {share}  ", item.label))
        if b.note:
            lines.append(Content.styled(f"Note: {b.note}.", "$text-muted"))
        return Content("\n").join(lines)
