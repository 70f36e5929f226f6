"""A multiprocessing "spawn" worker captures two graphs in a background thread and replays them 5 and
4 times; the main process captures none (a vLLM V1-style engine core).

The capture thread runs its step eagerly on a side stream first, as torch.cuda.graph's docs ask: a
thread's first matmul creates that thread's cuBLAS handle (cublasCreate), which fails inside a
capture (CUBLAS_STATUS_NOT_INITIALIZED, then "operation failed due to a previous error during
capture": pytorch#99397). ``--no-warmup`` leaves the warm-up out, to show that failure unrecorded."""
import multiprocessing as mp
import sys
import threading

import torch

import _graphcount


def worker(warmup: bool) -> None:
    _graphcount.install()

    def work() -> None:
        x = torch.randn(256, 256, device="cuda")
        if warmup:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                (x @ x).relu().softmax(-1)
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            y = (x @ x).relu()  # LINE_G1
        with torch.cuda.graph(g2):
            y.softmax(-1)  # LINE_G2
        for _ in range(5):
            g1.replay()
        for _ in range(4):
            g2.replay()
        torch.cuda.synchronize()

    t = threading.Thread(target=work, name="capture-thread")
    t.start()
    t.join()
    _graphcount.result(role="worker", warmup=warmup)


if __name__ == "__main__":
    _graphcount.install()
    p = mp.get_context("spawn").Process(target=worker, args=("--no-warmup" not in sys.argv[1:],))
    p.start()
    p.join()
    _graphcount.result(role="main", worker_exitcode=p.exitcode)
    sys.exit(p.exitcode)
