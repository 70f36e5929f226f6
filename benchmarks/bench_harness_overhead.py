"""Does cgtool bench's timing add anything over a bare replay loop? GPU machine:

    PYTHONPATH=. python3 benchmarks/bench_harness_overhead.py

For a 1-node graph and a GPU-bound graph (>= 100 µs per replay), in one run, alternating:
bare = one event pair around N back-to-back calls of the replay bench times (torch's own
``CUDAGraph.replay`` under the engine's ``Graph``: ``cgtool.capture.bench.torch_replay``); harness =
cgtool's block timing (``time_blocks``) of the same calls. Prints both per-replay medians and their
ratio (targets: <= 1 % for >= 100 µs graphs, <= 5 % for the 1-node graph), the per-replay mode
(each replay alone behind a GPU busy-wait: its GPU time, without the overlap of back-to-back
replays, which is why it is opt-in), and the engine's ``Graph.replay`` timed
the same way (its Python work per call is why bench times torch's replay underneath).
"""

from __future__ import annotations

import statistics
from typing import Any


def main(n: int = 1000, rounds: int = 15) -> None:
    import torch

    from types import SimpleNamespace

    from cgtool.capture.bench import time_blocks, torch_replay
    from cgtool.capture.graph import Graph, graph

    def make(kind: str) -> Graph:
        g = Graph(keep_graph=True)
        if kind == "1-node":
            x = torch.zeros(1, device="cuda")
            with graph(g):
                x.add_(1)
        else:
            a = torch.randn(4096, 4096, device="cuda")
            a @ a.T  # initialise cuBLAS before capture (its handle cannot be created while capturing)
            torch.cuda.synchronize()
            with graph(g):
                for _ in range(2):
                    a = a @ a.T / 64
        g.instantiate()
        return g

    def bare(fn: Any) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1000 / n

    print(f"{torch.cuda.get_device_name()}, {n} replays per measurement, {rounds} alternating rounds")
    for kind in ("1-node", "gemm"):
        g = make(kind)
        fn = torch_replay(SimpleNamespace(capture_stream=torch.cuda.current_stream(), graphs=[("main", g)],
                                          replay=g.replay))
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        b, h, p, w = [], [], [], []
        for _ in range(rounds):
            b.append(bare(fn))
            h.append(statistics.median(time_blocks(fn, n, 20)))
            p.append(statistics.median(time_blocks(fn, min(n, 200), 20, per_replay=True)))
            w.append(statistics.median(time_blocks(g.replay, n, 20)))
        mb, mh, mp, mw = statistics.median(b), statistics.median(h), statistics.median(p), statistics.median(w)
        target = 0.05 if kind == "1-node" else 0.01
        print(f"  {kind:7s} bare {mb:9.3f} µs  harness {mh:9.3f} µs  ratio {mh / mb:.4f} "
              f"(target <= {1 + target:.2f}: {'met' if mh / mb <= 1 + target else 'MISSED'})  "
              f"per-replay events {mp:9.3f} µs ({mp / mb:.2f}x)  engine Graph.replay {mw:9.3f} µs ({mw / mb:.3f}x)"
              f"{'' if fn != g.replay else '  (torch_replay fell back to Graph.replay)'}")


if __name__ == "__main__":
    main()
