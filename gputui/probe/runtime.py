"""The running probe: the hooks, the OOM watch, site recording and the socket, put together.

One Probe per process. Everything that reads torch runs here, on the training thread, inside the
hooks (see the rule in gputui/probe/__init__.py); the results go on the Board, and the socket thread's
Desk answers from the Board alone. A forked child (a DataLoader worker) goes quiet and serves only if
it starts training itself.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Callable

import torch

from gputui.analysis.leaks import PERIODS, leak_verdict
from gputui.link import oom_file
from gputui.link.server import ProbeServer
from gputui.model import ProbeDevice, ProbeReport, to_jsonable
from gputui.model.verdicts import LEAK_LEAK
from gputui.probe import allocator
from gputui.probe.board import Board, Reading, SitesView
from gputui.probe.budget import DEFAULT_BUDGET
from gputui.probe.categories import SLOTS, categories_of
from gputui.probe.desk import PROBE_VERSION, Desk  # noqa: F401 - PROBE_VERSION: part of this API
from gputui.probe.keepers import KeeperFinder
from gputui.probe.oom import OomWatch
from gputui.probe.sites import SiteRecorder
from gputui.probe.stepping import MEASURED_KEPT
from gputui.probe.tracking import Tracker

SNAPSHOT_EVERY = 10.0  # seconds between memory_snapshot() calls (largest free block): they cost
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


# Host memory set aside at start and let go as an OOM report is written: a job that ran out of host memory
# (under `ulimit -v` or a cgroup) has none left for the report's few hundred KiB of JSON.
OOM_RESERVE = 4 << 20


class Probe:
    """Everything the probe does inside one process."""

    def __init__(
        self,
        *,
        activations: bool = True,
        budget: float = DEFAULT_BUDGET,
        serve: bool = True,
        socket_path=None,
        via: str = "api",
        max_steps: int = 600,
        auto_sites: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ):
        # clock: the probe's seconds (the readings budget, the age of the published figures); tests
        # drive it rather than wait, or count the training thread's CPU time on a loaded machine.
        self.clock = clock
        self.pid = os.getpid()
        self.via = via  # how it was started: api, run, env, attach, demo
        self.board = board = Board(max_steps=max_steps, measured_kept=MEASURED_KEPT)
        board.pid, board.via = self.pid, via
        board.torch_version = str(torch.__version__)
        board.command = tuple(sys.argv) if sys.argv and sys.argv != [""] else ()
        self.started_at = board.started_at
        self.desk = Desk(board, clock)
        self.tracker = Tracker(activations=activations, budget=budget, board=board, clock=clock)
        self.problems = board.problems
        self.oom = OomWatch(board, write_report=self._write_oom_report)
        self._oom_reserve: bytearray | None = None
        self.sites = SiteRecorder(self.problems)
        self.keepers = KeeperFinder(self.problems)
        self.sites.exclude = self.tracker.categories.model_storages
        self.serve = serve  # False: serve only once this process steps an optimizer (helpers)
        self.socket_path = socket_path
        self.server: ProbeServer | None = None
        self.running = False
        self._snapshot_at = float("-inf")
        self._free_blocks: dict[int, int | None] = {}
        self._uuids: dict[int, str | None] = {}
        self._sites_view_of: tuple | None = None  # what the published SitesView was made from
        self.auto_sites = auto_sites  # record allocation sites by itself once a leak is confirmed
        self.leak_state: str | None = None  # the probe's own latest leak verdict
        self._next_check = AUTO_CHECK_STEPS  # step at which the next leak check may run
        self._checked_elapsed = 0.0
        self._check_cost = 0.0
        self._auto_at: float | None = None
        self._keeper_span = 0  # steps between the keeper search's two looks, for the recording it asked for

    # -- life cycle (the thread that calls start(): the training thread) ------------------------------

    def start(self) -> "Probe":
        if self.running:
            return self
        self.tracker.on_step_end = self._step_end
        self.tracker.on_forward = self._reading_if_wanted
        self.tracker.activations.saw_tensor = None
        self.tracker.install()
        self.oom.install()
        self._oom_reserve = bytearray(OOM_RESERVE)
        self.running = True
        self._publish()  # what there is before the first step (CUDA already in use, say)
        if self.serve:
            self._start_server()
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Remove every hook and the socket; safe to call twice and from atexit (which runs on the
        main thread once the job's other non-daemon threads have ended)."""
        try:
            atexit.unregister(self.stop)
            self.running = False
            self.tracker.uninstall()
            self.oom.uninstall()
            self.sites.request(0, on=False)
            if self.sites.on and self.sites.may_finish_here:
                # CUDA history is process-wide and can be switched off from here; a CPU recording's
                # function mode belongs to the thread that entered it: `gputui detach` stops the probe
                # on the main thread, which trains in most jobs. (From any other thread, the mode stays
                # until that thread's next step, which no hook of ours sees any more.)
                self.sites.finish()
            self._oom_reserve = None
            if self.server is not None and os.getpid() == self.pid:
                self.server.stop()
            self.server = None
        except Exception as exc:
            self.problems.record("stopping", exc)

    def _write_oom_report(self) -> str:
        """Write the report of an OOM that ends a thread of the job (on that thread, in the excepthook):
        the last published figures and steps and the OOM's own record, from the board alone (no tensor
        is read here). Its path; raises where none could be written (OomWatch contains it and says why)."""
        self._oom_reserve = None  # room to write in, however little the job left
        report = self.desk.report_now()
        return str(oom_file.write(to_jsonable(report), self.pid, oom_file.oom_dir()))

    def _start_server(self) -> None:
        server = ProbeServer(self.desk.handlers(), path=self.socket_path)
        if server.start():
            self.server = server
            self.board.server_problems = server.problems
        else:
            why = server.error or "could not start"
            self.problems.record("socket", RuntimeError(why))
            # The job goes on, but nobody could ever see its probe: its owner must hear why, once.
            _say(f"gputui: the probe runs in process {os.getpid()}, but no monitor can reach it: "
                 f"{why}\n")

    def _after_fork(self) -> None:
        """In a forked child: the parent's socket is not ours; serve again only if we train here.

        Runs in the child right after fork, on the thread that forked; touches no torch object.
        """
        self.pid = self.board.pid = os.getpid()
        self.server = None
        self.serve = False
        self.socket_path = None
        self.tracker.forget_steps()
        self.board.reading = Reading()
        self.desk = Desk(self.board, self.clock)
        self._next_check, self._checked_elapsed = AUTO_CHECK_STEPS, self.tracker.elapsed
        self.leak_state = None

    # -- the training thread's hooks ----------------------------------------------------------------

    def _step_end(self, step: int) -> None:
        # On the training thread, right after optimizer.step(), at every step: right after the
        # step's own work, whatever this touches is out of the CPU's caches, so the common path
        # (nothing asked, nothing read, nothing due) reads one flag of the board and one of the tracker.
        tracker, board = self.tracker, self.board
        if not (board.wanted or tracker.last_measured or step & 31 == 1):
            return
        board.wanted = False  # (before the requests are read: one made from now on sets it again)
        try:
            self._step_end_work(step)
        finally:
            sites = self.sites
            if (sites.on or sites.pending or self.keepers.looking
                    or board.reading_wanted > board.reading.monotonic):
                board.wanted = True  # still to do at the next step end

    def _step_end_work(self, step: int) -> None:
        """What a step end does where something was asked, read or due (see _step_end)."""
        tracker, board = self.tracker, self.board
        if tracker.last_measured:
            started = self.clock()
            self._publish(tracker.last_reading)
            tracker.budget.charge(self.clock() - started)
        elif board.reading_wanted > board.reading.monotonic:
            self._reading_if_wanted()
        if board.sites_wanted[0] != board.sites_taken:
            self._take_sites_request()
        sites = self.sites
        if sites.on or sites.pending:
            durations = board.recent_durations(21)
            was_on = sites.on
            sites.step_end(step, durations, tracker.device)
            tracker.activations.saw_tensor = sites.saved if sites.on else None
            if sites.on and not was_on:
                # The keeping line: what the user's frames hold is sized when recording starts and
                # again when the keeper's span is over (from here, the frames above are the job's
                # training loop).
                started = self.clock()
                span, self._keeper_span = max(sites.steps_left, self._keeper_span), 0
                self.keepers.start(step, sys._getframe(2), span)
                tracker.budget.charge_diagnostic(self.clock() - started)
            self._publish_sites()
        elif self.auto_sites and tracker.last_measured and (step >= self._next_check or tracker.evidence.last):
            # Right after a measured step, with its reading in; always after one measured because
            # memory grew (rare: their gaps double), since that is when a verdict may have come.
            self._maybe_check_for_leak(step, always=tracker.evidence.last)
        if self.keepers.due(step):
            started = self.clock()
            self.keepers.finish(step, sys._getframe(2))
            tracker.budget.charge_diagnostic(self.clock() - started)
            self._publish_sites()
        if step & 31 == 1:
            self._now_and_then()

    def _reading_if_wanted(self) -> None:
        """A monitor asked for fresher figures than the board has: read them now, within budget."""
        board, budget = self.board, self.tracker.budget
        if board.reading_wanted > board.reading.monotonic and budget.may_answer():
            started = self.clock()
            try:
                self._publish()
            finally:
                budget.charge_answer(self.clock() - started)

    def _take_sites_request(self) -> None:
        serial, steps, on = self.board.sites_wanted
        self.board.sites_taken = serial
        self.sites.request(steps, on=on)
        self._publish_sites()

    def _now_and_then(self) -> None:
        """Every 32 steps: what may change at any time but need not be seen at once."""
        if not self.serve and self.server is None and self.running:
            self.serve = True  # a helper process that trains after all: a real training process
            self._start_server()
        if not (self.oom.observer_attached or self.oom.observer_unavailable):  # CUDA may come up any time
            try:
                self.oom.attach_cuda_observer()
            except Exception as exc:
                self.problems.record("OOM observer", exc)

    # -- publishing (training thread) -----------------------------------------------------------------

    def _publish(self, reading=None) -> None:
        """Read the devices' figures (or take them from a step end's reading) and put them on the board."""
        try:
            counts = reading.tally if reading is not None and reading.tally is not None else None
            if counts is None:
                counts = self.tracker.tally()
        except Exception as exc:  # publish what can still be read
            self.problems.record("counting tensors", exc)
            counts = {}
        try:
            devices = self._devices(counts)
        except Exception as exc:
            self.problems.record("reading the allocator", exc)
            devices = ()
        board = self.board
        board.hook_seconds = self.tracker.cost
        board.limits = self.tracker.limits()
        board.reading = Reading(devices=devices, read_at=time.time(), step=self.tracker.step_count,
                                monotonic=self.clock())

    def _devices(self, counts: dict) -> tuple[ProbeDevice, ...]:
        cuda = allocator.devices_in_use()
        if cuda and time.monotonic() - self._snapshot_at > SNAPSHOT_EVERY and self.tracker.budget.may_spend():
            # The largest free block needs the allocator's whole segment list: costly on a big job,
            # so now and then, and charged to the probe's budget like every reading.
            started = self.clock()
            self._snapshot_at = time.monotonic()
            segments = allocator.memory_snapshot()
            self._free_blocks = {i: allocator.largest_free_block(segments, i) for i in cuda}
            self.tracker.budget.charge(self.clock() - started)
        devices = []
        shown, main = self.tracker.activations_shown(), self.tracker.device
        seen = self.tracker.forward_seen or not self.tracker.step_count  # (before a step: not yet known)
        gathered = self.tracker.gathered.shown  # (FSDP2: the latest measured step's peak)
        for index in cuda:
            name = f"cuda:{index}"
            stats = allocator.stats_from_memory_stats(
                torch.cuda.memory_stats(index),
                largest_free_block=self._free_blocks.get(index),
                settings=allocator.allocator_settings(),
            )
            devices.append(ProbeDevice(
                device=name, cuda_index=index, uuid=self._uuid(index), allocator=stats,
                categories=categories_of(counts.get(name), stats.allocated if stats else None,
                                         shown if name == main else None, seen,
                                         gathered if name == main else None),
            ))
        for name in sorted(counts):
            if not name.startswith("cuda"):
                devices.append(ProbeDevice(device=name, categories=categories_of(
                    counts[name], activations=shown if name == main else None, seen=seen,
                    gathered=gathered if name == main else None)))
        if not devices:
            devices.append(ProbeDevice(device="cpu", categories=categories_of([0] * SLOTS)))
        return tuple(devices)

    def _uuid(self, index: int) -> str | None:
        if index not in self._uuids:  # a device's UUID does not change: asked once
            try:
                self._uuids[index] = allocator.device_uuid(index)
            except Exception:
                self._uuids[index] = None
        return self._uuids[index]

    def _publish_sites(self) -> None:
        sites = self.sites
        keepers = self.keepers.keepers
        key = (sites.on, sites.pending, sites.started_at, len(sites.recorded_steps), sites.cost, keepers)
        if key != self._sites_view_of:
            self._sites_view_of = key
            self.board.sites = SitesView(
                recording=sites.on or sites.pending, recorded_steps=tuple(sites.recorded_steps),
                sites=sites.sites(), cost=sites.cost, started_at=sites.started_at, keepers=keepers)

    # -- automatic site recording (training thread) --------------------------------------------------

    def _maybe_check_for_leak(self, step: int, always: bool = False) -> None:
        tracker = self.tracker
        if (not always and (tracker.elapsed - self._checked_elapsed) * LEAK_CHECK_SHARE < self._check_cost
                or self._auto_at is not None and time.monotonic() - self._auto_at < AUTO_COOLDOWN):
            self._next_check = step + AUTO_CHECK_STEPS
            return
        started = self.clock()
        try:
            recent = tuple(e.to_record() for e in self.board.entries())
            verdict = leak_verdict(ProbeReport(pid=self.pid, taken_at=time.time(), steps=recent))
            self.leak_state = verdict.state
            if verdict.state == LEAK_LEAK:
                self._auto_at = time.monotonic()
                self.sites.request(AUTO_SITES_STEPS)
                # A leak that grows in steps (a tensor kept every 20 steps) is sized over whole periods
                # of it: over fewer, the keeper may not have grown at all, and its rate is off.
                self._keeper_span = PERIODS * (verdict.period_steps or 1)
                self._publish_sites()
        except Exception as exc:
            self.problems.record("leak check", exc)
        finally:
            self._next_check = step + AUTO_CHECK_STEPS
            self._checked_elapsed = tracker.elapsed
            self._check_cost = self.clock() - started
            tracker.budget.charge_diagnostic(self._check_cost)

    # -- the report (any thread: from the board) -------------------------------------------------------

    def report(self) -> ProbeReport:
        """What the probe last published, as the monitor would get it."""
        return self.desk.report_now()


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


def _say(line: str) -> None:
    """Write one line to the job's stderr, if it has one; never raise into the job."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(line)
            sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed or broken stderr is the job's business
        pass
