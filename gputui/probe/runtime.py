"""The running probe: the hooks, the OOM watch, site recording and the socket, put together.

One Probe per process. Reports are built on demand, on the server's thread, when the monitor asks;
nothing polls in the background. A forked child (a DataLoader worker) goes quiet and serves only if it
starts training itself.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import sys
import threading
import time

import torch

from gputui.analysis.leaks import WINDOW_STEPS, leak_verdict
from gputui.link.protocol import RawJSON, dumps
from gputui.link.server import ProbeServer
from gputui.model import ProbeDevice, ProbeReport, StepRecord, to_jsonable
from gputui.model.verdicts import LEAK_LEAK
from gputui.probe import allocator
from gputui.probe.oom import OomWatch
from gputui.probe.sites import SiteRecorder
from gputui.probe.tracking import Tracker, categories_of

SNAPSHOT_EVERY = 10.0  # seconds between memory_snapshot() calls (largest free block): they cost
PROBE_VERSION = 1
# Automatic site recording once a leak is confirmed. The probe judges its own steps because it is
# where the steps happen: it works with no monitor attached (a later `gputui probe PID` finds the
# sites already recorded), recording must start on the training thread anyway, and the verdict is a
# pure function of the step records (gputui.analysis imports nothing heavy). The monitor asking over
# the socket would need a monitor running and a round trip per decision. The check is cheap but not
# free (a Theil-Sen fit, ~0.4 ms), so it runs every AUTO_CHECK_STEPS measured steps at most, and only
# as often as keeps its cost under LEAK_CHECK_SHARE of step time.
AUTO_CHECK_STEPS = 16
LEAK_CHECK_SHARE = 0.001
AUTO_SITES_STEPS = 12  # steps recorded once a leak is confirmed
AUTO_COOLDOWN = 600.0  # seconds before a leak may switch recording on by itself again


class Probe:
    """Everything the probe does inside one process."""

    def __init__(
        self,
        *,
        activations: bool = True,
        budget: float = 0.004,
        serve: bool = True,
        socket_path=None,
        via: str = "api",
        max_steps: int = 600,
        auto_sites: bool = True,
    ):
        self.pid = os.getpid()
        self.via = via  # how it was started: api, run, env, attach, demo
        self.started_at = time.time()
        self.tracker = Tracker(activations=activations, budget=budget, max_steps=max_steps)
        self.problems = self.tracker.problems
        self.oom = OomWatch(self.problems)
        self.sites = SiteRecorder(self.problems)
        self.sites.exclude = self.tracker.model_storages
        self.serve = serve  # False: serve only once this process steps an optimizer (helpers)
        self.socket_path = socket_path
        self.server: ProbeServer | None = None
        self.running = False
        self._lock = threading.Lock()
        self._snapshot_at = 0.0
        self._free_blocks: dict[int, int | None] = {}
        self._server_cpu = 0.0
        self._steps_json: dict[int, bytes] = {}
        self._sites_cache: tuple = (None, b"[]")
        self.auto_sites = auto_sites  # record allocation sites by itself once a leak is confirmed
        self.leak_state: str | None = None  # the probe's own latest leak verdict
        self._next_check = AUTO_CHECK_STEPS  # step at which the next leak check may run
        self._checked_elapsed = 0.0
        self._check_cost = 0.0
        self._auto_at: float | None = None

    # -- life cycle ---------------------------------------------------------------------------------

    def start(self) -> "Probe":
        if self.running:
            return self
        self.tracker.on_step_end = self._step_end
        self.tracker.saw_tensor = None
        self.tracker.install()
        self.oom.install()
        self.running = True
        if self.serve:
            self._start_server()
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Remove every hook and the socket; safe to call twice and from atexit."""
        try:
            atexit.unregister(self.stop)
            self.running = False
            self.tracker.uninstall()
            self.oom.uninstall()
            self.sites.request(0, on=False)
            if self.sites.on and self.sites._mode is None:
                self.sites._finish()  # CUDA history can be switched off from any thread
            if self.server is not None and os.getpid() == self.pid:
                self.server.stop()
            self.server = None
        except Exception as exc:
            self.problems.record("stopping", exc)

    def _start_server(self) -> None:
        server = ProbeServer(
            {"hello": self._hello, "report": self._report, "record_sites": self._record_sites},
            path=self.socket_path,
        )
        if server.start():
            self.server = server
        else:
            self.problems.record("socket", RuntimeError(server.error or "could not start"))

    def _after_fork(self) -> None:
        """In a forked child: the parent's socket is not ours; serve again only if we train here."""
        self.pid = os.getpid()
        self.server = None
        self.serve = False
        self.socket_path = None
        self._lock = threading.Lock()  # a parent thread may have held the old one at fork time
        self.tracker.clear_steps()
        self.tracker.step_count = 0
        self._steps_json = {}
        self._next_check, self._checked_elapsed = AUTO_CHECK_STEPS, self.tracker._elapsed
        self.leak_state = None

    def _step_end(self, step: int) -> None:
        # On the training thread, right after optimizer.step(), at every step: right after the
        # step's own work, whatever this touches is out of the CPU's caches, so the common path
        # reads as few objects as it can.
        sites = self.sites
        if sites.on or sites._want is not None:
            durations = [s[2] if isinstance(s, tuple) else s.duration
                         for s in list(self.tracker._steps)[-21:]]
            sites.step_end(step, durations, self.tracker.device)
            self.tracker.saw_tensor = sites.saw if sites.on else None
        elif step >= self._next_check and self.auto_sites and self.tracker.last_measured:
            self._maybe_check_for_leak(step)  # right after a measured step, with its reading in
        if step & 31 == 1:
            self._now_and_then()

    def _now_and_then(self) -> None:
        """Every 32 steps: what may change at any time but need not be seen at once."""
        if not self.serve and self.server is None and self.running:
            self.serve = True  # a helper process that trains after all: a real training process
            self._start_server()
        if not self.oom.observer_attached:  # CUDA may come up any time
            try:
                self.oom.attach_cuda_observer()
            except Exception as exc:
                self.problems.record("OOM observer", exc)

    # -- automatic site recording (training thread) --------------------------------------------------

    def _maybe_check_for_leak(self, step: int) -> None:
        tracker = self.tracker
        if ((tracker._elapsed - self._checked_elapsed) * LEAK_CHECK_SHARE < self._check_cost
                or self._auto_at is not None and time.monotonic() - self._auto_at < AUTO_COOLDOWN):
            self._next_check = step + AUTO_CHECK_STEPS
            return
        started = time.perf_counter()
        try:
            recent = list(tracker._measured)[-2 * WINDOW_STEPS:]
            verdict = leak_verdict(ProbeReport(pid=self.pid, taken_at=time.time(), steps=tuple(recent)))
            self.leak_state = verdict.state
            if verdict.state == LEAK_LEAK:
                self._auto_at = time.monotonic()
                self.sites.request(AUTO_SITES_STEPS)
        except Exception as exc:
            self.problems.record("leak check", exc)
        finally:
            self._next_check = step + AUTO_CHECK_STEPS
            self._checked_elapsed = tracker._elapsed
            self._check_cost = time.perf_counter() - started
            tracker.hook_seconds += self._check_cost

    # -- the report ----------------------------------------------------------------------------------

    def report(self) -> ProbeReport:
        """What the probe knows right now (safe from any thread)."""
        started = time.thread_time()
        try:
            return self._build_report()
        finally:
            self._server_cpu += time.thread_time() - started

    def _build_report(self) -> ProbeReport:
        with self._lock:
            devices = self._devices()
        return dataclasses.replace(self._report_without_steps(devices), steps=tuple(self.tracker.steps))

    def _report_without_steps(self, devices: tuple[ProbeDevice, ...]) -> ProbeReport:
        sites = self.sites
        if sites.on and time.perf_counter() - sites.started_at > sites.max_seconds:
            sites.request(0, on=False)  # the next step end switches it off; steps may have stopped
        return ProbeReport(
            pid=self.pid,
            taken_at=time.time(),
            torch_version=torch.__version__,
            command=tuple(sys.argv) if sys.argv and sys.argv != [""] else (),
            devices=devices,
            last_oom=self.oom.last,
            recording=sites.on or sites.pending,
            recorded_steps=tuple(sites.recorded_steps),
            sites=sites.sites(),
            recording_cost=sites.cost,
            probe_cpu_seconds=self.tracker.hook_seconds + self._server_cpu,
            problems=self.problems.lines() + tuple(self.server.problems if self.server else ()),
        )

    def _devices(self) -> tuple[ProbeDevice, ...]:
        try:
            counts = self.tracker.tally()
        except Exception as exc:  # report what can still be read
            self.problems.record("counting tensors", exc)
            counts = {}
        cuda = allocator.devices_in_use()
        snapshot_due = cuda and time.monotonic() - self._snapshot_at > SNAPSHOT_EVERY
        if snapshot_due:
            self._snapshot_at = time.monotonic()
            segments = _memory_snapshot()
            self._free_blocks = {i: allocator.largest_free_block(segments, i) for i in cuda}
        devices = []
        for index in cuda:
            name = f"cuda:{index}"
            stats = allocator.stats_from_memory_stats(
                torch.cuda.memory_stats(index),
                largest_free_block=self._free_blocks.get(index),
                settings=allocator.allocator_settings(),
            )
            try:
                uuid = allocator.device_uuid(index)
            except Exception:
                uuid = None
            devices.append(ProbeDevice(
                device=name, cuda_index=index, uuid=uuid, allocator=stats,
                categories=categories_of(counts.get(name), stats.allocated if stats else None),
            ))
        for name in sorted(counts):
            if not name.startswith("cuda"):
                devices.append(ProbeDevice(device=name, categories=categories_of(counts[name])))
        if not devices:
            devices.append(ProbeDevice(device="cpu", categories=categories_of([0, 0, 0, 0])))
        return tuple(devices)

    # -- handlers (the server's thread) --------------------------------------------------------------

    def _hello(self, params: dict) -> dict:
        return {
            "probe_version": PROBE_VERSION,
            "torch_version": torch.__version__,
            "started_at": self.started_at,
            "via": self.via,
            "steps": self.tracker.step_count,
        }

    def _report(self, params: dict) -> RawJSON:
        """The report as JSON: whole, or with ``since_step`` only the steps after that one.

        A poller that already holds the steps up to ``since_step`` (and says which probe it holds
        them from, ``started_at``) gets only the new ones, marked by a ``since_step`` key; a
        whole report (no such key) tells it to start over: another probe, or steps counted anew.
        Step records never change once written, so each is encoded once, not at every request.
        """
        started = time.thread_time()
        try:
            since = _since_step(params, self.started_at, self.tracker.step_count)
            with self._lock:
                devices = self._devices()
            report = self._report_without_steps(devices)
            data = to_jsonable(dataclasses.replace(report, sites=()))
            del data["steps"], data["sites"]
            data["probe_started_at"] = self.started_at
            if since is not None:
                data["since_step"] = since
            entries = self.tracker.entries()
            numbers = [s[0] if type(s) is tuple else s.step for s in entries]
            cache = self._steps_json
            steps = []
            for number, entry in zip(numbers, entries):
                if since is not None and number <= since:
                    continue
                encoded = cache.get(number)
                if encoded is None:
                    encoded = cache[number] = _step_json(entry)
                steps.append(encoded)
            if len(cache) > 2 * len(entries) + 10:
                keep = set(numbers)
                self._steps_json = {k: v for k, v in cache.items() if k in keep}
            return RawJSON(dumps(data)[:-1] + b',"sites":' + self._sites_json(report.sites)
                           + b',"steps":[' + b",".join(steps) + b"]}")
        finally:
            self._server_cpu += time.thread_time() - started

    def _sites_json(self, sites: tuple) -> bytes:
        # Unchanged between step ends: encoded again only when the recording added a column.
        key = (self.sites.started_at, tuple(self.sites.recorded_steps), len(sites))
        if self._sites_cache[0] != key:
            self._sites_cache = (key, dumps(to_jsonable(sites)))
        return self._sites_cache[1]

    def _record_sites(self, params: dict) -> dict:
        on = params.get("on", True)
        steps = params.get("steps", 10)
        if not isinstance(on, bool) or not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError("record_sites takes {'steps': a positive integer, 'on': true or false}")
        self.sites.request(steps, on=on)
        return {"recording": on, "steps": min(steps, 50) if on else 0,
                "starts_at_step": self.tracker.step_count + 1 if on else None}


