"""Who holds the GPUs and who holds them idle (gputui/analysis/waste.py's judgement) in words: --once's
section and the live monitor's w view say the same, the window and thresholds first.
"""

from __future__ import annotations

from gputui import units
from gputui.model.waste import OwnerUse, Waste
from gputui.plain.styled import Line, flow, text
from gputui.untrusted import visible

TITLE = "Who holds the GPUs"
HEADS = ("OWNER", "GPUS", "MEMORY", "SM%", "IDLE ON", "IDLE FOR")
RIGHT = (2, 3)  # the figures' columns, aligned right
OWNER_MAX = 40  # the owner column's widest: the figures stay in view in a narrow pane
OWNER_MIN = 16  # and its narrowest before columns are left out: GPUS, IDLE FOR, SM% in turn
DROPPED = (1, 5, 3)


def rules_words(waste: Waste) -> list[str]:
    """The rules the judgement used, and how long it has watched: nobody is accused without them in view."""
    r = waste.rules
    said = [f"idle = {units.size(r.min_memory)} or more held", f"at under {r.max_util:g}% SM",
            f"for {units.span(r.idle_after)} or longer;", f"SM% = mean over the last {units.span(r.window)};"]
    if waste.watched < r.idle_after:
        said += [f"watched {units.span(waste.watched)} of the {units.span(r.idle_after)}", "a GPU must stay idle:",
                 "none is called idle yet"]
    else:
        said.append(f"watched {units.span(waste.watched)}")
    return said


def owner_words(owner: OwnerUse) -> str:
    """"pod team-vision/notebook-sam", "user alice", "slurm 4242": the kind, then the name."""
    return f"{owner.kind} {visible(owner.name) or '(unread)'}"


def gpu_list(numbers: tuple[int, ...]) -> str:
    return units.indices(numbers) or "-"


def cells(owner: OwnerUse) -> tuple[str, ...]:
    """An owner's row, HEADS's columns."""
    return (owner_words(owner), gpu_list(owner.gpus), units.size_compact(owner.memory),
            units.percent(owner.sm_util), gpu_list(tuple(g.device for g in owner.idle)),
            units.span(owner.idle_for) if owner.idle_for > 0 else "-")


def worth_a_section(waste: Waste | None) -> bool:
    """Whether --once says who holds the GPUs: on a shared machine (two owners or more), or where a GPU is
    held idle; a workstation's one user is the process table already."""
    return waste is not None and (len(waste.owners) > 1 or waste.idle_gpus > 0)


def table(waste: Waste, width: int) -> tuple[str, list[tuple[str, OwnerUse]]]:
    """The header and each owner's row, fitted to ``width``: the owner's name gives first, down to
    OWNER_MIN, then the columns DROPPED names, in its order."""
    rows = [cells(o) for o in waste.owners]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADS)]
    shown = list(range(len(HEADS)))
    for column in DROPPED:
        if OWNER_MIN + sum(widths[i] + 1 for i in shown[1:]) <= width:
            break
        shown.remove(column)
    owner_width = max(len(HEADS[0]), min(widths[0], OWNER_MAX, width - sum(widths[i] + 1 for i in shown[1:])))

    def line(values: tuple[str, ...]) -> str:
        owner = values[0] if len(values[0]) <= owner_width else values[0][:max(0, owner_width - 1)] + "~"
        padded = [owner.ljust(owner_width)] + [values[i].rjust(widths[i]) if i in RIGHT else values[i].ljust(widths[i])
                                               for i in shown[1:]]
        return " ".join(padded).rstrip()

    return line(HEADS), [(line(r), o) for r, o in zip(rows, waste.owners)]


def waste_lines(waste: Waste, width: int, ellipsis: str) -> list[Line]:
    """--once's section: the title, the rules and the watch, and a row per owner."""
    lines = [Line(), Line().add(TITLE, "head")]
    lines += flow([text(words, "dim") for words in rules_words(waste)], width, first=Line().add("  "), indent=2,
                  gap=1, ellipsis=ellipsis)
    head, rows = table(waste, width)
    lines.append(Line().add(head, "bold").cropped(width, ellipsis))
    lines += [Line().add(row, "warn" if owner.idle else None).cropped(width, ellipsis) for row, owner in rows]
    return lines
