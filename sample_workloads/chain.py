"""A launch-bound chain of tiny kernels.

Graph: one straight line of N kernel nodes (default 400, ``-- --kernels N``), each an in-place
elementwise op on a 1024-element tensor: depth N, width 1, no forks. Every kernel runs for about
a microsecond, so eager execution is bound by the CPU's launch cost and a graph replay is several
times faster — the case CUDA graphs exist for.
"""

import argparse
import sys

import torch


def setup():
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", type=int, default=400)
    n = p.parse_args(sys.argv[1:]).kernels
    x = torch.ones(1024, device="cuda")

    def step():
        y = x
        for _ in range(n // 2):
            y = y.mul(1.0001)
            y = y.add(0.0001)
        return y

    return step
