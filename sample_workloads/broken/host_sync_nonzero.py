"""Broken on purpose: a data-dependent shape (nonzero) inside the step -> host-sync."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        idx = (x > 0).nonzero()  # its size depends on the data: the host must wait for it
        return x[idx]

    return step
