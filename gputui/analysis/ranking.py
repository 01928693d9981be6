"""The order advice is shown in, one rule for a process's advice and a job's.

Apart from the rules that write advice (advice.py) so that judging a job, which every sample with a
job does, does not load them: they are needed only once a process is probed or its memory grows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gputui.model.verdicts import SEVERITIES, Advice

# Urgency first, then the rules that fix a leak, then the biggest saving.
_PRIORITY = {"oom-soon": 0, "keep-graph": 1, "growing-tensors": 1, "model-in-loop": 1, "untracked-growth": 1}


def ranked(found: Iterable[Advice]) -> tuple[Advice, ...]:
    """Advice most urgent and most rewarding first, numbered (``rank`` 1, 2, ...)."""
    ordered = sorted(found, key=_order)
    return tuple(replace(a, rank=i + 1) for i, a in enumerate(ordered))


def _order(a: Advice) -> tuple:
    saving = -a.estimated_saving if a.estimated_saving is not None else 1
    return SEVERITIES.index(a.severity), _PRIORITY.get(a.kind, 2), saving, a.kind
