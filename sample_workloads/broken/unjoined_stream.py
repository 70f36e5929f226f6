"""Broken on purpose: forks work to a side stream and never joins it back -> unjoined-stream."""
import torch


def setup():
    x = torch.randn(1024, device="cuda")
    side = torch.cuda.Stream()

    def step():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
        return x + 1, y  # missing: torch.cuda.current_stream().wait_stream(side)

    return step
