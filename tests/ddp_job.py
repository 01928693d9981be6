"""A 2-rank DistributedDataParallel job on CPU (gloo), for tests/integration/test_ddp_ranks.py to run under torchrun
(and bench/validate_gpu_commands.py, with "cuda" as its second argument: both ranks on GPU 0, which gloo
allows and NCCL does not).

It trains until the file named by its first argument exists (at most a minute), so the test can look
at its probes while it runs. The model's bytes are fixed: Linear(64, 128) and Linear(128, 10) in float32.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

PARAMETER_BYTES = (64 * 128 + 128 + 128 * 10 + 10) * 4


def main(stop_file: str, device: str = "cpu") -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    if device != "cpu":
        torch.set_default_device(device)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    assert sum(p.nbytes for p in model.parameters()) == PARAMETER_BYTES
    # SGD with momentum keeps one buffer per parameter: its state is the parameters' bytes again.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    ended = time.monotonic() + 60
    step = 0
    while time.monotonic() < ended and (step < 30 or not os.path.exists(stop_file)):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        step += 1
        time.sleep(0.05)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
