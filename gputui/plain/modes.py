"""The one-shot modes: ``--once`` (text), ``--json`` and ``--watch`` (a repeating print of either).

Each returns the process exit code. Expected trouble (no driver, a GPU that does not exist) is raised
as UserError for the CLI to print; a reader closing the pipe ends the output quietly.
"""

from __future__ import annotations

import time

from gputui.model import Snapshot
from gputui.plain import terminal
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.gather import Source
from gputui.plain.render import render
from gputui.units import clock_time
from gputui.options import Options

CLEAR_SCREEN = "\x1b[H\x1b[2J"
SEPARATOR_WIDTH = 100  # a log's separator line: long enough to see, never as wide as a pipe


def once(options: Options) -> int:
    """Print one snapshot as text."""
    with Source(options) as source:
        return terminal.show(snapshot_text(source.sample(), options))


def json(options: Options) -> int:
    """Print one snapshot as a JSON document (one line)."""
    with Source(options) as source:
        return terminal.show(dumps(snapshot_document(source.sample())) + "\n")


def watch(options: Options) -> int:
    """Print a snapshot every ``options.watch`` seconds until interrupted; Ctrl-C exits 0.

    Text: on a terminal the screen is redrawn; into a file or pipe each print starts with a
    separator line carrying the time, for logs. With --json: one document per line (NDJSON).
    """
    period = options.watch or 2.0
    redraw = terminal.is_terminal() and not options.json
    try:
        with Source(options) as source:
            deadline = time.monotonic()
            while True:
                snapshot = source.sample()
                if options.json:
                    terminal.emit(dumps(snapshot_document(snapshot)) + "\n")
                elif redraw:
                    terminal.emit(CLEAR_SCREEN + snapshot_text(snapshot, options))
                else:
                    terminal.emit(_separator(snapshot, options) + snapshot_text(snapshot, options))
                # Keep a steady rhythm: the time spent sampling counts toward the period.
                deadline = max(deadline + period, time.monotonic())
                time.sleep(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        terminal.silence_stdout()
        return 0


def snapshot_text(snapshot: Snapshot, options: Options) -> str:
    """What --once prints for ``snapshot``."""
    return render(snapshot, color=terminal.use_color(options), ascii=terminal.use_ascii(options),
                  width=terminal.width())


def _separator(snapshot: Snapshot, options: Options) -> str:
    label = f" {clock_time(snapshot.taken_at, date=True, zone=True)} "
    rule = min(terminal.width(), SEPARATOR_WIDTH)
    return "--" + label + "-" * max(2, rule - len(label) - 2) + "\n"
