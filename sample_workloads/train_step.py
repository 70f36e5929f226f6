"""A training step through ``make_graphed_callables``: an MLP's forward and backward graphs.

Graphs: two — ``fwd0`` (the forward: 3 linears with ReLU, a chain of GEMM and elementwise kernels)
and ``bwd0`` (the backward: input- and weight-gradient GEMMs, ReLU masks and bias reductions).
torch captures the backward on one stream, so both graphs are chains (measured on an H200: 14 and
12 nodes, depth equal to the node count).
The check compares the graphed step (output and every parameter's gradient) with an eager copy
of the same model.
"""

import copy

import torch

from cgtool.capture.entrypoint import Precaptured
from cgtool.capture.graph import make_graphed_callables


def setup():
    torch.manual_seed(0)
    D = 1024
    model = torch.nn.Sequential(
        torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, 10)
    ).cuda()
    ref = copy.deepcopy(model)
    x = torch.randn(64, D, device="cuda")
    graphs = []
    graphed = make_graphed_callables(model, (x,), graphs_out=graphs)

    def run(m):
        for p in m.parameters():
            p.grad = None
        out = m(x)
        out.square().mean().backward()
        return [out] + [p.grad for p in m.parameters()]

    return Precaptured(graphs=graphs, step=lambda: run(graphed), eager=lambda: run(ref))
