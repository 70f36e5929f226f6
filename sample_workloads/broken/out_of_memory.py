"""Broken on purpose: allocates far more than the GPU has inside the step -> out-of-memory."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")
    free, _ = torch.cuda.mem_get_info()
    n = (free // 4) * 2  # twice the free memory, in float32 elements

    def step():
        big = torch.empty(n, device="cuda")
        return x * 2, big[:1]

    return step
