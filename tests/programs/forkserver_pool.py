"""Workers started by the forkserver: a multiprocessing Pool and a ProcessPoolExecutor, each task
capturing one graph and replaying it as many times as its number says."""
import concurrent.futures
import multiprocessing as mp

import torch

import _graphcount


def task(n: int) -> int:
    _graphcount.install()
    x = torch.full((64, 64), float(n), device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        (x * 2 + 1).sum()  # LINE_TASK
    for _ in range(n):
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(role="task", n=n)
    return n


if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    with ctx.Pool(2) as pool:
        assert sorted(pool.map(task, [1, 2, 3, 4], chunksize=1)) == [1, 2, 3, 4]
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
        assert sorted(ex.map(task, [5, 6])) == [5, 6]
    _graphcount.result(role="main")
