"""A probed CPU training job and a flat-out poller, for the probe's stress tests and bench/soak_probe.py.

    python tests/probe_stress_job.py train SCENARIO --seconds S [--budget B]
    python tests/probe_stress_job.py poll PID --seconds S [--interval I] [--incremental]

``train`` starts the probe, prints ``ready PID``, trains for S seconds, prints one JSON line with what
it really holds (steps, parameter, gradient and optimizer-state bytes, counted here), then serves on
until its standard input closes, so a last report can be compared with that truth. ``poll`` asks the
probe for reports as fast as it can (or every I seconds) and prints one JSON line: how many answers,
which parameter figures it saw, and anything wrong with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

SCENARIOS = ("set_to_none", "accumulation", "replace", "dataloader", "compile")


def build(scenario: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(128, 128), nn.ReLU())])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if scenario == "compile":
        # aot_eager runs dynamo and AOT autograd (graphs, hooks, compiled backward) without compiling
        # C++, which takes minutes on a small machine; the soak bench may ask for inductor.
        backend = os.environ.get("GPUTUI_STRESS_BACKEND", "aot_eager")
        forward = torch.compile(model, backend=backend)
    else:
        forward = model
    return model, optimizer, forward


def batches(scenario: str):
    import torch

    if scenario == "dataloader":
        data = torch.utils.data.TensorDataset(torch.randn(4096, 128), torch.randn(4096, 128))
        loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=2, shuffle=True,
                                             persistent_workers=True)
        while True:
            yield from loader
    x, y = torch.randn(32, 128), torch.randn(32, 128)
    while True:
        yield x, y


def held(optimizer) -> dict:
    """Bytes the optimizer's parameters, their gradients and its state hold, by storage."""
    import torch

    seen: set = set()

    def size(tensors) -> int:
        total = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
        return total

    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {
        "parameters": size(params),
        "gradients": size(p.grad for p in params if p.grad is not None),
        "optimizer_state": size(v for state in optimizer.state.values() for v in state.values()),
    }


def train(scenario: str, seconds: float, budget: float | None) -> int:
    import torch
    from torch import nn

    import gputui.probe

    model, optimizer, forward = build(scenario)
    options = {} if budget is None else {"budget": budget}
    gputui.probe.start(**options)
    print("ready", os.getpid(), flush=True)
    steps = 0
    data = batches(scenario)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        optimizer.zero_grad()  # set_to_none, the default: gradients are freed at every step
        micro = 4 if scenario == "accumulation" else 1
        for _ in range(micro):
            x, y = next(data)
            loss = nn.functional.mse_loss(forward(x), y) / micro
            loss.backward()
        optimizer.step()
        steps += 1
        if scenario == "replace" and steps % 25 == 0:
            # New parameters of the same shapes, and an optimizer for them: what the probe held is freed.
            index = 2 * (steps // 25 % 8)
            model[index] = nn.Linear(128, 128)
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    truth = {"steps": steps, **held(optimizer)}
    print(json.dumps(truth), flush=True)
    sys.stdin.read()  # serve until the test has read its last report
    return 0


def poll(pid: int, seconds: float, interval: float, incremental: bool) -> int:
    from gputui.link import client
    from gputui.link.admission import FLOOD_NOTE

    answers, errors, parameters, wrong = 0, 0, set(), []
    params: dict = {}
    last_step = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            result = client.request(pid, "report", params, timeout=5.0)
        except client.ProbeUnavailable as exc:
            errors += 1
            if errors > 50:
                wrong.append(f"unreachable: {exc}")
                break
            time.sleep(0.05)
            continue
        report = client.decode_report(pid, result)
        answers += 1
        numbers = [s.step for s in report.steps]
        if numbers != sorted(set(numbers)):
            wrong.append(f"steps out of order: {numbers[:5]}...")
        if numbers:
            if numbers[-1] < last_step:
                wrong.append(f"step count went back from {last_step} to {numbers[-1]}")
            last_step = numbers[-1]
        problems = [p for p in report.problems if not p.startswith(FLOOD_NOTE)]  # polling flat out
        if problems:
            wrong.append(f"problems: {problems}")
        if report.read_at_step:
            parameters.update(d.categories.parameters for d in report.devices if d.categories)
        if incremental and numbers:
            params = {"since_step": numbers[-1], "started_at": result.get("probe_started_at")}
        if interval:
            time.sleep(interval)
    print(json.dumps({"answers": answers, "errors": errors, "parameters": sorted(parameters),
                      "last_step": last_step, "wrong": wrong[:10]}), flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("scenario", choices=SCENARIOS)
    t.add_argument("--seconds", type=float, default=30.0)
    t.add_argument("--budget", type=float)
    p = sub.add_parser("poll")
    p.add_argument("pid", type=int)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--incremental", action="store_true")
    args = parser.parse_args(argv)
    if args.mode == "train":
        return train(args.scenario, args.seconds, args.budget)
    return poll(args.pid, args.seconds, args.interval, args.incremental)


if __name__ == "__main__":
    sys.exit(main())
