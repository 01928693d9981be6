"""Who holds the GPUs and who holds them idle (gputui/analysis/waste.py's judgement) in words: --once's
section and the live monitor's w view say the same, the window and thresholds first.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui import units
from gputui.model.waste import OwnerAcross, OwnerUse, Waste
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


def owner_words(owner: OwnerUse | OwnerAcross) -> str:
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
    """The header and each owner's row, fitted to ``width`` (see fitted)."""
    head, rows = fitted(HEADS, RIGHT, DROPPED, [cells(o) for o in waste.owners], width)
    return head, list(zip(rows, waste.owners))


# The many-host view's summary: each owner over the hosts, as their own judgements say.
ACROSS_TITLE = "All hosts"
ACROSS_HEADS = ("OWNER", "HOSTS", "GPUS", "MEMORY", "SM%", "IDLE GPUS", "IDLE FOR")
ACROSS_RIGHT = (1, 2, 3, 4, 5)
ACROSS_DROPPED = (1, 6, 4)


def across_cells(owner: OwnerAcross) -> tuple[str, ...]:
    """An owner's row over the hosts, ACROSS_HEADS's columns."""
    return (owner_words(owner), str(len(owner.hosts)), str(owner.gpus), units.size_compact(owner.memory),
            units.percent(owner.sm_util), str(owner.idle_gpus) if owner.idle_gpus else "-",
            units.span(owner.idle_for) if owner.idle_for > 0 else "-")


def across_table(owners: Sequence[OwnerAcross], width: int) -> tuple[str, list[tuple[str, OwnerAcross]]]:
    """The header and each owner's row over the hosts, fitted to ``width`` (see fitted)."""
    head, rows = fitted(ACROSS_HEADS, ACROSS_RIGHT, ACROSS_DROPPED, [across_cells(o) for o in owners], width)
    return head, list(zip(rows, owners))


def fitted(heads: tuple[str, ...], right: tuple[int, ...], dropped: tuple[int, ...],
           rows: list[tuple[str, ...]], width: int) -> tuple[str, list[str]]:
    """The header and the rows as lines fitted to ``width``: the owner's name (the first column) gives
    first, down to OWNER_MIN, then the columns ``dropped`` names, in its order; ``right``: the columns
    aligned right."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    shown = list(range(len(heads)))
    for column in dropped:
        if OWNER_MIN + sum(widths[i] + 1 for i in shown[1:]) <= width:
            break
        shown.remove(column)
    owner_width = max(len(heads[0]), min(widths[0], OWNER_MAX, width - sum(widths[i] + 1 for i in shown[1:])))

    def line(values: tuple[str, ...]) -> str:
        owner = values[0] if len(values[0]) <= owner_width else values[0][:max(0, owner_width - 1)] + "~"
        padded = [owner.ljust(owner_width)] + [values[i].rjust(widths[i]) if i in right else values[i].ljust(widths[i])
                                               for i in shown[1:]]
        return " ".join(padded).rstrip()

    return line(heads), [line(r) for r in rows]


def waste_lines(waste: Waste, width: int, ellipsis: str) -> list[Line]:
    """--once's section: the title, the rules and the watch, and a row per owner."""
    lines = [Line(), Line().add(TITLE, "head")]
    lines += flow([text(words, "dim") for words in rules_words(waste)], width, first=Line().add("  "), indent=2,
                  gap=1, ellipsis=ellipsis)
    head, rows = table(waste, width)
    lines.append(Line().add(head, "bold").cropped(width, ellipsis))
    lines += [Line().add(row, "warn" if owner.idle else None).cropped(width, ellipsis) for row, owner in rows]
    return lines


def across_lines(owners: Sequence[OwnerAcross], width: int, ellipsis: str) -> list[Line]:
    """``--hosts --once``'s closing section: each owner over the hosts, as their own judgements say."""
    head, rows = across_table(owners, width)
    return ([Line(), Line().add(f"{TITLE}: {ACROSS_TITLE.lower()}", "head"),
             Line().add("  each host as its own gputui judged it, by its rules, over what it watched",
                        "dim").cropped(width, ellipsis),
             Line().add(head, "bold").cropped(width, ellipsis)]
            + [Line().add(row, "warn" if owner.idle_gpus else None).cropped(width, ellipsis) for row, owner in rows])
