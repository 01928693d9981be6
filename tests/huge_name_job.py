"""One CPU rank of a 2-rank job for tests/integration/test_alerts_huge_real.py, the probe started in-process: a step
every SECONDS (its first argument), for at most 5 minutes; once the file its second argument names exists,
it keeps each step's validation loss with its graph (examples/loops.py's total_loss leak)."""

import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import loops  # noqa: E402

import gputui.probe  # noqa: E402


def main(seconds: float, leak_file: str) -> None:
    torch.set_num_threads(1)
    gputui.probe.start(budget=1.0)
    job = loops.make_job()
    total_loss = 0.0
    step, ended = 0, time.monotonic() + 300
    while time.monotonic() < ended:
        loops.train_step(job, *job.batch_at(step))
        if os.path.exists(leak_file):
            x, y = job.batch_at(step + 1)
            total_loss += nn.functional.cross_entropy(job.model(x), y)  # keeps every step's graph
        step += 1
        time.sleep(seconds)


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
