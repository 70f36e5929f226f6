"""Broken on purpose: switches to the default stream inside the step -> default-stream."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        with torch.cuda.stream(torch.cuda.default_stream()):
            y = x * 2
        return y

    return step
