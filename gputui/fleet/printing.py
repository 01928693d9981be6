"""``--hosts`` with ``--once`` or ``--json``: each host's first answer, waited for up to the config's
``wait`` seconds, printed as one section per host (text) or one ``gputui.hosts`` document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gputui import units
from gputui.analysis.vocabulary import glyphs
from gputui.analysis.waste import across_hosts
from gputui.fleet.entries import HostEntry
from gputui.fleet.fleet import Fleet
from gputui.fleet.status import state_words
from gputui.model import HOST_CONNECTING, HostView
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.document import dumps, hosts_document
from gputui.plain.render import render
from gputui.plain.styled import Line
from gputui.plain.waste import across_lines

ONE_SHOT_INTERVAL = 1.0  # the remote --watch period while waiting for a first answer


def first_views(entries: Sequence[HostEntry], wait: float) -> tuple[HostView, ...]:
    """Every host's first answer (or its failure, or no answer after ``wait`` seconds)."""
    with Fleet(entries, ONE_SHOT_INTERVAL) as fleet:
        fleet.wait_first(wait)
        views = fleet.view()
    return tuple(dataclasses.replace(v, reason=f"no answer within {wait:g} s") if v.state == HOST_CONNECTING
                 else v for v in views)


def once(options: Options, entries: Sequence[HostEntry], wait: float) -> int:
    """One section per host: its line (name, state, GPUs, age), then what --once shows of it."""
    views = first_views(entries, wait)
    color, ascii, width = terminal.use_color(options), terminal.use_ascii(options), terminal.width()
    sections = [host_line(view).write(color) + "\n" + (
        render(view.snapshot, view.judgements, color=color, ascii=ascii, width=width) if view.snapshot else "")
        for view in views]
    judged = [(v.name, v.judgements.waste) for v in views
              if v.judgements is not None and v.judgements.waste is not None]
    owners = across_hosts(judged) if len(judged) > 1 else ()
    if owners:  # who holds the GPUs over all the hosts, after each host's own
        sections.append("\n".join(line.write(color) for line in across_lines(owners, width, glyphs(ascii))))
    return terminal.show("\n".join(sections))


def json(options: Options, entries: Sequence[HostEntry], wait: float) -> int:
    """One ``gputui.hosts`` document: every host's state and its own snapshot document."""
    views = first_views(entries, wait)
    return terminal.show(dumps(hosts_document(list(views))) + "\n")


def host_line(view: HostView) -> Line:
    """``== node1 · live · 8 GPUs · 0.4 s old``, the state in colour where it is trouble."""
    style = None if view.state == "live" else "bad" if view.state == "unreachable" else "warn"
    line = Line().add("== ").add(view.name, "title").add(" · ").add(state_words(view), style)
    if view.snapshot is not None:
        gpus = len(view.snapshot.devices)
        line.add(f" · {gpus} GPU{'s' if gpus != 1 else ''}")
    if view.age is not None:
        line.add(f" · {units.elapsed(view.age)} old", "dim")
    return line
