"""Broken on purpose: torch.cuda.synchronize() inside the step -> host-sync."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        y = x * 2
        torch.cuda.synchronize()
        return y + 1

    return step
