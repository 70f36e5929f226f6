"""A multi-stream fork/join: 8 independent branches of 1024x1024 fp32 GEMMs.

Graph: a fork (the capture stream's last node, or the roots) fans out to 8 branches, one per
side stream, each a chain of 2 matmuls (``-- --branches N --depth D``); the branches join back
into the capture stream and one sum kernel reduces them. Branches have no path between them, so
any serialization between two branches in a trace is a *fake* dependency (try
``CUDA_DEVICE_MAX_CONNECTIONS=1``).
"""

import argparse
import sys
from typing import Callable

import torch


def setup() -> Callable[[], torch.Tensor]:
    p = argparse.ArgumentParser()
    p.add_argument("--branches", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--size", type=int, default=1024)
    a = p.parse_args(sys.argv[1:])
    torch.manual_seed(0)
    x = torch.randn(a.size, a.size, device="cuda") / a.size**0.5
    ws = [torch.randn(a.size, a.size, device="cuda") / a.size**0.5 for _ in range(a.branches)]
    streams = [torch.cuda.Stream() for _ in range(a.branches)]  # type: ignore[no-untyped-call]

    def step() -> torch.Tensor:
        cur = torch.cuda.current_stream()
        outs = []
        for w, s in zip(ws, streams):
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                y = x
                for _ in range(a.depth):
                    y = y @ w
                outs.append(y)
        for s in streams:
            cur.wait_stream(s)
        return torch.stack(outs).sum(0)

    return step
