"""A CPU training job that runs out of host memory mid-step, for tests/integration/test_oom_report.py.

It limits its own address space once torch is loaded and warm (RLIMIT_AS: what `ulimit -v` sets),
then keeps every step's output, as a classic leak does, until a forward pass cannot allocate its
activations. Started with GPUTUI_PROBE=1 (no code change for the probe) or without it, to compare.
"""

import resource
import sys

import torch
from torch import nn

WIDTH, BATCH = 2048, 256  # a step keeps its 2 MiB output
SCRATCH = 128 << 20  # and its forward pass takes, then frees, 128 MiB: more than the rest of a step holds
# at once (backward's new gradients are 32 MiB), so the first allocation to fail, in a known place
# Room left under the limit: about 160 steps' kept outputs. The probe confirms the leak and finds its
# keeper by about step 50; with 256 MiB (56 steps) a loaded CI machine once ran out before it had.
LEEWAY = 512 << 20

torch.set_num_threads(1)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        scratch = torch.empty(SCRATCH // 4)  # the allocation that fails
        del scratch
        return self.b(torch.relu(self.a(x)))


model = Block()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
x = torch.randn(BATCH, WIDTH)
kept = []


def step():
    optimizer.zero_grad()
    out = model(x)
    out.square().mean().backward()
    optimizer.step()
    kept.append(out.detach().clone())  # the leak: every step's output, kept


for _ in range(3):  # warm: the allocator's and the probe's first-step work done before the limit
    step()
with open("/proc/self/statm") as statm:
    size = int(statm.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + LEEWAY, resource.RLIM_INFINITY))
print("limited", flush=True)
for _ in range(100_000):
    step()
print("never ran out", file=sys.stderr)