# The fields of a step that was not measured, all null: only step, ended_at, duration, device are known.
_UNMEASURED_TAIL = dumps({f.name: None for f in dataclasses.fields(StepRecord)[4:]})[1:]


def _step_json(entry) -> bytes:
    """One step record as JSON, as to_jsonable() would give it, at a fraction of the cost.

    A few hundred steps a second arrive between two polls of the monitor; most are the plain
    (step, ended_at, duration, device) tuples of steps the probe did not measure.
    """
    if type(entry) is tuple:
        step, ended_at, duration, device = entry
        if math.isfinite(ended_at) and (duration is None or math.isfinite(duration)):
            return (b'{"step":%d,"ended_at":%s,"duration":%s,"device":%s,' % (
                step, repr(float(ended_at)).encode(),
                b"null" if duration is None else repr(float(duration)).encode(),
                dumps(device))) + _UNMEASURED_TAIL
        entry = StepRecord(*entry)
    return dumps(to_jsonable(entry))


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


def _memory_snapshot() -> list:
    try:
        return torch.cuda.memory_snapshot(include_traces=False)
    except TypeError:  # torch before 2.6 has no include_traces
        return torch.cuda.memory_snapshot()


# -- the one probe of this process ----------------------------------------------------------------

_current: Probe | None = None
_current_lock = threading.Lock()


def start(**options) -> Probe:
    """Start (or return) this process's probe."""
    global _current
    with _current_lock:
        if _current is not None and _current.running and _current.pid == os.getpid():
            return _current
        _current = Probe(**options).start()
        return _current


def stop() -> None:
    global _current
    with _current_lock:
        probe, _current = _current, None
    if probe is not None:
        probe.stop()


def current() -> Probe | None:
    return _current


def _after_fork_in_child() -> None:
    probe = _current
    if probe is not None:
        try:
            probe._after_fork()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
