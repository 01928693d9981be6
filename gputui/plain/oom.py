"""``gputui oom [FILE]``: the report a probed job left when an out-of-memory error ended it.

Printed as ``gputui probe PID`` prints a live probe (the breakdown, the steps, the leak verdict and
the advice), under a line that says which file it is; ``--json`` gives the same document as
``gputui probe PID --json``. No driver is needed: everything is in the file.
"""

from __future__ import annotations

from pathlib import Path

from gputui.errors import UserError
from gputui.link import oom_file
from gputui.model import ProbeReport, from_jsonable
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.document import dumps, probe_document
from gputui.plain.report import render_probe
from gputui.sample.judge import judge_report
from gputui.units import clock_time
from gputui.untrusted import visible


def oom(options: Options) -> int:
    """Print the given OOM report, or this user's latest."""
    path = _which(options.file)
    try:
        report = from_jsonable(ProbeReport, oom_file.read(path))
    except UserError:
        raise
    except Exception as exc:  # a report from another version, or hand-edited
        raise UserError(f"{visible(str(path))} is not a report this gputui can read: {visible(str(exc))}") from None
    judgement = judge_report(report)
    if options.json:
        out = dumps(probe_document(report, None, judgement)) + "\n"
    else:
        title = f"OOM report {visible(str(path))}"  # a file name may hold escape sequences
        if report.last_oom is not None:
            title += f", written {clock_time(report.last_oom.at, date=True, zone=True)}"
        out = title + "\n\n" + render_probe(report, None, judgement, color=terminal.use_color(options),
                                            ascii=terminal.use_ascii(options), width=terminal.width())
    return terminal.show(out)


def _which(given: object) -> Path:
    if isinstance(given, str):
        return Path(given)
    directory = oom_file.oom_dir(create=False)
    found = oom_file.latest(directory)  # ProbeDirUnsafe when another user could have put it there
    if found is None:
        raise UserError(f"no OOM report in {visible(str(directory))}: a probed job leaves one there when an "
                        f"out-of-memory error ends it (set {oom_file.DIR_ENV} to look elsewhere)")
    return found
