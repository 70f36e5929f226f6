"""Broken on purpose: reads a GPU value on the host (.item()) inside the step -> host-sync."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        y = x * 2
        if y.sum().item() > 0:  # waits for the GPU: not allowed while capturing
            y = y + 1
        return y

    return step
