"""Broken on purpose: allocates pinned host memory inside the step -> alloc-not-permitted."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        staging = torch.empty(1 << 20, pin_memory=True)  # cudaHostAlloc: not allowed while capturing
        return x * 2, staging

    return step
