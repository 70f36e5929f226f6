"""Broken on purpose: draws from a private CUDA generator that was not registered with the graph
-> rng-unregistered (or, where torch tolerates it, replay-mismatch: the same numbers each replay)."""
import torch


def setup():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    x = torch.randn(1024, device="cuda")

    def step():
        return x + torch.rand(1024, device="cuda", generator=gen)

    return step
