"""An NCCL all-reduce captured in a CUDA graph, beside a GEMM on a side stream, one process per GPU.

As a program (`torchrun --nproc-per-node 2 nccl_in_graph.py [--hang]`): each rank captures the
step once, replays it 7 times, prints its own counts as one `RESULT` line (graphs, replays, the
all-reduced value, which every rank must agree on) and calls `dist.destroy_process_group()`.
By default the graph is reset and deleted first, the order that ends cleanly; with `--hang` the
graph is still alive when the process group is destroyed — the order that hangs NCCL's teardown
(pytorch#115388; it hung on 2 H200s, torch 2.11, with or without cgtool).

As a cgtool workload (`cgtool capture tests/programs/nccl_in_graph.py --nproc-per-node 2`):
`setup()` returns the same step.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _graphcount

N = 1 << 20  # floats all-reduced per step (4 MiB)
D = 1024  # the side stream's GEMM size


def _init() -> int:
    if not dist.is_initialized():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank()


def setup():
    rank = _init()
    x = torch.full((N,), float(rank + 1), device="cuda")
    a = torch.randn(D, D, device="cuda")
    c = torch.empty(D, D, device="cuda")
    side = torch.cuda.Stream()
    warm = torch.ones(1, device="cuda")
    dist.all_reduce(warm)  # the communicator exists before capture
    torch.cuda.synchronize()

    def step():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.matmul(a, a, out=c)  # independent of the all-reduce: may overlap it
        x.mul_(0.5)
        dist.all_reduce(x)  # LINE_ALLREDUCE
        main.wait_stream(side)
        return x

    return step


def main() -> None:
    hang = "--hang" in sys.argv[1:]
    _graphcount.install()
    step = setup()
    world = dist.get_world_size()
    for _ in range(3):  # warm-up on a side stream, as torch.cuda.graph's docs ask
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # LINE_CAPTURE
        y = step()
    for _ in range(7):
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(rank=dist.get_rank(), world=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                       value=float(y[0].item()), hang=hang)
    if not hang:
        g.reset()  # the graph's NCCL kernels go before the communicator does
        del g
        torch.cuda.synchronize()
    dist.destroy_process_group()  # LINE_DESTROY


if __name__ == "__main__":
    main()
