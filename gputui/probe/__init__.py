"""The in-process PyTorch probe: ``gputui.probe.start()`` in a training script, or ``with probing():``.

This module and its entry points (hook, launch) import torch only when the probe really starts, so
they are cheap to import anywhere; the working parts live in ``gputui.probe.runtime``.
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
