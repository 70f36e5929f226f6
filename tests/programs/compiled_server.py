"""A small server under torch.compile(mode="reduce-overhead"): requests at 3 batch sizes (cudagraph
trees record one graph per size), plus one graph captured by hand for a warm-up step.

    python tests/programs/compiled_server.py [--requests 60]

Prints one ``RESULT {...}`` line (batch sizes, requests served, wall time).
"""
import argparse
import json
import time

import torch

BATCHES = (1, 4, 16)


class Block(torch.nn.Module):
    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Model(torch.nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*(Block() for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x).softmax(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=60)
    args = ap.parse_args()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = Model().cuda().eval()
    warm = torch.randn(8, 512, device="cuda")  # the hand-captured warm-up step
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        model(warm)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        warm_out = model(warm)
    g.replay()
    compiled = torch.compile(model, mode="reduce-overhead")
    served = 0
    with torch.no_grad():
        for k in range(args.requests):
            x = torch.randn(BATCHES[k % len(BATCHES)], 512, device="cuda")
            compiled(x).sum().item()
            served += 1
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"batches": BATCHES, "served": served, "warm_sum": float(warm_out.sum()),
                                  "wall_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
