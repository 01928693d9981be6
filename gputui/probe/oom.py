"""Notice out-of-memory errors without getting in their way: the allocator's OOM observer and excepthooks.

On CUDA the caching allocator calls an observer at the moment it gives up (even when the program
catches the error and carries on; attached by ``oom_observer``, the one module that calls torch's
private API for it); for errors that end the program, on CPU too, a chained
``sys.excepthook``/``threading.excepthook`` sees them on the way out. Either way the error itself
reaches the user unchanged.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
import time
import traceback
from typing import Callable

from gputui.model import OomRecord
from gputui.probe.sites import is_user_file
from gputui.untrusted import harmless, visible

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_CUDA_TRIED = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_CUDA_FREE = re.compile(r"of which ([\d.]+) (B|KiB|MiB|GiB|TiB) is free")
_CUDA_ALLOCATED = re.compile(r"([\d.]+) (B|KiB|MiB|GiB|TiB) is allocated by PyTorch")
_CUDA_RESERVED = re.compile(r"([\d.]+) (B|KiB|MiB|GiB|TiB) is reserved by PyTorch but unallocated")
_CUDA_DEVICE = re.compile(r"GPU (\d+) has a total capacity")
_CPU_TRIED = re.compile(r"you tried to allocate (\d+) bytes")
_OUR_FILES = ("/gputui/probe/",)


def is_oom(exc: BaseException) -> bool:
    """True for torch's OutOfMemoryError and for the CPU allocator's "can't allocate memory"."""
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text
    )


def _size(match) -> int | None:
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def record_from_exception(exc: BaseException, tb=None, *, at: float | None = None) -> OomRecord:
    """An OomRecord from an OOM exception: figures parsed from torch's message, where from the traceback."""
    text = str(exc)
    requested = _size(_CUDA_TRIED.search(text))
    if requested is None:
        cpu = _CPU_TRIED.search(text)
        requested = int(cpu.group(1)) if cpu else None
    device_match = _CUDA_DEVICE.search(text)
    device: str | None
    if device_match:
        device = f"cuda:{device_match.group(1)}"
    else:
        device = "cpu" if "CPU" in text or "alloc_cpu" in text else None
    frames = traceback.extract_tb(tb if tb is not None else exc.__traceback__)
    allocated = _size(_CUDA_ALLOCATED.search(text))
    # torch says how much of its reserve is *unallocated*; the record's reserved is the whole reserve,
    # as memory_stats() gives it on the observer's path.
    unallocated = _size(_CUDA_RESERVED.search(text))
    reserved = None if allocated is None or unallocated is None else allocated + unallocated
    return OomRecord(
        at=time.time() if at is None else at,
        device=device,
        requested=requested,
        free=_size(_CUDA_FREE.search(text)),
        allocated=allocated,
        reserved=reserved,
        message=text.strip().splitlines()[0][:400] if text.strip() else type(exc).__name__,
        where=format_frames(frames),
        line=user_line(frames),
        phase=phase_of(frames),
    )


# Where in a training step a stack is, by torch's own frames in it, innermost first. Read from the
# stack rather than from the tracker, whose hooks are armed only on the steps it measures.
_PHASE_FRAMES = (
    ("torch/nn/modules/module.py", ("_call_impl", "_wrapped_call_impl"), "forward"),
    ("torch/autograd/", ("backward", "_engine_run_backward", "grad"), "backward"),
    ("torch/_tensor.py", ("backward",), "backward"),
    ("torch/optim/", None, "optimizer"),
)


def phase_of(frames) -> str:
    """``forward``, ``backward``, ``optimizer`` or ``other`` (the loop around them: data, the loss
    outside the model, evaluation), from a stack's frames (outermost first)."""
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        for part, names, phase in _PHASE_FRAMES:
            if part in path and (names is None or frame.name in names):
                return phase
    return "other"


def format_frames(frames, limit: int = 8) -> tuple[str, ...]:
    """"file.py:123 in function" lines, innermost last, without the probe's own frames."""
    lines = [
        f"{frame.filename}:{frame.lineno} in {frame.name}"
        for frame in frames
        if not any(part in frame.filename.replace("\\", "/") for part in _OUR_FILES)
    ]
    return tuple(lines[-limit:])


def user_line(frames) -> str | None:
    """The innermost frame of the job's own code, "train.py:42 in forward", from the whole stack (the
    innermost frames ``where`` keeps may all be torch's)."""
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


