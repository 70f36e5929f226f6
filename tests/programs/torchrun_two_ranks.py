"""Run by `torchrun --nproc-per-node 2`: both ranks on cuda:0 (one GPU), a gloo process group (no
NCCL collective), and a graph per rank that the rank replays RANK + 3 times."""
import os

import torch
import torch.distributed as dist

import _graphcount

if __name__ == "__main__":
    _graphcount.install()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)  # on the CPU (gloo)
    torch.cuda.set_device(0)
    x = torch.full((1024,), float(rank), device="cuda:0")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        (x * 2).relu()  # LINE_RANK
    for _ in range(rank + 3):
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(rank=rank, world=dist.get_world_size(), local_rank=int(os.environ["LOCAL_RANK"]),
                       all_reduce=float(t.item()))
    dist.destroy_process_group()
