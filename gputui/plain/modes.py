"""The one-shot modes: ``--once`` (text), ``--json`` and ``--watch`` (a repeating print of either).

Each returns the process exit code. Expected trouble (no driver, a GPU that does not exist) is raised
as UserError for the CLI to print; a reader closing the pipe ends the output quietly.
"""

from __future__ import annotations

import time

from gputui.model import Snapshot
from gputui.model.judgement import Judgements
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.sample.pipeline import open_pipeline
from gputui.units import clock_time

CLEAR_SCREEN = "\x1b[H\x1b[2J"
SEPARATOR_WIDTH = 100  # a log's separator line: long enough to see, never as wide as a pipe


def once(options: Options) -> int:
    """Print one snapshot as text."""
    with open_pipeline(options) as pipeline:
        sample = pipeline.sample()
        return terminal.show(snapshot_text(sample.snapshot, options, sample.judgements))


def json(options: Options) -> int:
    """Print one snapshot as a JSON document (one line)."""
    with open_pipeline(options) as pipeline:
        sample = pipeline.sample()
        return terminal.show(dumps(snapshot_document(sample.snapshot, sample.judgements)) + "\n")


def watch(options: Options) -> int:
    """Print a snapshot every ``options.watch`` seconds until interrupted; Ctrl-C exits 0.

    Text: on a terminal the screen is redrawn; into a file or pipe each print starts with a
    separator line carrying the time, for logs. With --json: one document per line (NDJSON).
    """
    period = options.watch or 2.0
    redraw = terminal.is_terminal() and not options.json
    from gputui.alerts.alerting import alerting_for, to_stderr  # here: --once loads this module without them
    from gputui.alerts.delivery import line

    alerting = alerting_for(options, to_stderr)
    try:
        with open_pipeline(options) as pipeline:
            deadline = time.monotonic()
            while True:
                sample = pipeline.sample()
                snapshot, judgements = sample.snapshot, sample.judgements
                for event in alerting(snapshot, judgements) if alerting is not None else ():
                    to_stderr("alert: " + line(event))
                if options.json:
                    terminal.emit(dumps(snapshot_document(snapshot, judgements)) + "\n")
                elif redraw:
                    terminal.emit(CLEAR_SCREEN + snapshot_text(snapshot, options, judgements))
                else:
                    terminal.emit(_separator(snapshot, options) + snapshot_text(snapshot, options, judgements))
                # Keep a steady rhythm: the time spent sampling counts toward the period.
                deadline = max(deadline + period, time.monotonic())
                time.sleep(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        terminal.silence_stdout()
        return 0
    finally:
        if alerting is not None:
            alerting.close()


def snapshot_text(snapshot: Snapshot, options: Options, judgements: Judgements | None = None) -> str:
    """What --once prints for ``snapshot`` and its judgements."""
    return render(snapshot, judgements, color=terminal.use_color(options), ascii=terminal.use_ascii(options),
                  width=terminal.width())


def _separator(snapshot: Snapshot, options: Options) -> str:
    label = f" {clock_time(snapshot.taken_at, date=True, zone=True)} "
    rule = min(terminal.width(), SEPARATOR_WIDTH)
    return "--" + label + "-" * max(2, rule - len(label) - 2) + "\n"
