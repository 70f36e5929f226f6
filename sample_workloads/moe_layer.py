"""A mixture-of-experts-like layer: 6 experts on 3 streams, fixed capacity per expert.

Graph: a LayerNorm and a router (a small GEMM and a softmax) on the capture stream; then the
tokens, in 6 fixed slices of ``--capacity`` rows (a static-shape dispatch, as capacity-based MoE
kernels do), go to 6 expert MLPs (fc1, GELU, fc2, scaled by the router's weight). Expert ``e``
runs on side stream ``e % 3`` (``-- --experts N --streams S``), so the two experts of one stream
are ordered in the graph (true dependencies) while experts of different streams are independent:
any serialization between them in a trace is a *fake* dependency (try
``CUDA_DEVICE_MAX_CONNECTIONS=1``). The expert outputs join back into the capture stream.
"""

import argparse
import sys

import torch
import torch.nn.functional as F


def setup():
    p = argparse.ArgumentParser()
    p.add_argument("--experts", type=int, default=6)
    p.add_argument("--streams", type=int, default=3)
    p.add_argument("--capacity", type=int, default=256)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=2048)
    a = p.parse_args(sys.argv[1:])
    torch.manual_seed(0)
    E, C, D, H = a.experts, a.capacity, a.dim, a.hidden
    dev = "cuda"
    x = torch.randn(E * C, D, device=dev)
    ln = torch.nn.LayerNorm(D, device=dev)
    router = torch.nn.Linear(D, E, device=dev)
    fc1 = [torch.nn.Linear(D, H, device=dev) for _ in range(E)]
    fc2 = [torch.nn.Linear(H, D, device=dev) for _ in range(E)]
    streams = [torch.cuda.Stream() for _ in range(a.streams)]

    @torch.no_grad()
    def step():
        cur = torch.cuda.current_stream()
        h = ln(x)
        probs = torch.softmax(router(h), dim=-1)
        for s in streams:
            s.wait_stream(cur)
        outs = []
        for e in range(E):
            with torch.cuda.stream(streams[e % len(streams)]):
                rows = slice(e * C, (e + 1) * C)
                y = fc2[e](F.gelu(fc1[e](h[rows])))
                outs.append(y * probs[rows, e:e + 1])
        for s in streams:
            cur.wait_stream(s)
        return x + torch.cat(outs)

    return step
