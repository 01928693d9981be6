"""A clean two-rank DeepSpeed ZeRO-3 job on the CPU (gloo), for bench/bench_verdicts.py: each rank trains
``STEPS`` steps of tests/sharded_job.py's model under the probe as users start it (GPUTUI_PROBE=1, the
default budget, its socket served), then waits ``LINGER`` seconds for a monitor's last look.

    GPUTUI_PROBE=1 python bench/zero3_job.py PORT STEPS [LINGER] [STEP_TIME]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from sharded_job import BATCH, build_zero  # noqa: E402


def rank_main(rank: int, port: str, steps: str, linger: str, step_time: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), DS_ACCELERATOR="cpu")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    engine, _ = build_zero(model, 3)
    x, y = torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH,))
    last = time.perf_counter()
    for _ in range(int(steps)):
        engine.backward(nn.functional.cross_entropy(engine(x), y))
        engine.step()
        left = last + float(step_time) - time.perf_counter()
        if left > 0:
            time.sleep(left)
        last = time.perf_counter()
    print(f"rank {rank}: {steps} steps done", flush=True)
    time.sleep(float(linger))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    port, steps = sys.argv[1], sys.argv[2]
    linger = sys.argv[3] if len(sys.argv) > 3 else "0"
    step_time = sys.argv[4] if len(sys.argv) > 4 else "0"
    mp.spawn(rank_main, args=(port, steps, linger, step_time), nprocs=2)