class OomWatch:
    """Puts the last OOM on the board; installs the excepthooks at once and the CUDA observer once
    CUDA is up.

    Both run on the thread that ran out of memory: the allocator calls the observer on the thread
    that asked for memory (a thread of the job inside a torch call, so reading the allocator's
    counters there is what the job itself could do), and an excepthook on the thread the error ends.
    Neither touches a tensor; what they keep is a frozen OomRecord, swapped onto the board whole.
    """

    def __init__(self, board, *, write_report: Callable[[], str] | None = None):
        """``write_report``: writes the OOM report when an OOM ends a thread and says where (raises
        where it cannot)."""
        self.board = board
        self.problems = board.problems
        self.write_report = write_report
        self.observer_attached = False
        self.observer_unavailable = False  # this torch has no observer to attach: not tried again
        self._previous_excepthook: Callable[..., object] | None = None
        self._previous_thread_hook: Callable[..., object] | None = None

    @property
    def last(self) -> OomRecord | None:
        return self.board.last_oom

    @last.setter
    def last(self, record: OomRecord | None) -> None:
        self.board.last_oom = record

    def install(self) -> None:
        self._previous_excepthook = sys.excepthook
        self._previous_thread_hook = threading.excepthook
        sys.excepthook = self._excepthook
        threading.excepthook = self._thread_excepthook

    def uninstall(self) -> None:
        # Put the previous hooks back only if nobody chained onto ours since.
        if sys.excepthook == self._excepthook and self._previous_excepthook is not None:
            sys.excepthook = self._previous_excepthook
        if threading.excepthook == self._thread_excepthook and self._previous_thread_hook is not None:
            threading.excepthook = self._previous_thread_hook

    def attach_cuda_observer(self) -> None:
        """Attach the allocator's OOM observer, once, after the process has initialised CUDA.

        Before initialisation the allocator has no per-device state to attach to, and attaching must
        never be what initialises CUDA.
        """
        if self.observer_attached or self.observer_unavailable:
            return
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return
        from gputui.probe import oom_observer

        self.observer_attached = oom_observer.attach(self._cuda_observer, self.problems)
        self.observer_unavailable = not self.observer_attached

    def _cuda_observer(self, device, requested, total, free) -> None:
        # Called by the allocator when it is about to raise OutOfMemoryError, outside its lock, on
        # the thread that asked for memory: the Python stack here is the user's allocation site.
        try:
            import torch

            stats = torch.cuda.memory_stats(device)
            frames = traceback.extract_stack()[:-1]
            self.last = OomRecord(
                at=time.time(),
                device=f"cuda:{device}",
                requested=int(requested),
                free=int(free),
                allocated=int(stats.get("allocated_bytes.all.current", 0)),
                reserved=int(stats.get("reserved_bytes.all.current", 0)),
                message=f"CUDA out of memory: tried to allocate {int(requested)} bytes on cuda:{device}",
                where=format_frames(frames),
                line=user_line(frames),
                phase=phase_of(frames),
                step=self.board.step_count,
            )
        except Exception as exc:
            self.problems.record("OOM observer", exc)

    def _note(self, exc: BaseException, tb) -> str | None:
        """Keep the OOM that ends a thread, and write its report; the line that says where it is, or
        why there is none."""
        try:
            if exc is None or not is_oom(exc):
                return None
            known = self.last
            # The observer already saw this one, with better figures: keep those, add the message.
            if known is not None and time.time() - known.at < 5.0 and known.device != "cpu":
                self.last = dataclasses.replace(known, message=str(exc).splitlines()[0][:400])
            else:
                self.last = dataclasses.replace(record_from_exception(exc, tb), step=self.board.step_count)
            if self.write_report is None:
                return None
            try:
                written = self.write_report()
            except Exception as problem:  # an unsafe directory, a full disk: the job's owner must hear why
                self.problems.record("writing the OOM report", problem)
                return f"gputui: out of memory; no report was written: {harmless(str(problem))}"
            self.last = dataclasses.replace(self.last, report_file=written)
            return (f"gputui: out of memory: a report of what filled it is in {visible(written)} "
                    "(`gputui oom` prints it)")
        except Exception as problem:
            self.problems.record("excepthook", problem)
            return None

    def _excepthook(self, exc_type, exc, tb):
        line = self._note(exc, tb)
        previous = self._previous_excepthook or sys.__excepthook__
        previous(exc_type, exc, tb)
        _say_last(line)

    def _thread_excepthook(self, args):
        line = self._note(args.exc_value, args.exc_traceback)
        previous = self._previous_thread_hook or threading.__excepthook__
        previous(args)
        _say_last(line)


def _say_last(line: str | None) -> None:
    """One line on stderr, after the traceback, where the user looks last."""
    if line is None:
        return
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not change how the job ends
        pass
