"""Allocation-site recording, on demand: which lines of user code hold the live memory, step by step.

Bounded in steps, entries and seconds, and off again by itself. On CUDA it switches the allocator's
own history on (``allocator_history``) and attributes the live blocks of ``memory_snapshot()`` at
each step end; on CPU, and on CUDA where this torch has no history to switch on, it watches tensors
being created (a torch function mode, active only while recording) and saved for backward, and sums
the live bytes of each site through weak references to their storages.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import sysconfig
import threading
import time
import weakref
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

import gputui
from gputui.model import AllocationSite
from gputui.probe import allocator, allocator_history

MAX_STEPS = 50
MAX_SITES = 100  # sites in a report, largest first
STACK_DEPTH = 6  # user frames kept per site


def _skipped_roots() -> tuple[str, ...]:
    roots = [os.path.dirname(torch.__file__), os.path.dirname(gputui.__file__)]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.append(path)
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots) + ("<",)


_SKIPPED = _skipped_roots()
_user_file_cache: dict[str, bool] = {}


# The same, for stacks recorded on another machine (CUDA snapshots name the job's own paths); and
# console-script shims (bin/gputui, bin/torchrun: no .py), which only call into a package.
_SKIPPED_PATTERN = re.compile(
    r"/(site|dist)-packages/(torch|gputui)/|/lib/python3\.\d+/(?!(site|dist)-packages/)"
    r"|/bin/[^/]+(?<!\.py)$"
)
# gputui's own demo training loop stands in for the user's code (`gputui demo-train`).
_DEMO = os.path.join(os.path.realpath(os.path.dirname(gputui.__file__)), "probe", "demo.py")


def is_user_file(filename: str) -> bool:
    """Frames outside torch, gputui (but its demo loop), the standard library and console-script
    shims are the user's code."""
    known = _user_file_cache.get(filename)
    if known is None:
        path = filename if filename.startswith("<") else os.path.realpath(filename)
        known = path == _DEMO or (not path.startswith(_SKIPPED)
                                  and not _SKIPPED_PATTERN.search(filename))
        if len(_user_file_cache) < 10_000:
            _user_file_cache[filename] = known
    return known


def user_stack(frame=None, depth: int = STACK_DEPTH) -> tuple[str, ...]:
    """The innermost ``depth`` user frames of the current Python stack, innermost last."""
    frame = frame or sys._getframe(1)
    found: list[str] = []
    while frame is not None and len(found) < depth:
        code = frame.f_code
        if is_user_file(code.co_filename):
            found.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return tuple(reversed(found))


def user_stack_from_frames(frames: list[dict], depth: int = STACK_DEPTH) -> tuple[str, ...]:
    """The same, from a CUDA snapshot's frame list (innermost first, as the allocator records it)."""
    found = [
        f"{f.get('filename', '?')}:{f.get('line', 0)} in {f.get('name', '?')}"
        for f in frames
        if is_user_file(f.get("filename", "<unknown>"))
    ][:depth]
    return tuple(reversed(found))


def live_bytes_by_site(segments: list, device: int | None = None) -> tuple[dict, dict]:
    """Live block bytes per innermost user frame in ``torch.cuda.memory_snapshot()``'s segments,
    taken while the allocator's history is on.

    Returns (bytes by site, a stack per site). Blocks allocated before recording began carry no
    frames and are left out: they are not what grows while recording.
    """
    totals: dict[str, int] = {}
    stacks: dict[str, tuple[str, ...]] = {}
    for segment in segments:
        if device is not None and segment.get("device") != device:
            continue
        for block in segment.get("blocks", ()):
            if block.get("state") != "active_allocated":
                continue
            stack = user_stack_from_frames(block.get("frames") or [])
            if not stack:
                continue
            site = stack[-1]
            totals[site] = totals.get(site, 0) + int(block.get("size", 0))
            stacks.setdefault(site, stack)
    return totals, stacks


