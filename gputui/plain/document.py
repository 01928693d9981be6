"""The JSON documents gputui prints: a versioned envelope around the model's own JSON form.

``--json`` prints a snapshot document, ``gputui probe PID --json`` a probe-report document and
``gputui probes --json`` a probe list, ``--hosts --json`` a list of hosts with each one's snapshot
document, ``gputui estimate --json`` an estimate. Field meanings and units: docs/json-schema.md; the JSON Schema
is ``gputui.plain.schema.SCHEMA``.
"""

from __future__ import annotations

from typing import Any, Sequence

from gputui import __version__
from gputui.analysis.breakdown import breakdowns
from gputui.model import Estimate, HostView, Job, ProbeReport, Snapshot, from_jsonable, to_jsonable
from gputui.model.codec import dump_json
from gputui.model.judgement import Judgements, ProcessJudgement

# Bump VERSION when a field changes meaning or is removed; adding a field keeps the version.
VERSION = 1
SNAPSHOT = "gputui.snapshot"
PROBE_REPORT = "gputui.probe-report"
PROBE_LIST = "gputui.probes"
HOSTS = "gputui.hosts"
ESTIMATE = "gputui.estimate"
KINDS = (SNAPSHOT, PROBE_REPORT, PROBE_LIST, HOSTS, ESTIMATE)
# A host of a hosts document: these fields of its HostView, then its snapshot as its own document.
HOST_FIELDS = ("name", "state", "reason", "age")

# A document as one line of ASCII JSON (so ``--json --watch`` is NDJSON), NaN and infinity as null: the
# one JSON writer, the probe wire's too.
dumps = dump_json


def _envelope(kind: str) -> dict[str, Any]:
    return {"schema": kind, "version": VERSION, "gputui": __version__}


def snapshot_document(snapshot: Snapshot, judgements: Judgements) -> dict[str, Any]:
    """The snapshot, the breakdown of every probed process's memory (the live monitor's bar), and what
    the monitor judged of it (the sampling pipeline's judgements)."""
    return {**_envelope(SNAPSHOT), "snapshot": to_jsonable(snapshot),
            "breakdowns": [to_jsonable(b) for report in snapshot.probes for b in breakdowns(report, snapshot)],
            "judgements": to_jsonable(judgements)}


def probe_document(report: ProbeReport, snapshot: Snapshot | None,
                   judgement: ProcessJudgement | None) -> dict[str, Any]:
    """One probe's report and its breakdown, with NVML's figures from ``snapshot`` when there is one, and
    the monitor's judgement of its process (null where there is none). ``headroom`` is the judgement's
    (kept at the top level, where the first documents had it)."""
    return {**_envelope(PROBE_REPORT), "report": to_jsonable(report),
            "breakdowns": [to_jsonable(b) for b in breakdowns(report, snapshot)],
            "headroom": [to_jsonable(h) for h in (judgement.headroom if judgement is not None else ())],
            "judgement": to_jsonable(judgement)}


def probe_list_document(reports: list[ProbeReport], unreachable: dict[int, str], jobs: Sequence[Job],
                        judgements: Judgements) -> dict[str, Any]:
    """Reachable probes' reports, the pids whose probe did not answer with the reason, the jobs the
    probed processes belong to, and what the monitor judged of each probed process and job
    (gputui.sample.judge.judge_reports')."""
    return {
        **_envelope(PROBE_LIST),
        "probes": [to_jsonable(r) for r in reports],
        "unreachable": [{"pid": pid, "reason": reason} for pid, reason in sorted(unreachable.items())],
        "jobs": [to_jsonable(j) for j in jobs],
        "judgements": to_jsonable(judgements),
    }


def hosts_document(hosts: list[HostView]) -> dict[str, Any]:
    """Each host of the many-host view: its state, and its latest snapshot as its own document."""
    return {**_envelope(HOSTS), "hosts": [
        {**{name: getattr(h, name) for name in HOST_FIELDS},
         "document": None if h.snapshot is None else snapshot_document(h.snapshot, h.judgements or Judgements())}
        for h in hosts]}


def estimate_document(estimate: Estimate) -> dict[str, Any]:
    """``gputui estimate --json``: the job's phases against the device, and the verdict."""
    return {**_envelope(ESTIMATE), "estimate": to_jsonable(estimate),
            "fits": estimate.fits(), "runs_out_in": estimate.runs_out_in()}


def read_judgements(document: Any) -> Judgements | None:
    """The judgements in a snapshot document (:func:`read_snapshot_document` checked it is one); None in
    one written before documents carried them. ValueError where they are not judgements."""
    judgements = document.get("judgements")
    return None if judgements is None else from_jsonable(Judgements, judgements)


def read_snapshot_document(document: Any) -> Snapshot:
    """The Snapshot in a snapshot document another gputui wrote (``--json``, ``serve``'s /snapshot).

    Raises ValueError, in words for people, for anything else: another kind of document, or a newer
    version whose fields this gputui may misread.
    """
    if not isinstance(document, dict):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    kind, version = document.get("schema"), document.get("version")
    if kind != SNAPSHOT:
        raise ValueError(f"not a gputui snapshot (schema {kind!r}, expected {SNAPSHOT!r})")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"a snapshot without a valid version ({version!r})")
    if version > VERSION:
        raise ValueError(f"its gputui ({document.get('gputui', '?')}) writes snapshot version {version}; "
                         f"this one reads up to {VERSION}: upgrade gputui here")
    return from_jsonable(Snapshot, document.get("snapshot"))
