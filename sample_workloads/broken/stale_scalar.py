"""Broken on purpose: a Python number that changes between calls is baked into the graph
-> replay-mismatch (the replayed output differs from eager)."""
import torch


def setup():
    x = torch.ones(1024, device="cuda")
    state = {"step": 0}

    def step():
        state["step"] += 1
        return x * state["step"]  # the value at capture time is frozen into the kernel's arguments

    return step
