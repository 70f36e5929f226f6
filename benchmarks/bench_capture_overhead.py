"""Capture + instantiate time of cgtool's engine against bare torch.cuda.graph, same workloads.

    PYTHONPATH=. python3 benchmarks/bench_capture_overhead.py   (GPU machine)

For each sample workload: set up once, warm up, then alternate captures with
``torch.cuda.graph`` + ``instantiate`` (a torch.cuda.CUDAGraph(keep_graph=True)) and with
cgtool's ``Graph`` through ``cgtool.capture.graph.graph`` + ``instantiate``, 15 rounds each; medians
and their ratio (target: cgtool under 10 % over bare). Exports are not part of either timing.
"""

from __future__ import annotations

import statistics
import time

WORKLOADS = ["chain", "forkjoin", "transformer_block", "resnet50", "gpt2_decode"]


def main(rounds: int = 15) -> None:
    import torch

    from cgtool.capture.entrypoint import call_setup, parse_target, resolve
    from cgtool.capture.graph import Graph, graph

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {rounds} alternating rounds")
    for name in WORKLOADS:
        t = parse_target(f"sample_workloads/{name}.py")
        step = call_setup(t, resolve(t))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.synchronize()
        bare, ours = [], []
        keep = []
        for _ in range(rounds):
            g0 = torch.cuda.CUDAGraph(keep_graph=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.graph(g0, stream=side):
                step()
            g0.instantiate()
            bare.append(time.perf_counter() - t0)
            g1 = Graph(keep_graph=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with graph(g1, stream=side):
                step()
            g1.instantiate()
            ours.append(time.perf_counter() - t0)
            keep += [g0, g1]  # keep outputs' pools alive until the end, as a real program would
        mb, mo = statistics.median(bare), statistics.median(ours)
        print(f"  {name:18s} bare {mb * 1e3:7.2f} ms  cgtool {mo * 1e3:7.2f} ms  ratio {mo / mb:.3f} "
              f"(target < 1.10: {'met' if mo / mb < 1.10 else 'MISSED'})")
        del keep
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
