"""A spawn worker captures two graphs, replays them 3 and 2 times, then is killed (SIGKILL) by the
main process, which exits with 7."""
import multiprocessing as mp
import sys
import time

import torch

import _graphcount


def worker(ready: "mp.synchronize.Event") -> None:
    _graphcount.install()
    x = torch.randn(512, device="cuda")
    torch.cuda.synchronize()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        y = x.sin()  # LINE_G1
    with torch.cuda.graph(g2):
        y.cos()  # LINE_G2
    for _ in range(3):
        g1.replay()
    for _ in range(2):
        g2.replay()
    torch.cuda.synchronize()
    _graphcount.result(role="worker")
    ready.set()
    time.sleep(600)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=worker, args=(ready,))
    p.start()
    assert ready.wait(300)
    time.sleep(3.0)  # a recorder writes within about a second of quiet; a killed process keeps that
    p.kill()
    p.join()
    _graphcount.result(role="main", worker_exitcode=p.exitcode)
    sys.exit(7)