class _CreationWatch(TorchFunctionMode):
    """Sees every tensor a torch function returns while recording, to note where it was made."""

    def __init__(self, recorder: "SiteRecorder"):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if self.recorder.on:
            self.recorder.saw(result, args, kwargs)
        return result


class SiteRecorder:
    """One recording window at a time; results stay readable after it ends."""

    def __init__(self, problems, *, max_entries: int = 100_000, max_seconds: float = 120.0,
                 clock=time.perf_counter):
        self.problems = problems
        self.max_entries = max_entries
        self.max_seconds = max_seconds
        self.clock = clock
        self.on = False
        self.cuda_device: int | None = None  # recording through the CUDA allocator's history
        self.steps_left = 0
        self.started_at = 0.0
        self.recorded_steps: list[int] = []
        self.columns: dict[str, list[int]] = {}  # site -> live bytes per recorded step
        self.stacks: dict[str, tuple[str, ...]] = {}
        self.cost: float | None = None
        self.exclude: Callable[[], set] | None = None  # -> {(data_ptr, device)}: parameters, grads, state
        self._entries: dict[tuple, tuple] = {}  # (ptr, device) -> (weakref to storage, nbytes, site)
        self._mode: _CreationWatch | None = None
        self._mode_thread: int | None = None  # torch's function mode stack is per thread
        self._want: int | None = None  # steps asked for, started at the next step end
        self._durations: list[float] = []
        self._baseline: float | None = None

    # -- control (any thread) -----------------------------------------------------------------------

    def request(self, steps: int, on: bool = True) -> None:
        """Ask for a window of ``steps`` steps (it starts at the next step end), or for it to stop."""
        if on:
            self._want = max(1, min(int(steps), MAX_STEPS))
        else:
            self._want = None
            self.steps_left = 0  # the next step end (on the training thread) switches it off

    @property
    def pending(self) -> bool:
        return self._want is not None

    @property
    def process_wide(self) -> bool:
        """Whether the running recording is process-wide (CUDA's allocator history), which any thread
        may switch off, rather than a function mode that belongs to the training thread."""
        return self._mode is None

    @property
    def may_finish_here(self) -> bool:
        """Whether the calling thread may end the running recording: any thread a process-wide one,
        only the thread that entered it a function mode."""
        return self._mode is None or self._mode_thread == threading.get_ident()

    # -- on the training thread, at each step end ---------------------------------------------------

    def step_end(self, step: int, durations: list[float | None], device: str | None) -> None:
        try:
            if self.on:
                self._close_column(step, durations)
                if self.steps_left <= 0 or self.clock() - self.started_at > self.max_seconds:
                    self.finish()
            if self._want is not None and not self.on:
                self._begin(self._want, durations, device)
        except Exception as exc:
            self.problems.record("site recording", exc)
            self.finish()

    def _begin(self, steps: int, durations: list[float | None], device: str | None) -> None:
        self._want = None
        self.recorded_steps, self.columns, self.stacks, self._entries = [], {}, {}, {}
        self.cost, self._durations = None, []
        recent = [d for d in durations[-20:] if d is not None]
        self._baseline = statistics.median(recent) if recent else None
        self.steps_left = steps
        self.started_at = self.clock()
        self.cuda_device = None
        if (device and device.startswith("cuda") and torch.cuda.is_initialized()
                and allocator_history.start(self.max_entries, self.problems)):
            self.cuda_device = torch.device(device).index or 0
        else:
            self._mode = _CreationWatch(self)
            self._mode.__enter__()
            self._mode_thread = threading.get_ident()
        self.on = True

    def finish(self) -> None:
        self.on = False
        self.steps_left = 0
        if self._mode is not None:
            mode, self._mode = self._mode, None
            try:
                mode.__exit__(None, None, None)
            except Exception as exc:
                self.problems.record("site recording (leaving)", exc)
        if self.cuda_device is not None:
            allocator_history.stop(self.problems)
        self._entries = {}  # the weak references are not needed once the columns are closed

    def _close_column(self, step: int, durations: list[float | None]) -> None:
        started = self.clock()
        if self.cuda_device is not None:
            totals, stacks = live_bytes_by_site(allocator.memory_snapshot(), self.cuda_device)
        else:
            totals, stacks = self._live_cpu()
        n = len(self.recorded_steps)
        for site, stack in stacks.items():
            self.stacks.setdefault(site, stack)
        for site in set(self.columns) | set(totals):
            column = self.columns.setdefault(site, [0] * n)
            column.append(totals.get(site, 0))
        self.recorded_steps.append(step)
        self.steps_left -= 1
        if durations and durations[-1] is not None:
            self._durations.append(durations[-1] + self.clock() - started)
        if self._baseline is not None and self._durations:
            self.cost = max(0.0, statistics.median(self._durations) - self._baseline)

    def _live_cpu(self) -> tuple[dict, dict]:
        totals: dict[str, int] = {}
        dead = []
        # Parameters, gradients and optimizer state have their own categories; a site is about the
        # other memory a line of code keeps alive.
        model: set = self.exclude() if self.exclude is not None else set()
        for key, (ref, nbytes, site) in self._entries.items():
            if ref() is None:
                dead.append(key)
            elif key not in model:
                totals[site] = totals.get(site, 0) + nbytes
        for key in dead:
            del self._entries[key]
        return totals, {}

    # -- seeing tensors (training thread, while recording) -------------------------------------------

    def saw(self, result, args=(), kwargs=None) -> None:
        """Note the storages in ``result`` that are new, with the user code that made them."""
        try:
            made = _tensors(result)
            if made:
                # A result on an input's storage (a slice, a view, an in-place or out= result) is no new
                # allocation: a dataset held in memory and sliced per batch is not its slicing line's.
                given = {t.untyped_storage().data_ptr() for t in _tensors(args) + _tensors(kwargs)}
                for tensor in made:
                    self._note(tensor, given)
        except Exception as exc:
            self.problems.record("site recording (tensor)", exc)

    def saved(self, tensor) -> None:
        """Note a tensor saved for backward, made where the creation watch cannot see (inside an op)."""
        try:
            if tensor.numel() * tensor.element_size() < tensor.untyped_storage().nbytes():
                return  # part of a bigger storage (a batch sliced from a dataset): not made by this op
            self._note(tensor, set())
        except Exception as exc:
            self.problems.record("site recording (tensor)", exc)

    def _note(self, tensor, given: set) -> None:
        if len(self._entries) >= self.max_entries:
            return
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if not ptr or ptr in given:
            return
        key = (ptr, tensor.device)
        known = self._entries.get(key)
        if known is not None and known[0]() is storage:
            return  # a view or an in-place result: not a new allocation
        stack = user_stack(sys._getframe(1))
        if not stack:
            return
        site = stack[-1]
        self.stacks.setdefault(site, stack)
        self._entries[key] = (weakref.ref(storage), storage.nbytes(), site)

    # -- reading (any thread) -------------------------------------------------------------------------

    def sites(self) -> tuple[AllocationSite, ...]:
        """The recorded sites, those whose live bytes grew most while recording first (what leaks), then
        the largest (what is held)."""
        steps = len(self.recorded_steps)
        columns = {site: list(col) for site, col in list(self.columns.items()) if len(col) == steps}
        ranked = sorted(columns, key=lambda s: (_growth(columns[s]), max(columns[s], default=0), s), reverse=True)
        return tuple(
            AllocationSite(where=site, live_bytes=tuple(columns[site]), stack=self.stacks.get(site, ()))
            for site in ranked[:MAX_SITES]
        )


def _growth(live: list[int]) -> int:
    """Bytes a site gained from the first recorded step to the last (0 for one that shrank)."""
    return max(0, live[-1] - live[0]) if live else 0


def _tensors(value) -> list:
    """The tensors in a torch function's result or arguments: itself, or the first few of a list,
    tuple or dict (a cheap look, not a deep walk)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [item for item in value[:8] if isinstance(item, torch.Tensor)]
    return []
