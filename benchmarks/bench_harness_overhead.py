"""Does cgtool bench's timing add anything over a bare replay loop? GPU machine:

    PYTHONPATH=. python3 benchmarks/bench_harness_overhead.py

For a 1-node graph and a GPU-bound graph (>= 100 µs per replay), in one run, alternating:
bare = one event pair around N back-to-back ``replay()`` calls; harness = cgtool's block timing
(``time_blocks``) of the same graph. Prints both per-replay medians and their ratio
(targets: <= 1 % for >= 100 µs graphs, <= 5 % for the 1-node graph), and the per-replay-events
mode for comparison (it inflates small graphs, which is why it is opt-in).
"""

from __future__ import annotations

import statistics


def main(n: int = 1000, rounds: int = 15) -> None:
    import torch

    from cgtool.capture.bench import time_blocks
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

    def bare(g: Graph) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            g.replay()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1000 / n

    print(f"{torch.cuda.get_device_name()}, {n} replays per measurement, {rounds} alternating rounds")
    for kind in ("1-node", "gemm"):
        g = make(kind)
        for _ in range(50):
            g.replay()
        torch.cuda.synchronize()
        b, h, p = [], [], []
        for _ in range(rounds):
            b.append(bare(g))
            h.append(statistics.median(time_blocks(g.replay, n, 20)))
            p.append(statistics.median(time_blocks(g.replay, min(n, 200), 20, per_replay=True)))
        mb, mh, mp = statistics.median(b), statistics.median(h), statistics.median(p)
        target = 0.05 if kind == "1-node" else 0.01
        print(f"  {kind:7s} bare {mb:9.3f} µs  harness {mh:9.3f} µs  ratio {mh / mb:.4f} "
              f"(target <= {1 + target:.2f}: {'met' if mh / mb <= 1 + target else 'MISSED'})  "
              f"per-replay events {mp:9.3f} µs ({mp / mb:.2f}x)")


if __name__ == "__main__":
    main()
