"""Every key binding of the monitor's apps and screens, as data: the classes take theirs from here,
and the help screen and the config's [keys] check read them all without importing an app or a screen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from textual.binding import Binding, BindingType

# The punctuation keys by the names Textual gives them, and the character each shows as. Textual finds
# the character by looking the name up in Unicode's table of names (unicodedata.lookup), which reads
# about 0.8 MiB of that table into the monitor's memory for the footer's ten keys; the app's
# get_key_display shows these (and letters and digits) without it, as Textual would (a test checks).
PUNCTUATION_KEYS = {
    "exclamation_mark": "!", "quotation_mark": '"', "number_sign": "#", "dollar_sign": "$",
    "percent_sign": "%", "ampersand": "&", "apostrophe": "'", "left_parenthesis": "(",
    "right_parenthesis": ")", "asterisk": "*", "plus": "+", "comma": ",", "minus": "-", "full_stop": ".",
    "slash": "/", "colon": ":", "semicolon": ";", "less_than_sign": "<", "equals_sign": "=",
    "greater_than_sign": ">", "question_mark": "?", "at": "@", "left_square_bracket": "[",
    "backslash": "\\", "right_square_bracket": "]", "circumflex_accent": "^", "underscore": "_",
    "grave_accent": "`", "left_curly_bracket": "{", "vertical_line": "|", "right_curly_bracket": "}",
    "tilde": "~",
}

RECORD_STEPS = 16  # steps of allocation-site recording one press of the key asks for
REPLAY_KEYS = "Replay (gputui replay)"

# The live monitor's own, which every screen of every app has (the many-host view's and the replay's too).
APP: list[BindingType] = [
    Binding("q", "quit", "Quit", tooltip="Leave gputui", id="quit"),
    # Ctrl-C quits as it does nvitop, top and htop (Textual's own only says "press ctrl+q"), from
    # any screen and out of the filter box too: a binding of its own, so remapping q keeps it.
    Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="Leave gputui (as q)",
            id="quit.ctrl_c"),
    Binding("question_mark,f1", "help", "Help", tooltip="This list of keys", id="help"),
    # Not in the footer: the alert line over it names the key whenever something is wrong.
    Binding("exclamation_mark", "show_alerts", "Alerts", show=False,
            tooltip="The alerts and problems of now, newest first, with their detail", id="alerts"),
    Binding("p,space", "toggle_pause", "Pause",
            tooltip="Stop or restart sampling (the screen keeps the last picture)", id="pause"),
    Binding("plus,equals_sign", "interval(1)", "Slower", show=False,
            tooltip="Sample less often (+)", id="interval.longer"),
    Binding("minus", "interval(-1)", "Faster", show=False, tooltip="Sample more often (-)", id="interval.shorter"),
    Binding("I", "signal('SIGINT')", "Interrupt", show=False,
            tooltip="Send SIGINT to the selected process, after confirmation", id="signal.interrupt"),
    Binding("T", "signal('SIGTERM')", "Terminate", show=False,
            tooltip="Send SIGTERM to the selected process, after confirmation", id="signal.terminate"),
    Binding("K", "signal('SIGKILL')", "Kill", show=False,
            tooltip="Send SIGKILL to the selected process, after confirmation", id="signal.kill"),
    Binding("A", "probe(True)", "Attach",
            tooltip="Attach the PyTorch probe to the selected process (one that uses torch), after "
                    "confirmation", id="probe.attach"),
    Binding("D", "probe(False)", "Detach", show=False,
            tooltip="Detach the probe from the selected process, after confirmation", id="probe.detach"),
]

# The main screen's (the many-host view's too).
MAIN_SCREEN: list[BindingType] = [
    Binding("slash", "filter", "Filter",
            tooltip="Filter processes as you type: command, user or pid", id="filter"),
    Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Clear the filter", id="filter.clear"),
    Binding("less_than_sign", "sort_step(-1)", "Sort <", show=False,
            tooltip="Sort by the column to the left", id="sort.previous"),
    Binding("greater_than_sign,s", "sort_step(1)", "Sort",
            tooltip="Sort by the column to the right", id="sort.next"),
    Binding("r", "sort_reverse", "Reverse sort", show=False, tooltip="Reverse the sort order", id="sort.reverse"),
    Binding("t", "toggle_tree", "Tree", tooltip="Show GPU processes under their parent processes", id="tree"),
    Binding("j", "toggle_jobs", "Jobs", show=False,
            tooltip="Group processes under their training job (one line per job; Enter: the job's details)",
            id="jobs"),
    Binding("o", "toggle_owners", "Owners", show=False,
            tooltip="Group processes under their owner: pod, container, Slurm job, unit or user (one line each)",
            id="owners"),
    Binding("w", "show_waste", "Idle", show=False,
            tooltip="Who holds the GPUs and who holds them idle: a line per pod, container, Slurm job or user",
            id="waste"),
    Binding("u", "toggle_mine", "Mine", tooltip="Show only my processes", id="mine"),
    Binding("g", "next_gpu", "Next GPU", show=False,
            tooltip="Pick the next GPU: chart its history, and scroll to it where not all GPUs fit",
            id="charts.gpu"),
    Binding("c", "toggle_charts", "Charts", show=False,
            tooltip="Show or hide the history charts", id="charts.toggle"),
]

# The process table's, on the main screen.
PROCESS_TABLE: list[BindingType] = [
    Binding("enter", "open_detail", "Details", tooltip="Open the selected process's details", id="details"),
    Binding("home", "scroll_top", "First row", show=False, tooltip="Select the first process", id="table.first"),
    Binding("end", "scroll_bottom", "Last row", show=False, tooltip="Select the last process", id="table.last"),
    Binding("left", "fold(True)", "Fold job", show=False,
            tooltip="Job view: fold the selected job (its rows hidden under its line)", id="jobs.fold"),
    Binding("right", "fold(False)", "Unfold job", show=False,
            tooltip="Job view: unfold the selected job", id="jobs.unfold"),
    # Moving the selection: no ids, so the help screen lists them as it did DataTable's (not at all).
    Binding("up", "cursor_up", "Up", show=False),
    Binding("down", "cursor_down", "Down", show=False),
    Binding("pageup", "page_up", "Page up", show=False),
    Binding("pagedown", "page_down", "Page down", show=False),
    Binding("ctrl+home", "scroll_top", "Top", show=False),
    Binding("ctrl+end", "scroll_bottom", "Bottom", show=False),
]

# A process's detail screen.
PROCESS_DETAIL: list[BindingType] = [
    Binding("escape,backspace", "close", "Back", tooltip="Back to the process list", id="detail.back"),
    Binding("s", "record_sites", "Record sites",
            tooltip="Start or stop recording where a probed process allocates (growing sites, "
                    f"{RECORD_STEPS} steps)", id="detail.sites"),
]

# A job's detail screen.
JOB_DETAIL: list[BindingType] = [
    Binding("escape,backspace", "close", "Back", tooltip="Back to the process list", id="job.back"),
]

# The idle view (w): who holds the GPUs.
WASTE: list[BindingType] = [
    Binding("escape,backspace,w", "close", "Back", tooltip="Back to the process list", id="waste.back"),
]

# A confirmation (signals, probes).
CONFIRM: list[BindingType] = [
    Binding("y", "answer(True)", "Yes", tooltip="Go ahead (send the signal, attach or detach the probe)",
            id="confirm.yes"),
    Binding("n,escape", "answer(False)", "Cancel", tooltip="Leave the process alone", id="confirm.no"),
]

# The help screen.
HELP: list[BindingType] = [
    Binding("escape,q,question_mark", "close", "Close help", tooltip="Close this help", id="help.close"),
]

# The alert list (!).
ALERTS: list[BindingType] = [
    Binding("escape,q,exclamation_mark", "close", "Close", tooltip="Close the alert list", id="alerts.close"),
]

# The replay's own, over the live monitor's.
REPLAY: list[BindingType] = [
    Binding("comma", "step(-1)", "Back", show=False, tooltip="Replay: one sample back (,)",
            id="replay.back"),
    Binding("full_stop", "step(1)", "Forward", show=False, tooltip="Replay: one sample forward (.)",
            id="replay.forward"),
    Binding("left_square_bracket", "jump(-60)", "-1 min", tooltip="Replay: a minute back ([)",
            id="replay.back_minute"),
    Binding("right_square_bracket", "jump(60)", "+1 min", tooltip="Replay: a minute forward (])",
            id="replay.forward_minute"),
    Binding("b", "seek(0)", "Start", show=False, tooltip="Replay: back to the start", id="replay.start"),
    Binding("e", "seek(-1)", "End", show=False, tooltip="Replay: on to the end", id="replay.end"),
    Binding("x", "speed", "Speed", tooltip="Replay: x1, x2, x4, x8", id="replay.speed"),
]


def binding_sections() -> list[tuple[str, list[Binding]]]:
    """Every key binding, by the screen it works on, as the help screen lists them."""
    return [
        ("Everywhere", _bindings(APP)),
        ("Main screen", _bindings(MAIN_SCREEN, PROCESS_TABLE)),
        ("Process detail", _bindings(PROCESS_DETAIL)),
        ("Job detail", _bindings(JOB_DETAIL)),
        ("Who holds the GPUs (w)", _bindings(WASTE)),
        ("Confirmation (signals, probes)", _bindings(CONFIRM)),
        ("Help", _bindings(HELP)),
        ("Alert list (!)", _bindings(ALERTS)),
        (REPLAY_KEYS, _bindings(REPLAY)),
    ]


def _bindings(*lists: Iterable[BindingType]) -> list[Binding]:
    """The bindings of these lists, in order. (Textual also takes tuples; gputui writes Binding()s.)"""
    return [b for bindings in lists for b in bindings if isinstance(b, Binding)]


def binding_ids() -> set[str]:
    """Every binding id the config's [keys] table may remap."""
    return {b.id for _, bindings in binding_sections() for b in bindings if b.id}


def class_bindings(cls: type) -> list[Binding]:
    """The bindings of ``cls`` and the classes it inherits them from (Textual merges BINDINGS along
    the class's bases), one per key."""
    found = [cls.__dict__.get("BINDINGS", ()) for cls in cls.__mro__]
    return list(Binding.make_bindings([b for bindings in found for b in bindings]))


def remapped(bindings: list[Binding], keymap: Mapping[str, str]) -> list[Binding]:
    """``bindings`` with those ``keymap`` names on its keys instead (one Binding per key, as Textual
    expands them, single characters by their names: "?" is question_mark)."""
    out: list[Binding] = []
    done: set[str] = set()
    for binding in bindings:
        if binding.id is None or binding.id not in keymap:
            out.append(binding)
        elif binding.id not in done:
            done.add(binding.id)
            out.extend(Binding.make_bindings([dataclasses.replace(binding, key=keymap[binding.id])]))
    return out
