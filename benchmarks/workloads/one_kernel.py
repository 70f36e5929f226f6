"""One kernel: ``x * 2`` on 1024 floats. Graph: a single kernel node; a replay is bound by the launch."""

import torch


def setup():
    x = torch.ones(1024, device="cuda")

    def step():
        return x * 2

    return step
