"""A tensor-parallel MLP step with an all-reduce inside the graph. Run under torchrun
(`cgtool capture sample_workloads/tp_mlp.py --nproc-per-node 2`), one process per GPU.

Each rank holds a column shard of the first linear and a row shard of the second (Megatron style):
y = all_reduce(gelu(x @ W1[:, shard]) @ W2[shard, :]). Graph per rank: the two GEMMs, the GELU and
the NCCL all-reduce kernel, in one chain (the collective is captured like any kernel; NCCL >= 2.9
requires every rank to capture the same collectives in the same order, which this step does).
"""

import os

import torch
import torch.distributed as dist


def setup():
    if not dist.is_initialized():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)  # same full weights on every rank; each keeps its shard
    D, H, B = 1024, 4096, 64
    w1 = torch.randn(D, H, device="cuda") / D**0.5
    w2 = torch.randn(H, D, device="cuda") / H**0.5
    shard = slice(rank * H // world, (rank + 1) * H // world)
    w1s, w2s = w1[:, shard].contiguous(), w2[shard, :].contiguous()
    x = torch.randn(B, D, device="cuda")
    y = torch.empty(B, D, device="cuda")
    warm = torch.ones(1, device="cuda")
    dist.all_reduce(warm)  # create the NCCL communicator before capture
    torch.cuda.synchronize()

    def step():
        torch.matmul(torch.nn.functional.gelu(x @ w1s), w2s, out=y)
        dist.all_reduce(y)
        return y

    return step
