"""One rank of a job spread over machines (torchrun --nnodes 2): a gloo all-reduce, then a CUDA
graph that this rank replays RANK + 1 times. On one machine with one GPU, both "nodes" share it
(gloo, not NCCL, which refuses two ranks on one GPU)."""
import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)  # every rank sees the sum 1 + ... + world
    x = torch.full((1024,), float(rank + 1), device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = (x * 2).relu() + 1  # LINE_GRAPH
    for _ in range(rank + 1):
        g.replay()
    torch.cuda.synchronize()
    line = "RESULT " + json.dumps({"rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
                                   "all_reduce": float(t.item()), "replays": rank + 1, "y0": float(y[0].item())})
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())  # one write of one line: the ranks share stdout
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
