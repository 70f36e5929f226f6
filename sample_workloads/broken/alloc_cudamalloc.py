"""Broken on purpose: calls cudaMalloc directly inside the step, as CUDA extension libraries do
-> alloc-not-permitted (PyTorch's own allocations go to the graph's pool and are fine)."""
import torch


def raw_buffer(nbytes):
    from cuda.bindings import runtime

    err, ptr = runtime.cudaMalloc(nbytes)  # not allowed while a stream captures in global mode
    if int(err) != 0:
        raise RuntimeError(f"cudaMalloc({nbytes}) failed: {err.name}")
    return ptr


def setup():
    x = torch.randn(1024, device="cuda")

    def step():
        scratch = raw_buffer(1 << 20)
        del scratch
        return x * 2

    return step
