"""Where a probed process's GPU memory goes: its whole NVML figure as a stacked bar with a legend.

The probe knows the tensor categories and the caching allocator; the monitor adds the allocator's
cache (reserved minus allocated, split into fragmentation where known) and the CUDA context and
libraries (NVML's per-process memory minus reserved), so the items add up to what nvidia-smi shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.widget import Widget

from gputui.model import TENSOR_CATEGORIES, ProbeDevice
from gputui.ui import format as fmt


@dataclass(frozen=True)
class Item:
    """One slice of the bar."""

    key: str
    label: str
    size: int
    style: str  # a theme variable
    letter: str  # the bar's fill in --ascii, and the legend's key there


@dataclass(frozen=True)
class Breakdown:
    """The slices, and the total they explain (NVML's figure when known, else their sum)."""

    items: tuple[Item, ...]
    total: int
    nvml: int | None  # NVML's per-process memory on this device, when the driver lists the process
    basis: str = ""  # what the total is, in words
    note: str = ""  # why the items do not quite add up, when they do not


# (key, label, style, ascii letter), in the order the bar draws them.
SLICES = (
    ("parameters", "parameters", "$primary", "P"),
    ("gradients", "gradients", "$secondary", "G"),
    ("optimizer_state", "optimizer state", "$success", "O"),
    ("buffers", "buffers (BatchNorm statistics, encodings)", "$success-darken-2", "B"),
    ("activations", "activations", "$error", "A"),
    ("other", "other tensors", "$primary-lighten-3", "T"),
    ("untracked", "allocated, not categorised", "$foreground-darken-3", "U"),
    ("cache", "allocator cache (reserved - allocated)", "$warning", "C"),
    ("fragmentation", "fragmentation (inactive split blocks)", "$error-darken-2", "F"),
    ("context", "CUDA context and libraries (NVML - reserved)", "$foreground-darken-1", "X"),
)
_SLICE = {key: (label, style, letter) for key, label, style, letter in SLICES}


def explain(device: ProbeDevice | None, nvml: int | None) -> Breakdown | None:
    """The breakdown of one probed device; None when the probe has no figures for it yet."""
    if device is None:
        return None
    alloc, cats = device.allocator, device.categories
    sizes: dict[str, int] = {}
    if cats is not None:
        for key in TENSOR_CATEGORIES:
            value = getattr(cats, key)
            if value:
                sizes[key] = value
    note = ""
    # Activations read between steps are the last measured step's peak: not allocated now, but
    # the room the next step's forward pass will take again, kept in the allocator's cache.
    between = cats is not None and cats.activations_step is not None
    in_cache = sizes.get("activations", 0) if between else 0
    if alloc is not None:
        tracked = sum(sizes.values()) - in_cache
        if alloc.allocated > tracked:
            sizes["untracked"] = alloc.allocated - tracked
        elif tracked > alloc.allocated:
            note = (f"the categories hold {fmt.size(tracked - alloc.allocated)} more than the "
                    "allocator counts as allocated (a tensor counted twice, or a report taken "
                    "mid-step)")
        held = max(0, alloc.reserved - alloc.allocated)
        split = min(held, alloc.inactive_split or 0)
        if in_cache > held - split:
            note = (f"the activations of {cats.activations_when()} are more than the "
                    "allocator's cache holds now (it was emptied, or the next step needs new memory)")
        elif held - split - in_cache:
            sizes["cache"] = held - split - in_cache
        if split:
            sizes["fragmentation"] = split
        if nvml is not None:
            if nvml >= alloc.reserved:
                if nvml - alloc.reserved:
                    sizes["context"] = nvml - alloc.reserved
            else:
                note = (f"NVML counts {fmt.size(alloc.reserved - nvml)} less than the allocator "
                        "reserves (the two were read at different moments)")
    if not sizes:
        return None
    items = tuple(Item(key, _label(key, cats, alloc is not None), sizes[key], _SLICE[key][1], _SLICE[key][2])
                  for key, *_ in SLICES if key in sizes)
    total = sum(i.size for i in items)
    if alloc is not None and nvml is not None and nvml >= alloc.reserved and not note:
        total, basis = nvml, "NVML per-process memory"
    elif alloc is not None:
        basis = "what the allocator reserved" if nvml is None else "allocator and NVML figures"
    else:
        basis = "tracked tensors; no CUDA allocator"
    return Breakdown(items, total, nvml, basis, note)


def _label(key: str, cats, cached: bool) -> str:
    if key == "activations" and cats is not None and cats.activations_step is not None:
        where = "; freed to the cache between steps" if cached else ""
        return f"activations ({cats.activations_when()}{where})"
    return _SLICE[key][0]


def cells(items: tuple[Item, ...], total: int, width: int) -> list[int]:
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
        bar = Content.assemble(*[
            ((item.letter if self.ascii else "█") * n, item.style)
            for item, n in zip(b.items, cells(b.items, b.total, width))])
        lines = [Content.assemble(("Where its memory goes: ", "bold"), (fmt.size(b.total), "bold"),
                                  (f" ({b.basis})", "$text-muted")), bar]
        for item in b.items:
            key = f"[{item.letter}]" if self.ascii else "██"
            share = f"{100 * item.size / b.total:5.1f}%" if b.total else ""
            lines.append(Content.assemble((key, item.style), " ", (f"{fmt.size(item.size):>10}", "bold"),
                                          f" {share}  ", item.label))
        if b.note:
            lines.append(Content.styled(f"Note: {b.note}.", "$text-muted"))
        return Content("\n").join(lines)
