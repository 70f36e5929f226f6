"""A rebind bug: the loop rebinds the graph's input (``x = next_batch()``) where it meant
``x.copy_(next_batch())``. The tensor the graph was captured with is freed at the rebind, and the
caching allocator hands its memory to a later batch: the replays read whichever batch lives there."""
import torch

import _graphcount

HIDDEN = 4096


def next_batch() -> torch.Tensor:
    return torch.randn(4, HIDDEN, device="cuda", dtype=torch.float16)  # LINE_ALLOC


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16)
    x = next_batch()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (x @ w).relu()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # LINE_CAPTURE
        y = (x @ w).relu()
    for step in range(40):
        x = next_batch()  # LINE_REBIND: the bug; meant x.copy_(next_batch())
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(steps=40)
