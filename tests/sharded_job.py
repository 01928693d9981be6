"""A 2-rank sharded job on CPU (gloo), each rank with the probe started in-process, for
tests/integration/test_frameworks_sharded.py: ``python sharded_job.py KIND PORT OUT_DIR`` trains five steps and writes
``rank<N>.json``: the probe's report and the truth summed in the rank itself.

KIND is "ddp" (``DistributedDataParallel``: each rank the whole model, for bench/frameworks.py), "fsdp2"
(``fully_shard``), "fsdp1" (``FullyShardedDataParallel``, flat parameters), "zero1" or
"zero2" (DeepSpeed ZeRO stage 1 or 2 on its CPU accelerator: the optimizer and, for 2, the gradients
partitioned) or "zero3" (stage 3, nothing kept unpartitioned). The model is
Linear(64, 128), ReLU, Linear(128, 10) in float32: the first Linear is an FSDP module of its own, the root
(the whole model) holds the last Linear's parameters.

SHARDED_JOB_DEVICE=cuda (bench/frameworks.py --device cuda): both ranks on cuda:0, still over gloo (NCCL
refuses two ranks on one GPU), DeepSpeed on its CUDA accelerator.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_truth import state_tensors, storage_bytes  # noqa: E402

FIRST, LAST = (64 * 128 + 128) * 4, (128 * 10 + 10) * 4  # the two Linears' parameter bytes, unsharded
PARAMETER_BYTES = FIRST + LAST
BATCH = 32
# What autograd saves for backward outside the weights: the input (for the first Linear's weight
# gradient) and ReLU's output (for ReLU and the last Linear, one storage).
ACTIVATION_BYTES = (BATCH * 64 + BATCH * 128) * 4
DEVICE = torch.device(os.environ.get("SHARDED_JOB_DEVICE", "cpu"))
DEVICE = torch.device("cuda", 0) if DEVICE.type == "cuda" else DEVICE  # (both ranks on the one GPU)


def build_fsdp2():
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)
    fully_shard(model[0])
    fully_shard(model)
    return model


def build_fsdp1():
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    model[0] = FullyShardedDataParallel(model[0], device_id=DEVICE)
    return FullyShardedDataParallel(model, device_id=DEVICE)


def build_ddp():
    return nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
                                               .to(DEVICE))


BUILDERS = {"fsdp2": build_fsdp2, "fsdp1": build_fsdp1, "ddp": build_ddp}


def build_zero(model, stage: int):
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    config = {"train_micro_batch_size_per_gpu": BATCH,
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.Adam(model.parameters()),
                                                   config=config)
    return engine, optimizer


def zero3_truth(model, optimizer) -> dict:
    """A rank's ZeRO-3 partitions: the model's (each parameter's ``ds_tensor``) and the optimizer's fp32
    copy, with Adam's two moments of it; the gradient it gets for the step is one partition again."""
    partition = storage_bytes(p.ds_tensor for p in model.parameters())
    master = storage_bytes(optimizer.fp32_partitioned_groups_flat)
    state = storage_bytes(state_tensors(optimizer.optimizer, DEVICE.type))
    return {"parameters": partition + master, "gradients": partition, "optimizer_state": state}


def zero12_truth(model, optimizer, step_grads: list[int]) -> dict:
    """A rank's ZeRO-1/2 share: the whole model (its parameters views of one flat buffer) and the optimizer's
    fp32 copy of the rank's partition, with Adam's two moments of it. The gradient is the partition's,
    which DeepSpeed frees when the step is done: ``step_grads`` has it, counted at each step's end."""
    master = storage_bytes(optimizer.single_partition_of_fp32_groups)
    state = storage_bytes(state_tensors(optimizer.optimizer, DEVICE.type))
    return {"parameters": storage_bytes(model.parameters()) + master, "gradients": step_grads[-1],
            "optimizer_state": state}


def local_of(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def rank_main(rank: int, kind: str, port: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank if DEVICE.type == "cpu" else 0), DS_ACCELERATOR=DEVICE.type)
    torch.set_num_threads(1)
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from gputui.model.codec import to_jsonable
    from gputui.probe import runtime

    torch.manual_seed(0)
    if kind.startswith("zero"):
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)
        engine, optimizer = build_zero(model, int(kind[-1]))
    else:
        engine = model = BUILDERS[kind]()
        optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(BATCH, 64).to(DEVICE), torch.randint(0, 10, (BATCH,)).to(DEVICE)
    step_grads: list[int] = []  # ZeRO-1/2: the gradients the optimizer held at each step's end
    if kind in ("zero1", "zero2"):
        register_optimizer_step_post_hook(lambda opt, args, kwargs: step_grads.append(
            storage_bytes(p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None)))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(5):
            if kind.startswith("zero"):
                engine.backward(nn.functional.cross_entropy(engine(x), y))
                engine.step()
                continue
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        report = probe.report()
    finally:
        runtime.stop()
    params = list(model.parameters())
    truth = zero3_truth(model, optimizer) if kind == "zero3" else zero12_truth(model, optimizer, step_grads) \
        if kind.startswith("zero") else {
        "parameters": storage_bytes(local_of(p) for p in params),
        "gradients": storage_bytes(local_of(p.grad) for p in params),
        "optimizer_state": storage_bytes(local_of(v) for v in state_tensors(optimizer, DEVICE.type)),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as out:
        json.dump({"kind": kind, "report": to_jsonable(report), "truth": truth, "pid": os.getpid()}, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=tuple(sys.argv[1:4]), nprocs=2)
