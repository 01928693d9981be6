"""The in-process PyTorch probe: ``gputui.probe.start()`` in a training script, or ``with probing():``.

This module and its entry point ``hook`` (what GPUTUI_PROBE's .pth line, ``gputui run`` and
``gputui attach`` import in the job) import torch only when the probe really starts, so they are cheap
to import anywhere; the working parts live in ``gputui.probe.runtime``. The commands that start a job
with the probe from outside it live in ``gputui.launch``; what stays here runs in the job.

THE RULE. The probe lives in someone else's training job and must never harm it. PyTorch objects are
not safe to read from one thread while another frees or replaces them (reading gradient storages from
a socket thread during ``zero_grad(set_to_none=True)`` segfaults the job). So:

- Every read of a torch object (tensors, storages, parameters, gradients, optimizer state, allocator
  calls) happens on the training thread: in the hooks torch calls from the job's own calls (optimizer
  step hooks, module forward hooks, saved-tensor hooks, which run on the thread that runs backward
  while the job waits for it), within the probe's time budget.
- The results are plain immutable data (numbers, strings, tuples, frozen records) put on the Board
  (``board.py``) by one reference swap; step records are appended to its logs.
- The socket thread runs the Desk (``desk.py``), which is handed only the Board and imports no torch:
  it serialises what was published and leaves requests (a fresher reading, site recording) for the
  training thread to take up at its next hook.
- The rest that runs elsewhere: the OOM observer and excepthooks run on the thread that ran out of
  memory and keep only a frozen record (``oom.py``); atexit runs ``stop()`` on the main thread after
  the job's other threads have ended, and touches no tensor; in a forked child the fork hook resets
  plain state only; the probe installs no signal handlers (``gputui run`` forwards signals from its
  own process, outside the job).

``tests/integration/test_probe_threads.py`` checks the rule: the socket thread runs under a guard that fails the
test on any call into torch, and the board is walked for torch objects.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def start(**options: Any):
    """Start the probe in this process (idempotent) and return it.

    Options: ``activations`` (see tensors saved for backward, default True), ``budget`` (share of
    step time the per-step readings may take, default 0.004), ``auto_sites`` (record allocation
    sites for a few steps by itself once it confirms a leak, default True), ``serve`` (open the
    socket, default True), ``socket_path`` (tests). Never raises for the probe's own trouble:
    problems are reported.
    """
    from gputui.probe import runtime

    return runtime.start(**options)


def stop() -> None:
    """Remove the probe's hooks and its socket."""
    import sys

    runtime = sys.modules.get("gputui.probe.runtime")
    if runtime is not None:
        runtime.stop()


@contextlib.contextmanager
def probing(**options: Any) -> Iterator[Any]:
    """Run the block with the probe started; stopped again afterwards."""
    probe = start(**options)
    try:
        yield probe
    finally:
        stop()


__all__ = ["probing", "start", "stop"]
