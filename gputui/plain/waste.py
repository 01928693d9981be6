"""Who holds the GPUs and who holds them idle (gputui/analysis/waste.py's judgement) in words: --once's
section and the live monitor's w view say the same, the window and thresholds first.

An owner's SM% that its GPU's utilisation stood in for is marked as the GPU's and as an upper bound
(``≤65 (GPU)``, or ``≤65*`` where the pane is narrow), with a note under the table saying what the mark means.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from gputui import units
from gputui.analysis.vocabulary import UNICODE, Glyphs
from gputui.model.waste import OwnerAcross, OwnerUse, Waste
from gputui.plain.styled import Line, flow, text
from gputui.untrusted import visible

Owner = TypeVar("Owner", OwnerUse, OwnerAcross)

TITLE = "Who holds the GPUs"
HEADS = ("OWNER", "GPUS", "MEMORY", "SM%", "IDLE ON", "IDLE FOR")
RIGHT = (2, 3)  # the figures' columns, aligned right
OWNER_MAX = 40  # the owner column's widest: the figures stay in view in a narrow pane
OWNER_MIN = 16  # and its narrowest before columns are left out: GPUS, IDLE FOR, SM% in turn
DROPPED = (1, 5, 3)
# After an SM% its GPU's utilisation stood in for: the mark in full, then the brief one used where the full
# one would cost a column; what the mark means is said once, under the table.
MARKS = (" (GPU)", "*")
MARK_MEANS = "the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"


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


def stood_in(owner: OwnerUse | OwnerAcross) -> bool:
    """Whether the owner's SM% is its GPU's, standing in where the driver gave none for its processes."""
    return owner.sm_util is not None and owner.sm_source == "gpu"


def sm_words(owner: OwnerUse | OwnerAcross, glyphs: Glyphs = UNICODE, mark: str = MARKS[0]) -> str:
    """An owner's SM%: its processes' own ("65%"), or its GPU's standing in, marked as the GPU's and an upper
    bound ("≤65 (GPU)"); "n/a" where neither is known."""
    if not stood_in(owner):
        return units.percent(owner.sm_util)
    return f"{glyphs.at_most}{owner.sm_util:.0f}{mark}"


def cells(owner: OwnerUse, glyphs: Glyphs = UNICODE, mark: str = MARKS[0]) -> tuple[str, ...]:
    """An owner's row, HEADS's columns."""
    return (owner_words(owner), gpu_list(owner.gpus), units.size_compact(owner.memory),
            sm_words(owner, glyphs, mark), gpu_list(tuple(g.device for g in owner.idle)),
            units.span(owner.idle_for) if owner.idle_for > 0 else "-")


def worth_a_section(waste: Waste | None) -> bool:
    """Whether --once says who holds the GPUs: on a shared machine (two owners or more), or where a GPU is
    held idle; a workstation's one user is the process table already."""
    return waste is not None and (len(waste.owners) > 1 or waste.idle_gpus > 0)


Table = tuple[str, list[tuple[str, Owner]], str]  # the header, each owner's row with it, the note ("" for none)


def table(waste: Waste, width: int, glyphs: Glyphs = UNICODE) -> Table[OwnerUse]:
    """The header, each owner's row, fitted to ``width`` (see fitted), and the note on a stand-in's mark."""
    return marked(HEADS, RIGHT, DROPPED, waste.owners, lambda owner, mark: cells(owner, glyphs, mark), width)


# The many-host view's summary: each owner over the hosts, as their own judgements say.
ACROSS_TITLE = "All hosts"
ACROSS_HEADS = ("OWNER", "HOSTS", "GPUS", "MEMORY", "SM%", "IDLE GPUS", "IDLE FOR")
ACROSS_RIGHT = (1, 2, 3, 4, 5)
ACROSS_DROPPED = (1, 6, 4)


def across_cells(owner: OwnerAcross, glyphs: Glyphs = UNICODE, mark: str = MARKS[0]) -> tuple[str, ...]:
    """An owner's row over the hosts, ACROSS_HEADS's columns."""
    return (owner_words(owner), str(len(owner.hosts)), str(owner.gpus), units.size_compact(owner.memory),
            sm_words(owner, glyphs, mark), str(owner.idle_gpus) if owner.idle_gpus else "-",
            units.span(owner.idle_for) if owner.idle_for > 0 else "-")


def across_table(owners: Sequence[OwnerAcross], width: int, glyphs: Glyphs = UNICODE) -> Table[OwnerAcross]:
    """The header, each owner's row over the hosts, fitted to ``width`` (see fitted), and the note on a
    stand-in's mark."""
    return marked(ACROSS_HEADS, ACROSS_RIGHT, ACROSS_DROPPED, owners,
                  lambda owner, mark: across_cells(owner, glyphs, mark), width)


