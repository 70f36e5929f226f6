"""A rebind bug: the loop rebinds the graph's input (``x = next_batch()``) where it meant
``x.copy_(next_batch())``. The program keeps every batch (``seen``, for a later check), so the
tensor the graph was captured with stays alive: every replay reads the first batch again, and
nothing fails. ``--free``: nothing keeps the batches, so the captured tensor is freed at the rebind
and a later batch takes its memory (each replay reads whichever batch lives there)."""
import sys

import torch

import _graphcount

HIDDEN = 4096
KEEP = "--free" not in sys.argv


def next_batch() -> torch.Tensor:
    return torch.randn(4, HIDDEN, device="cuda", dtype=torch.float16)  # LINE_ALLOC


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16)
    seen = []
    x = next_batch()
    seen.append(x) if KEEP else None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (torch.nn.functional.layer_norm(x, (HIDDEN,)) @ w).relu()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # LINE_CAPTURE
        y = (torch.nn.functional.layer_norm(x, (HIDDEN,)) @ w).relu()
    for step in range(40):
        x = next_batch()  # LINE_REBIND: the bug; meant x.copy_(next_batch())
        seen.append(x) if KEEP else None
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(steps=40, kept=KEEP)
