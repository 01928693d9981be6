"""The OOM report file: where a probed job leaves its account when an out-of-memory error ends it.

The probe writes it (probe/runtime.py, as the error goes by its excepthook) and `gputui oom` reads it.
One JSON document per file, ``oom-<pid>-<time>.json``, 0600, in the user's probe directory (beside the
sockets: private to the user, on local storage) or in ``$GPUTUI_OOM_DIR``: the probe's report at the
moment of failure, whose ``last_oom`` says what failed, where and in which phase.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

from gputui.errors import UserError
from gputui.link import paths

DIR_ENV = "GPUTUI_OOM_DIR"
SCHEMA = "gputui.oom-report"
VERSION = 1
PREFIX = "oom-"
FILE_MODE = 0o600
# Reports kept per directory, the newest: the runtime directory is a small tmpfs, and a job restarted by
# a scheduler after each OOM would otherwise fill it.
KEEP = 20


def oom_dir(environ: Mapping[str, str] | None = None, *, create: bool = True) -> Path:
    """Where this user's OOM reports go: $GPUTUI_OOM_DIR, else the probe directory."""
    env = os.environ if environ is None else environ
    override = env.get(DIR_ENV)
    if override:
        path = Path(override)
        if create:
            path.mkdir(mode=paths.DIR_MODE, parents=True, exist_ok=True)
        return path
    return paths.probe_dir(env) if create else paths.candidate_dirs(env)[0]


def write(report_json: Any, pid: int, directory: Path, *, now: float | None = None) -> Path:
    """Write one report (the probe's report in its JSON form) as a new 0600 file; its path."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(time.time() if now is None else now))
    path = directory / f"{PREFIX}{pid}-{stamp}.json"
    document = {"schema": SCHEMA, "version": VERSION, "report": report_json}
    data = json.dumps(document, separators=(",", ":"), allow_nan=False, default=str).encode()
    # O_EXCL: never through a link someone planted, never over another report
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    _prune(directory)
    return path


def _prune(directory: Path) -> None:
    try:
        found = sorted(directory.glob(f"{PREFIX}*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in found[KEEP:]:
            old.unlink()
    except OSError:
        pass  # a report written is what matters; an old one left behind is not


def latest(directory: Path) -> Path | None:
    """The newest report in ``directory``, or None."""
    try:
        found = [p for p in directory.glob(f"{PREFIX}*.json") if p.is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def of_process(directory: Path, pid: int, since: float) -> Path | None:
    """The newest report of process ``pid`` in ``directory`` written at ``since`` or later, or None
    (an older one is a former process's that had the same pid)."""
    try:
        found = [(p.stat().st_mtime, p) for p in directory.glob(f"{PREFIX}{pid}-*.json")]
    except OSError:
        return None
    fresh = [(mtime, p) for mtime, p in found if mtime >= since]
    return max(fresh)[1] if fresh else None


def read(path: Path) -> dict[str, Any]:
    """The report's JSON form from a report file; UserError saying why where it is not one."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"no such OOM report: {path}") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise UserError(f"{path} is not an OOM report (not JSON)") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UserError(f"{path} is not an OOM report (no {SCHEMA!r} schema)")
    if not isinstance(document.get("version"), int) or document["version"] > VERSION:
        raise UserError(f"{path} was written by a newer gputui (report version {document.get('version')}); "
                        "upgrade gputui to read it")
    if not isinstance(document.get("report"), dict):
        raise UserError(f"{path} is not an OOM report (no report in it)")
    return document["report"]
