"""The step state machine: where the running step is, its start and end, what is read at each.

The primary optimizer's step() ends a training step (its post-hook is the step end, the one hook that
stays installed for good); the step end works out in advance whether the next step is measured, read
lightly or neither, so that most step ends take the lean path and only compare figures (see
ReadingsBudget). A measured step's phases are closed at the boundaries the hooks mark (tracking.py),
each with a reading; its end leaves a full StepRecord on the board, revised once the next step shows
what the step kept. The budget drives all of it; nothing here installs a hook.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from typing import Callable

import torch

from gputui.model import StepRecord
from gputui.probe import allocator
from gputui.probe.activations import Activations
from gputui.probe.board import Board
from gputui.probe.budget import DEFAULT_BUDGET, HookCost, ReadingsBudget
from gputui.probe.categories import Categories, categories_of
from gputui.probe.host import MallocInUse, ResidentMemory
from gputui.probe.sharded import Gathered
from gputui.probe.steps import (
    BACKWARD,
    FORWARD,
    IDLE,
    LIGHT_EVERY,
    LIGHT_FIGURES,
    NO_LIGHT,
    OPTIMIZER,
    Evidence,
    PhasePeaks,
    PhaseReading,
    StepEntry,
    light_entry,
)

# What one saved tensor costs the training thread with the hooks on (pack, unpack and release, each a
# call from C++ into Python), measured inside a real CPU training loop (torch 2.13, a shared 2-core
# machine: cold caches after each op make these calls cost far more than in a tight loop); counted
# against the readings budget.
PACK_COST = 12e-6
MEASURED_KEPT = 128  # measured steps kept beyond the window of recent steps
is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


class Stepping:
    """The step boundaries and the readings at them, on the training thread only. The hooks that mark
    the phases and find the models are the Tracker's (tracking.py), which is a Stepping: the step end
    reads its own fields, with no hop to another object (the lean path is a few microseconds).

    Its parts, each with its own account: ``categories`` (the optimizers and models found, tallies),
    ``activations`` (saved tensors), ``phases`` and ``evidence`` (steps), ``budget`` (readings) and
    ``hook_cost`` (the step hook's own).
    """

    def __init__(
        self,
        *,
        activations: bool = True,
        budget: float = DEFAULT_BUDGET,
        max_steps: int = 600,
        clock: Callable[[], float] = time.perf_counter,
        wallclock: Callable[[], float] = time.time,
        board: Board | None = None,
    ) -> None:
        self.clock = clock
        self.wallclock = wallclock
        self.board = board if board is not None else Board(max_steps=max_steps, measured_kept=MEASURED_KEPT)
        self.problems = self.board.problems
        self.budget = ReadingsBudget(budget, clock)
        self.hook_cost = HookCost()  # the step hook's own cost, beside the readings budget
        self.categories = Categories()
        self.activations = Activations(self.problems, watched=activations)
        self.gathered = Gathered()  # the unsharded parameters FSDP2 gathers (sharded.py)
        self.phase = IDLE  # where the running step is: idle, forward, backward, optimizer
        self.device: str | None = None  # the step's device: the one that holds most parameter bytes
        self.phases = PhasePeaks()
        self.evidence = Evidence()
        self.step_count = 0
        self.active = False  # the hooks are installed (set by the Tracker)
        self.on_step_end: Callable[[int], None] | None = None  # set by the probe (site recording, re-arming)
        self.last_reading: PhaseReading | None = None  # the latest measured step's end reading
        self.last_measured = False  # the latest step has a full StepRecord
        self._primary: weakref.ref | None = None  # the optimizer whose step() ends a training step
        # Its id while it lives (None once it is gone): the step hook knows it without calling the weakref.
        self._primary_id: int | None = None
        # (the latest measured step's entry, {key: live entry} of what it saved and held at its end):
        # checked again at the next step's end (see _revise_kept)
        self._kept_check: tuple | None = None
        self._tracked = 0  # tracked bytes at the latest measured step (CPU: heap figures below it are not ours)
        self._armed = False  # the hooks that readings need are installed (the Tracker arms them)
        self._step_started: float | None = None
        self._measuring = True
        self._lean = False  # the next step end may take the lean path (see _optimizer_post)
        self._lean_steps = 0  # steps that took it since the budget last saw one (see _add_lean_steps)
        self._last_light = 0  # the latest step whose light figure (or whole reading) was read
        self._calibrating = True  # the lean steps' cost is still being timed (HookCost)
        self._wall_offset = 0.0  # wall clock less the step clock, at the latest full step end
        self.resident = ResidentMemory()
        self.malloc = MallocInUse()

    # -- reading memory ---------------------------------------------------------------------------

    def tally(self) -> dict[str, list[int]]:
        """Bytes per device and category right now: parameters, gradients, state, activations."""
        gathered = self.gathered.read() if self.gathered.seen else {}
        counts = self.categories.tally(skip=gathered)
        self._exclude(gathered)
        self.activations.add_to(counts)
        return counts

    def _exclude(self, gathered: dict) -> None:
        # Saved tensors with these storages are parameters, state or gathered parameters, not activations.
        keys = self.categories.model_keys
        self.activations.model_keys = keys.union(gathered) if gathered else keys

    @property
    def forward_seen(self) -> bool:
        """Whether the hooks see the models' forward passes, and so the activations they save."""
        return self.activations.watched and bool(self.categories.modules)

    def activations_shown(self) -> tuple[int, int] | None:
        """(bytes, step) to report as activations instead of what is held now, or None for "now".

        Inside a measured step's forward or backward the saved tensors held now are the figure;
        anywhere else (a step's end, after backward freed its graph, or a step the hooks do not
        watch) it is the latest measured step's peak, named by its step, never a 0 that only
        means "not watched".
        """
        if self._measuring and self.phase in (FORWARD, BACKWARD):
            return None
        return self.activations.shown

    def _read(self, with_tally: bool) -> PhaseReading:
        """Memory on the step's device now: the allocator's counters on CUDA, tracked bytes on CPU."""
        categories = self.categories
        device = self.device
        if device is not None and device.startswith("cuda") and allocator.cuda_ready():
            stats = torch.cuda.memory_stats(torch.device(device))
            return PhaseReading(
                allocated=int(stats.get("allocated_bytes.all.current", 0)),
                peak=int(stats.get("allocated_bytes.all.peak", 0)),
                stats=stats,
                tally=self.tally() if with_tally else None,
            )
        row = categories.quick_row(device, with_shape=with_tally)
        if row is not None:
            row[3] = self.activations.bytes_on(categories.torch_device)  # (ACTS)
            return PhaseReading(allocated=sum(row), tally={device: row} if with_tally else None)
        counts = self.tally()
        if device is None:
            device = self.device = categories.main_device(counts)
        row = categories.settle(device, counts)
        return PhaseReading(allocated=sum(row) if row else 0, tally=counts)

    def _mark(self, phase: str) -> None:
        """Close the running phase at a boundary and open ``phase``."""
        previous, self.phase = self.phase, phase
        if not self._measuring:
            return
        started = self.clock()
        try:
            if self.gathered.seen:
                if phase == IDLE:
                    self.gathered.settle()  # (resharded: FSDP1's flat parameters hold their shards again)
                self.gathered.read()  # (backward gathers again: its start is one of the peaks looked at)
            reading = self._read(with_tally=phase == IDLE)
            if phase == IDLE and reading.stats is None:
                # CPU jobs only (a CUDA job's verdict stands on the allocator): the C allocator's
                # bytes in use, else resident memory. Each read costs tens of microseconds in a
                # real loop, so only the one the verdict will use.
                heap = self.malloc.read()
                if heap is not None and heap >= reading.allocated:
                    reading.heap = heap
                else:
                    reading.host = self.resident.read()
            self.phases.close(previous, phase, reading, self.activations.bytes_on(self.categories.torch_device))
        finally:
            self.budget.charge(self.clock() - started)

    # -- the step end -----------------------------------------------------------------------------

    def _start_step(self) -> None:
        """A step starts where none was running (the first, or after the hooks were installed);
        at a step end, _end_step starts the next one itself."""
        budget = self.budget
        packs = self.activations.packs
        if packs:
            budget.charge(self.activations.take_packs() * PACK_COST)
        now = self._step_started = self.clock()
        self.activations.start_step()
        self.gathered.start_step()
        measuring = budget.start_step(now, first=not self.board.steps)
        if self.evidence.start_step():
            measuring = True
        self._measuring = measuring
        self.phases.reset(measuring)

    def _optimizer_post(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        """The step end: the optimizer post-hook, the one hook the Tracker keeps installed for good."""
        now = self.clock()  # (first: the step ends here, and all this hook does is the probe's cost)
        if not self.active or is_compiling():
            return None
        try:
            if id(optimizer) != self._primary_id:
                primary = self._primary and self._primary()
                if primary is None:  # the first one seen, or the old one is gone (a new optimizer)
                    self.categories.optimizers.add(optimizer)
                    self._make_primary(optimizer)
                elif primary is not optimizer:
                    return None
            budget = self.budget
            # (A step's light reading is judged on the time seen up to its start, as light_ok.)
            started = self._step_started
            if (self._lean and now < budget.measure_from and started is not None and started < budget.light_from
                    and self.step_count - self._last_light < LIGHT_EVERY - 1):
                self._lean_step_end(now, started, budget)
            else:
                self._end_step(now)
        except Exception as exc:
            self.problems.record("optimizer post-hook", exc)
        return None

    def _make_primary(self, optimizer: torch.optim.Optimizer) -> None:
        self._primary = weakref.ref(optimizer, self._primary_gone)
        self._primary_id = id(optimizer)

    def _primary_gone(self, _ref: weakref.ref) -> None:
        # (Before its id can be another object's.)
        self._primary_id = None

    def _end_step(self, now: float) -> None:
        """The primary optimizer's step ended at ``now``: its entry, and whether the next is measured."""
        # At every step, right after the step's own work has pushed the probe's objects out of the
        # CPU caches. Most steps take the lean path instead (_lean_step_end, chosen in _optimizer_post).
        count = self.step_count + 1
        budget = self.budget
        self._lean = False
        self._wall_offset = self.wallclock() - now
        started = self._step_started
        self.step_count = count
        duration = None if started is None else now - started
        if self._lean_steps and started is not None:
            self._add_lean_steps(started)
        measured, timed = self._measuring, budget.hook_seconds
        if self._kept_check is not None:
            self._revise_kept()
        if measured:
            self._mark(IDLE)
            end = self.phases.mark(IDLE)
            entry = self._entry(duration, end)
            self.last_reading = end
            self.board.steps.append(entry)
            if end is not None:
                self.board.add_measured(entry)
            self.last_measured = end is not None
            self._last_light = count
            light, light_seconds, light_path = None, 0.0, 0.0
            # Saved tensors are seen only in measured steps (the hooks are pushed only then): their
            # calls are charged to the step that starts now, as its readings' own.
            carried = self.activations.take_packs() * PACK_COST
        else:
            self.phase = IDLE
            if budget.light_ok or count - self._last_light >= LIGHT_EVERY:
                light_started = self.clock()
                light = self._light_reading()
                light_seconds = self.clock() - light_started
                light_path = self.hook_cost.beyond_lean  # (a light reading's step end is never lean)
                self._last_light = count
            else:
                light, light_seconds, light_path = NO_LIGHT, 0.0, 0.0
            self.board.steps.append(light_entry(StepEntry, (count, self._wall_offset + now, duration,
                                                            self.device) + light + (None,)))
            self.last_measured = False
            carried = 0.0
        # The next step starts where this one ends (data loading included).
        measuring = budget.next_step(duration, measured, now, light_seconds, carried, light_path, timed)
        if self.evidence.next_step(count, light):
            measuring = True
        self._step_started = now
        self._measuring = measuring
        if measuring:
            self.activations.start_step()
            self.gathered.start_step()
        if measuring or measured:
            self.phases.reset(measuring)
        toggle = self._rehook(measuring)
        hook_cost = self.hook_cost
        if measured or toggle:
            # A measured step's record, arming or removing the hooks: after its end, on the next
            # step's clock, charged as the next step's own readings (what charged itself inside left
            # out; ``carried`` is no time spent here: the ending step's saved tensors, estimated).
            budget.charge(self.clock() - now - (budget.hook_seconds - timed - carried))
            if self.on_step_end is not None:
                # The probe's step-end work beyond what it charged itself: one-off (the socket started,
                # the OOM observer attached) or the same at every step. Charged to the budget, it could
                # starve the measured steps for minutes; it is in the account (HookCost) instead.
                started, timed = self.clock(), budget.hook_seconds
                self.on_step_end(count)
                took = self.clock() - started - (budget.hook_seconds - timed)
                hook_cost.add(took)
                # (the next step's time holds it, where a typical one holds a lean step end's)
                budget.in_account(took - (hook_cost.lean_end or 0.0))
            return
        # An unmeasured step's end: in the account, not in the readings budget (see HookCost). The next
        # may take the lean path if it is not measured either and nothing is to be undone.
        self._lean = not measuring and not self._armed and self._kept_check is None
        if self.on_step_end is not None:
            self.on_step_end(count)
        unmeasured = hook_cost.unmeasured
        unmeasured.steps += 1
        own = unmeasured.per_step
        if own is None:
            own = self.clock() - now - (budget.hook_seconds - timed)
            unmeasured.sample(own)
        # (The next step holds it, where a typical one holds a lean step end's: in the account already.)
        budget.in_account(own - (hook_cost.lean_end or own))

    def _rehook(self, measuring: bool) -> bool:
        """At a full step end, the hooks made ready for the next step (measured or not): whether they
        were armed or removed. None here; the Tracker installs them."""
        return False

    def _lean_step_end(self, now: float, started: float, budget: ReadingsBudget) -> None:
        """The end of a step that was not measured, after one that was not either, whose end reads
        nothing and leaves the next unmeasured, as worked out in advance (_lean, the budget's
        measure_from and light_from) so that the step hook only compares them: its entry, counted for
        the budget and the account later (_add_lean_steps), and the probe's step end only where the
        board wants something of it or its now-and-then work is due (every 32 steps)."""
        timed = budget.hook_seconds
        self.step_count = count = self.step_count + 1
        self.phase = IDLE
        # (ended_at from the wall clock's offset, read at the latest full step end: one clock read less)
        duration = now - started
        self.board.steps.append(light_entry(StepEntry, (count, self._wall_offset + now, duration,
                                                        self.device, None, None, None, None)))
        budget.lean_step(duration, timed)
        self._step_started = now
        self._lean_steps += 1
        if self._calibrating:
            # The hook's fixed cost, in the probe's account but not in the readings budget, where it
            # would starve the measured steps (see HookCost).
            lean = self.hook_cost.lean
            lean.sample(self.clock() - now - (budget.hook_seconds - timed))
            self._calibrating = lean.per_step is None
        on_step_end = self.on_step_end
        if on_step_end is not None and (self.board.wanted or count & 31 == 1):
            self._now_and_then(on_step_end, count, budget)

    def _now_and_then(self, on_step_end: Callable[[int], None], count: int, budget: ReadingsBudget) -> None:
        """The probe's step end at a lean step end that the board wants or whose now-and-then work is
        due: its own kind in the account (HookCost.due), timed at the first of them, then their median
        (a stall left out). Left in the lean step ends' calibration, the median would drop it (one step
        end in 32) and no timer would see it."""
        due = self.hook_cost.due
        due.steps += 1
        took = due.per_step
        if took is None:
            started, timed = self.clock(), budget.hook_seconds
            on_step_end(count)
            took = self.clock() - started - (budget.hook_seconds - timed)
            due.sample(took)
        else:
            on_step_end(count)
        # (The next step's time holds it: left out of what is estimated of that step, less the share of
        # it a typical step holds, in the account already.)
        budget.in_account(took - (self.hook_cost.lean_end or 0.0) + (self.hook_cost.lean.per_step or 0.0))

    def _add_lean_steps(self, until: float) -> None:
        """The steps that took the lean path since the budget last saw one, the last ending at ``until``:
        their time given to the budget, and their count to the account."""
        self.budget.skipped(until)
        self.hook_cost.lean.steps += self._lean_steps
        self._lean_steps = 0

    def _entry(self, duration: float | None, end: PhaseReading | None) -> StepEntry:
        """A measured step's entry, with its full StepRecord (none where the reading failed)."""
        device = self.device
        if end is None:
            return StepEntry(self.step_count, self.wallclock(), duration, device)
        row = (end.tally or {}).get(device) if device else None
        stats = end.stats or {}
        cuda = end.stats is not None
        self._tracked = end.allocated
        figure = LIGHT_FIGURES.index("allocated" if cuda else "host_allocated")
        value = end.allocated if cuda else end.heap
        if value is not None:
            self.evidence.set_base(figure, value, self.step_count)
        activations, phases = self.activations, self.phases
        held = activations.held_from_this_step() if activations.watched else None
        kept = sum(entry[1] for entry in held.values()) if held is not None else None
        record = StepRecord(
            step=self.step_count,
            ended_at=self.wallclock(),
            duration=duration,
            device=device,
            allocated=end.allocated,
            reserved=_get(stats, "reserved_bytes.all.current") if cuda else None,
            inactive_split=_get(stats, "inactive_split_bytes.all.current") if cuda else None,
            alloc_retries=_get(stats, "num_alloc_retries") if cuda else None,
            peak_forward=phases.peak(FORWARD),
            peak_backward=phases.peak(BACKWARD),
            peak_optimizer=phases.peak(OPTIMIZER),
            allocated_at_start=start.allocated if (start := phases.mark(FORWARD)) else None,
            categories=categories_of(row, end.allocated if cuda else None, seen=self.forward_seen,
                                     gathered=self.gathered.peak if self.gathered.seen else None),
            host_memory=end.host,
            host_allocated=end.heap,
            activations_kept=kept,
            activations_peak=activations.peak if self.forward_seen else None,
        )
        if activations.watched:
            activations.show_peak(self.step_count)
        self.gathered.show_peak()
        entry = StepEntry.measured(record)
        if held:
            self._kept_check = (entry, held)
        return entry

    def _revise_kept(self) -> None:
        """A step after a measured one: of what it saved and held at its end, what is still held.

        Tensors saved for a backward that has not freed them (``retain_graph=True``, a loss still
        named by the loop) are held at the step's end and let go in the next step; only what a
        whole step later is still held was kept, so the record is revised to that.
        """
        started = self.clock()
        if self._kept_check is None:
            return
        entry, held = self._kept_check
        self._kept_check = None
        try:
            kept = self.activations.kept_of(held)
            record = entry.record
            if kept != record.activations_kept:
                revised = entry._replace(record=dataclasses.replace(record, activations_kept=kept))
                self.board.revise_latest(entry, revised)
        except Exception as exc:
            self.problems.record("activations kept", exc)
        self.budget.charge(self.clock() - started)

    def _light_reading(self) -> tuple:
        """The LIGHT_FIGURES of an unmeasured step: the one figure a leak verdict is judged on, read
        at nearly every step so that a leak is seen within dozens of steps. It takes at most half
        the readings budget (ReadingsBudget.light_ok), so measured steps keep the rest: where it
        costs more than that (CUDA's counters in very short steps), every few steps only."""
        try:
            device = self.device
            if device is None:
                return NO_LIGHT
            if device.startswith("cuda"):
                if not allocator.cuda_ready():
                    return NO_LIGHT
                stats = torch.cuda.memory_stats_as_nested_dict(torch.device(device))
                return (int(stats["allocated_bytes"]["all"]["current"]), None, None)
            heap = self.malloc.read()
            if heap is not None and heap >= self._tracked:
                return (None, heap, None)
            return (None, None, self.resident.read())
        except Exception as exc:
            self.problems.record("step-end reading", exc)
            return NO_LIGHT

    # -- what the probe reads of it ---------------------------------------------------------------

    @property
    def cost(self) -> float:
        """Seconds the probe took on the training thread by its own account: what was charged to the
        readings budget and the step hook's own cost at the other steps."""
        hook_cost = self.hook_cost
        return self.budget.charged + hook_cost.seconds + (hook_cost.lean.per_step or 0.0) * self._lean_steps

    @property
    def elapsed(self) -> float:
        """Step time seen so far."""
        budget, started = self.budget, self._step_started
        return budget.seen_until(started) if self._lean_steps and started is not None else budget.elapsed

    def forget_steps(self) -> None:
        """Count steps anew (a forked child): no steps kept, none counted."""
        self.board.clear_steps()
        self.step_count = 0


def _get(stats: dict, key: str) -> int | None:
    value = stats.get(key)
    return None if value is None else int(value)