def marked(heads: tuple[str, ...], right: tuple[int, ...], dropped: tuple[int, ...], owners: Sequence[Owner],
           cells_of: Callable[[Owner, str], tuple[str, ...]], width: int) -> Table[Owner]:
    """The owners' table fitted to ``width``, a stand-in SM% marked in full unless the brief mark keeps
    more columns in view, and the note saying what the mark means where one is shown."""
    choices = [(mark, [cells_of(owner, mark) for owner in owners]) for mark in MARKS]
    mark, rows = max(choices, key=lambda choice: len(shown(heads, dropped, choice[1], width)))  # the first of equals
    head, lines = fitted(heads, right, dropped, rows, width)
    note = any(stood_in(o) for o in owners) and heads.index("SM%") in shown(heads, dropped, rows, width)
    return head, list(zip(lines, owners)), f"{mark.strip()}: {MARK_MEANS}" if note else ""


def shown(heads: tuple[str, ...], dropped: tuple[int, ...], rows: list[tuple[str, ...]], width: int) -> list[int]:
    """The columns kept at ``width``: the owner's name gives first, down to OWNER_MIN (or its own width, where
    every name is shorter), then the columns ``dropped`` names go, in its order, until the rest fit."""
    widths = column_widths(heads, rows)
    owner_min = min(OWNER_MIN, widths[0])
    kept = list(range(len(heads)))
    for column in dropped:
        if owner_min + sum(widths[i] + 1 for i in kept[1:]) <= width:
            break
        kept.remove(column)
    return kept


def column_widths(heads: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[int]:
    return [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]


def fitted(heads: tuple[str, ...], right: tuple[int, ...], dropped: tuple[int, ...],
           rows: list[tuple[str, ...]], width: int) -> tuple[str, list[str]]:
    """The header and the rows as lines fitted to ``width``: the columns ``shown`` keeps, the owner's name
    (the first column) cut to what is left; ``right``: the columns aligned right."""
    widths = column_widths(heads, rows)
    kept = shown(heads, dropped, rows, width)
    owner_width = max(len(heads[0]), min(widths[0], OWNER_MAX, width - sum(widths[i] + 1 for i in kept[1:])))

    def line(values: tuple[str, ...]) -> str:
        owner = values[0] if len(values[0]) <= owner_width else values[0][:max(0, owner_width - 1)] + "~"
        padded = [owner.ljust(owner_width)] + [values[i].rjust(widths[i]) if i in right else values[i].ljust(widths[i])
                                               for i in kept[1:]]
        return " ".join(padded).rstrip()

    return line(heads), [line(r) for r in rows]


def waste_lines(waste: Waste, width: int, glyphs: Glyphs) -> list[Line]:
    """--once's section: the title, the rules and the watch, a row per owner, and the note on a stand-in."""
    ellipsis = glyphs.ellipsis
    lines = [Line(), Line().add(TITLE, "head")]
    lines += flow([text(words, "dim") for words in rules_words(waste)], width, first=Line().add("  "), indent=2,
                  gap=1, ellipsis=ellipsis)
    head, rows, note = table(waste, width, glyphs)
    lines.append(Line().add(head, "bold").cropped(width, ellipsis))
    lines += [Line().add(row, "warn" if owner.idle else None).cropped(width, ellipsis) for row, owner in rows]
    return lines + note_lines(note, width, ellipsis)


def across_lines(owners: Sequence[OwnerAcross], width: int, glyphs: Glyphs) -> list[Line]:
    """``--hosts --once``'s closing section: each owner over the hosts, as their own judgements say."""
    ellipsis = glyphs.ellipsis
    head, rows, note = across_table(owners, width, glyphs)
    return ([Line(), Line().add(f"{TITLE}: {ACROSS_TITLE.lower()}", "head"),
             Line().add("  each host as its own gputui judged it, by its rules, over what it watched",
                        "dim").cropped(width, ellipsis),
             Line().add(head, "bold").cropped(width, ellipsis)]
            + [Line().add(row, "warn" if owner.idle_gpus else None).cropped(width, ellipsis) for row, owner in rows]
            + note_lines(note, width, ellipsis))


def note_lines(note: str, width: int, ellipsis: str) -> list[Line]:
    """The note under a table, indented, its words flowed to ``width``; none for no note."""
    if not note:
        return []
    return flow([text(word, "dim") for word in note.split()], width, first=Line().add("  "), indent=2, gap=1,
                ellipsis=ellipsis)
