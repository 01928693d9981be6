"""The socket thread's side of the probe: answers hello, report and record_sites from the Board alone.

It is handed nothing but a Board (plain published data) and imports no torch, so a request cannot make
it touch a tensor, however often or whenever it comes. What it wants from the training thread (a fresher
reading, site recording) it leaves on the board as a request.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable

from gputui.link.protocol import FRESH_FOR, RawJSON, dumps
from gputui.model import Placement, ProbeReport, StepRecord, to_jsonable
from gputui.probe.board import Board
from gputui.probe.steps import LIGHT_FIGURES, StepEntry

PROBE_VERSION = 1
# (A reading older than FRESH_FOR when a report is asked for makes the training thread take a new one at
# its next hook, within its share of the budget: a monitor polling once a second sees figures at most
# about that old.)
MAX_SITE_STEPS = 50


class Desk:
    """Serves the probe's reports; every method runs on the socket thread (or any thread)."""

    def __init__(self, board: Board, clock: Callable[[], float] = time.perf_counter):
        self.board = board
        self.clock = clock  # the probe's clock: the published reading's age
        self.cpu_seconds = 0.0  # this thread's time spent answering
        self._steps_json: dict[int, tuple] = {}  # step -> (the entry encoded, its JSON)
        self._sites_cache: tuple = (None, b"[]")

    def handlers(self) -> dict:
        return {"hello": self.hello, "report": self.report, "record_sites": self.record_sites}

    def hello(self, params: dict) -> dict:
        board = self.board
        return {"probe_version": PROBE_VERSION, "torch_version": board.torch_version,
                "started_at": board.started_at, "via": board.via, "steps": board.step_count}

    def report_now(self) -> ProbeReport:
        """The whole report as a ProbeReport, from what was last published."""
        started = time.thread_time()
        try:
            steps = self.board.records()
            return dataclasses.replace(self._head(), steps=steps, sites=self.board.sites.sites)
        finally:
            self.cpu_seconds += time.thread_time() - started

    def report(self, params: dict) -> RawJSON:
        """The report as JSON: whole, or with ``since_step`` only the steps after that one.

        A poller that already holds the steps up to ``since_step`` (and says which probe it holds them
        from, ``started_at``) gets only the new ones, marked by a ``since_step`` key; a whole report (no
        such key) tells it to start over: another probe, or steps counted anew. A step record changes
        at most once after it is written (the latest measured one, a step later), so each is encoded
        once or twice, not at every request.
        """
        started = time.thread_time()
        try:
            board = self.board
            entries = board.entries()
            numbers = [s.step for s in entries]
            since = _since_step(params, board.started_at, numbers[-1] if numbers else 0)
            data = to_jsonable(self._head())
            del data["steps"], data["sites"]
            data["probe_started_at"] = board.started_at
            if since is not None:
                data["since_step"] = since
            cache = self._steps_json
            steps = []
            for number, entry in zip(numbers, entries):
                if since is not None and number <= since:
                    continue
                cached = cache.get(number)
                if cached is None or cached[0] is not entry:  # new, or revised (Board.revise_latest)
                    cached = cache[number] = (entry, _step_json(entry))
                steps.append(cached[1])
            if len(cache) > 2 * len(entries) + 10:
                keep = set(numbers)
                self._steps_json = {k: v for k, v in cache.items() if k in keep}
            return RawJSON(dumps(data)[:-1] + b',"sites":' + self._sites_json()
                           + b',"steps":[' + b",".join(steps) + b"]}")
        finally:
            self.cpu_seconds += time.thread_time() - started

    def record_sites(self, params: dict) -> dict:
        on = params.get("on", True)
        steps = params.get("steps", 10)
        if not isinstance(on, bool) or not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError("record_sites takes {'steps': a positive integer, 'on': true or false}")
        board = self.board
        board.want_sites(steps, on)
        return {"recording": on, "steps": min(steps, MAX_SITE_STEPS) if on else 0,
                "starts_at_step": board.step_count + 1 if on else None}

    def _head(self) -> ProbeReport:
        """Everything but the steps; asks for a fresher reading when the published one is old."""
        board = self.board
        reading, sites = board.reading, board.sites
        now = self.clock()
        if now - reading.monotonic > FRESH_FOR:
            board.want_reading(now)
        return ProbeReport(
            pid=board.pid,
            taken_at=time.time(),
            torch_version=board.torch_version,
            started_at=board.started_at,
            via=board.via,
            command=board.command,
            devices=reading.devices,
            read_at=reading.read_at,
            read_at_step=reading.step if reading.read_at is not None else None,
            last_oom=board.last_oom,
            recording=sites.recording or board.sites_pending,
            recorded_steps=sites.recorded_steps,
            keepers=sites.keepers,
            recording_cost=sites.cost,
            probe_cpu_seconds=board.hook_seconds + self.cpu_seconds,
            problems=board.problems.lines() + tuple(board.server_problems),
            limits=board.limits,
            # read at each report: a job may set its rank variables after importing torch (mp.spawn)
            placement=Placement.from_environ(os.environ),
        )

    def _sites_json(self) -> bytes:
        # Unchanged between step ends: encoded again only when the recording published a new view.
        view = self.board.sites
        if self._sites_cache[0] is not view:
            self._sites_cache = (view, dumps(to_jsonable(view.sites)))
        return self._sites_cache[1]


# The fields after (step, ended_at, duration, device), and where an unmeasured step's entry holds the
# few it has (see steps.StepEntry); the rest are null.
_TAIL_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))[4:]
_FIGURES = {name: i for i, name in enumerate(LIGHT_FIGURES)}
_NULL_TAIL = dumps({name: None for name in _TAIL_FIELDS})[1:]


def _step_json(entry: StepEntry) -> bytes:
    """One step as JSON, as to_jsonable() would give its StepRecord, at a fraction of the cost.

    A few hundred steps a second arrive between two polls of the monitor; most are steps the probe did
    not measure, which carry no full record.
    """
    step, ended_at, duration, device, *figures, record = entry
    if record is None and math.isfinite(ended_at) and (duration is None or math.isfinite(duration)):
        head = b'{"step":%d,"ended_at":%s,"duration":%s,"device":%s,' % (
            step, repr(float(ended_at)).encode(),
            b"null" if duration is None else repr(float(duration)).encode(), dumps(device))
        if not any(v is not None for v in figures):
            return head + _NULL_TAIL
        values = [None if _FIGURES.get(name) is None else figures[_FIGURES[name]] for name in _TAIL_FIELDS]
        return head + b",".join(b'"%s":%s' % (name.encode(), b"null" if v is None else b"%d" % v)
                                for name, v in zip(_TAIL_FIELDS, values)) + b"}"
    return dumps(to_jsonable(entry.to_record()))


def _since_step(params: dict, started_at: float, step_count: int) -> int | None:
    """The step after which a report's steps are wanted, or None for a whole report."""
    since = params.get("since_step")
    if since is None:
        return None
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise ValueError("since_step must be a non-negative integer")
    if params.get("started_at") != started_at or since > step_count:
        return None  # the poller's steps are from another probe, or counted before a fork
    return since
