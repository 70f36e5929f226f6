"""A free-and-reuse bug: the graph is captured inside a helper whose input is a temporary; the
temporary dies when the helper returns, and the next tensor the program allocates (``logits``) takes
its memory. Every replay reads ``logits``' data instead of the input."""
import torch

import _graphcount

HIDDEN = 4096


def capture(w: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    x = torch.randn(4, HIDDEN, device="cuda", dtype=torch.float16)  # LINE_ALLOC
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (torch.nn.functional.layer_norm(x, (HIDDEN,)) @ w).relu()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # LINE_CAPTURE
        y = (torch.nn.functional.layer_norm(x, (HIDDEN,)) @ w).relu()
    return g, y  # LINE_RETURN: x is freed here


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16)
    g, y = capture(w)  # LINE_CALL
    logits = torch.zeros(4, HIDDEN, device="cuda", dtype=torch.float16)  # LINE_LOGITS: reuses x's block
    for step in range(40):
        logits.add_(1)
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(steps=40)
