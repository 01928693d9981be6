"""A CPU training loop under the in-process probe, for tests/integration/test_leaks_untracked.py: run in a process
of its own, since the verdict reads the whole process's C heap (a test run's earlier garbage hid the
growth). Prints the probe's report as JSON: python untracked_job.py appending|running_total STEPS"""

import json
import sys
from pathlib import Path

import pytest
import torch
from clocks import JobClock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import loops  # noqa: E402

import gputui.probe  # noqa: E402
from gputui.model import to_jsonable  # noqa: E402

MIB = 1 << 20


def appending(job, steps):
    """A loop that appends a 1 MiB tensor (no graph) to a list at every step."""
    kept = []
    for step in range(steps):
        loops.train_step(job, *job.batch_at(step))
        kept.append(torch.ones(MIB // 4))  # 1 MiB of float32
    return kept


def running_total(job, steps):
    """A loop that adds its evaluation loss, with its graph, to a running total (no ``.item()``)."""
    total = 0.0
    for step in range(steps):
        loops.train_step(job, *job.batch_at(step))
        x, y = job.batch_at(step + 1)
        total += torch.nn.functional.cross_entropy(job.model(x), y)
    return total


def main(loop: str, steps: int) -> None:
    torch.set_num_threads(1)  # the CPU is shared: steps stay short and steady
    # At the default budget the probe measures a few steps only, as in a real job; on a clock the test
    # sets (5 ms steps, 50 us readings), so which ones does not follow how busy the machine is.
    with pytest.MonkeyPatch.context() as monkeypatch, JobClock().charging(monkeypatch) as clock:
        probe = gputui.probe.start(serve=False, auto_sites=False, clock=clock)
        try:
            kept = {"appending": appending, "running_total": running_total}[loop](loops.make_job(), steps)
            report = probe.report()
        finally:
            gputui.probe.stop()
    del kept
    print(json.dumps(to_jsonable(report)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
