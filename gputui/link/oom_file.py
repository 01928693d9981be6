"""The OOM report file: where a probed job leaves its account when an out-of-memory error ends it.

The probe writes it (probe/runtime.py, as the error goes by its excepthook) and `gputui oom` reads it.
One JSON document per file, ``oom-<pid>-<time>.json``, 0600, in the user's probe directory (beside the
sockets: private to the user, on local storage) or in ``$GPUTUI_OOM_DIR``: the probe's report at the
moment of failure, whose ``last_oom`` says what failed, where and in which phase.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any, Mapping

from gputui.errors import UserError
from gputui.files import read_small
from gputui.link import paths
from gputui.model.codec import parse_json
from gputui.untrusted import visible

DIR_ENV = "GPUTUI_OOM_DIR"
SCHEMA = "gputui.oom-report"
VERSION = 1
PREFIX = "oom-"
FILE_MODE = 0o600
# Reports kept per directory, the newest: the runtime directory is a small tmpfs, and a job restarted by
# a scheduler after each OOM would otherwise fill it.
KEEP = 20
# The most `gputui oom` reads of one file. A real report is about 8 KB; one with every step the probe
# keeps (600 and 128 measured) on 8 GPUs and its 100 allocation sites stays under a few MiB. A file
# larger than this is not a report, and reading and parsing it would cost several times its size.
READ_LIMIT = 16 << 20


def oom_dir(environ: Mapping[str, str] | None = None, *, create: bool = True) -> Path:
    """Where this user's OOM reports go: $GPUTUI_OOM_DIR, else the probe directory (created 0700
    with ``create``; ``write``, ``latest`` and ``of_process`` check it before they trust it)."""
    env = os.environ if environ is None else environ
    override = env.get(DIR_ENV)
    if override:
        path = Path(override)
        if create:
            path.mkdir(mode=paths.DIR_MODE, parents=True, exist_ok=True)
        return path
    return paths.probe_dir(env) if create else paths.candidate_dirs(env)[0]


def check_dir(directory: Path) -> None:
    """ProbeDirUnsafe unless ``directory`` is a real directory of this user's, closed to others: in one
    another user can write, they could delete or replace reports, or plant one that passes for yours."""
    paths.check_dir(directory, what="the OOM report directory", env=DIR_ENV)


def write(report_json: Any, pid: int, directory: Path, *, now: float | None = None) -> Path:
    """Write one report (the probe's report in its JSON form) as a new 0600 file; its path.
    ProbeDirUnsafe when ``directory`` is not a private one of this user's."""
    check_dir(directory)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(time.time() if now is None else now))
    path = directory / f"{PREFIX}{pid}-{stamp}.json"
    document = {"schema": SCHEMA, "version": VERSION, "report": report_json}
    import json  # here: the monitor only reads these files, through parse_json (issue 31 item 21)

    data = json.dumps(document, separators=(",", ":"), allow_nan=False, default=str).encode()
    # O_EXCL: never through a link someone planted, never over another report
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    _prune(directory, keep=path)
    return path


def _prune(directory: Path, keep: Path) -> None:
    """Delete this user's reports beyond the newest KEEP, never ``keep`` (the one just written: an
    older report dated in the future, by a clock set back, must not push it out)."""
    try:
        found = sorted(_own_reports(directory, f"{PREFIX}*.json"), reverse=True)
        for _, old in [item for item in found if item[1] != keep][KEEP - 1:]:
            old.unlink()
    except (OSError, paths.ProbeDirUnsafe):
        pass  # a report written is what matters; an old one left behind is not


def latest(directory: Path) -> Path | None:
    """This user's newest report in ``directory``, or None. ProbeDirUnsafe when the directory is not
    a private one of this user's (what is in it could be anyone's)."""
    try:
        found = _own_reports(directory, f"{PREFIX}*.json")
    except OSError:
        return None
    return max(found)[1] if found else None


def of_process(directory: Path, pid: int, since: float) -> Path | None:
    """The newest report of process ``pid`` in ``directory`` written at ``since`` or later, or None
    (an older one is a former process's that had the same pid; none from an unsafe directory)."""
    try:
        found = _own_reports(directory, f"{PREFIX}{pid}-*.json")
    except (OSError, paths.ProbeDirUnsafe):
        return None
    fresh = [(mtime, p) for mtime, p in found if mtime >= since]
    return max(fresh)[1] if fresh else None


def _own_reports(directory: Path, pattern: str) -> list[tuple[float, Path]]:
    """(modification time, path) of each file named ``pattern`` in the checked ``directory`` that is a
    regular file of this user's: each opened without following a link and judged by fstat of what was
    opened, so a name swapped between a look and an open cannot pass."""
    check_dir(directory)
    found = []
    for path in directory.glob(pattern):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # a symlink (ELOOP), gone since, or not ours to read
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
            found.append((info.st_mtime, path))
    return found


def read(path: Path) -> dict[str, Any]:
    """The report's JSON form from a report file; UserError saying why where it is not one."""
    shown = visible(os.fspath(path))
    try:
        document = parse_json(read_small(path, READ_LIMIT, "OOM report"))
    except ValueError:
        raise UserError(f"{shown} is not an OOM report (not JSON)") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UserError(f"{shown} is not an OOM report (no {SCHEMA!r} schema)")
    if not isinstance(document.get("version"), int) or document["version"] > VERSION:
        raise UserError(f"{shown} was written by a newer gputui (report version "
                        f"{visible(str(document.get('version')))}); upgrade gputui to read it")
    if not isinstance(document.get("report"), dict):
        raise UserError(f"{shown} is not an OOM report (no report in it)")
    return document["report"]
