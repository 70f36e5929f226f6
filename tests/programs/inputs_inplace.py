"""The correct pattern: a static input updated in place (``static_x.copy_(batch)``) before each
replay, a constant weight never written, and each batch a fresh tensor from the same line. Nothing
here reads freed memory: a checker must report nothing."""
import torch

import _graphcount

HIDDEN = 1024


def next_batch() -> torch.Tensor:
    return torch.randn(8, HIDDEN, device="cuda")  # LINE_ALLOC


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda")  # constant input
    static_x = torch.zeros(8, HIDDEN, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.tanh(torch.nn.functional.layer_norm(static_x, (HIDDEN,)) @ w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # LINE_CAPTURE
        static_y = torch.tanh(torch.nn.functional.layer_norm(static_x, (HIDDEN,)) @ w)
    total = torch.zeros((), device="cuda")
    for step in range(40):
        static_x.copy_(next_batch())  # the batch is freed right after: it is not the graph's input
        g.replay()
        total += static_y.sum()
    torch.cuda.synchronize()
    del static_x, w  # freed after the last replay: not a bug
    _graphcount.result(steps=40, total=float(total))
