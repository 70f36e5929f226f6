"""A program that starts its own torch.profiler (CUDA activity) between its graphs: graph A before,
graph B while profiling, graph C after. It prints what its profiler saw (its CUDA kernels)."""
import torch
from torch.profiler import ProfilerActivity, profile

import _graphcount


def graph(x: torch.Tensor, k: int) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.mul(k).add(k)  # LINE_GRAPH
    return g


if __name__ == "__main__":
    _graphcount.install()
    x = torch.randn(1024, device="cuda")
    torch.cuda.synchronize()
    a = graph(x, 1)
    for _ in range(3):
        a.replay()
    before = list(_graphcount._graphs)  # replays per graph before the profiler starts
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:  # LINE_PROFILER
        b = graph(x, 2)
        for _ in range(4):
            b.replay()
        a.replay()
        x.sin().sum()  # eager work the profiler should see
        torch.cuda.synchronize()
    c = graph(x, 3)
    for _ in range(2):
        c.replay()
    torch.cuda.synchronize()
    gpu_events = sum(1 for e in prof.events() if getattr(e, "device_type", None) is not None
                     and str(e.device_type).endswith("CUDA"))
    _graphcount.result(profiler_gpu_events=gpu_events, before_profiler=before)
