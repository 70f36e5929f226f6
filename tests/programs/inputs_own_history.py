"""A program that sets torch's allocator history itself, around the free-and-reuse bug of
stale_freed.py. ``before``: it turns the history on with its own ring before CUDA starts (the input
checks leave it so and check nothing). ``after`` (the default): it turns the history off after 20
replays (the checks find the free before it, then stop: replays 21-40 are said unchecked)."""
import sys

import torch

import _graphcount
from stale_freed import HIDDEN, capture

if __name__ == "__main__":
    when = sys.argv[1] if len(sys.argv) > 1 else "after"
    _graphcount.install()
    if when == "before":
        torch.cuda.memory._record_memory_history(max_entries=1000)  # LINE_HISTORY_BEFORE
    torch.manual_seed(0)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16)
    g, y = capture(w)
    logits = torch.zeros(4, HIDDEN, device="cuda", dtype=torch.float16)  # takes x's block
    for step in range(40):
        if step == 20 and when == "after":
            torch.cuda.memory._record_memory_history(enabled=None)  # LINE_HISTORY_AFTER
        logits.add_(1)
        g.replay()
    torch.cuda.synchronize()
    _graphcount.result(steps=40)
