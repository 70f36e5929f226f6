"""Broken on purpose: the step does its work on the CPU -> empty-graph."""
import torch


def setup():
    x = torch.randn(1024)  # on the CPU

    def step():
        return x * 2

    return step
