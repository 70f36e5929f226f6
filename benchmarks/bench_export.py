"""Cost of exporting a 10,000-node graph: cgtool's get_graph_data against the bare
cudaGraphGetNodes + cudaGraphGetEdges calls, and against torch's own get_graph_data where torch
has one that works on this driver. GPU machine: `PYTHONPATH=. python3 benchmarks/bench_export.py`.

Target: under 100 ms for 10,000 nodes; aim for 3x the bare calls.
"""

from __future__ import annotations

import statistics
import sys
import time


def main(n: int = 10_000, reps: int = 7) -> None:
    import torch
    from cuda.bindings import runtime as rt

    from cgtool.capture.export import graph_data
    from cgtool.capture.graph import Graph, graph

    x = torch.ones(32, device="cuda")
    g = Graph(keep_graph=True)
    with graph(g):
        for _ in range(n // 2):  # two kernel functions, alternating: names are looked up once each
            x.mul_(1.0)
            x.add_(0.0)
    g.instantiate()
    raw, exe = g.raw_cuda_graph(), g.raw_cuda_graph_exec()
    gh = rt.cudaGraph_t(init_value=raw)

    def bare() -> None:
        _, _, num = rt.cudaGraphGetNodes(gh, numNodes=0)
        rt.cudaGraphGetNodes(gh, numNodes=num)
        r = rt.cudaGraphGetEdges(gh, numEdges=0)
        rt.cudaGraphGetEdges(gh, numEdges=r[-1])

    def ours() -> None:
        graph_data(raw, exe, with_meta=False)

    def ours_meta() -> None:
        graph_data(raw, exe, with_meta=True)

    def ours_bindings() -> None:
        graph_data(raw, exe, with_meta=False, impl="bindings")

    cases = {"bare GetNodes+GetEdges": bare, "cgtool get_graph_data": ours, "cgtool export (with meta)": ours_meta,
             "cgtool, cuda.bindings path": ours_bindings}
    tg = torch.cuda.CUDAGraph(keep_graph=True)
    if hasattr(tg, "get_graph_data"):
        def torch_impl() -> None:
            g._g.get_graph_data()

        try:
            torch_impl()
            cases["torch get_graph_data"] = torch_impl
        except Exception as e:  # needs a 13.1 driver
            print(f"torch get_graph_data: not measured ({type(e).__name__}: {str(e)[:80]})")
    else:
        print(f"torch get_graph_data: not in torch {torch.__version__}")
    # Per-call cost of each per-node call, to see where an export's time goes.
    from cgtool.capture import _fastcuda
    from cupti import cupti as cp

    fast, fc = _fastcuda.load(), _fastcuda.load_cupti()
    hs = fast.nodes(raw) if fast else []
    import ctypes

    t_int = ctypes.c_int()
    kp = _fastcuda.KernelParamsV2()
    calls = {
        "cupti.get_graph_node_id (cupti-python)": lambda h: cp.get_graph_node_id(h),
        "cuptiGetGraphNodeId (ctypes)": (lambda h: fc.node_id(h)) if fc else None,
        "cuGraphNodeGetType (ctypes)": (lambda h: fast.get_type(h, ctypes.byref(t_int))) if fast else None,
        "cuGraphKernelNodeGetParams_v2 (ctypes)": (lambda h: fast.kparams(h, ctypes.byref(kp))) if fast else None,
    }
    for name, fn in calls.items():
        if fn is None or not hs:
            continue
        t0 = time.perf_counter()
        for h in hs:
            fn(h)
        print(f"  per call: {name:42s} {(time.perf_counter() - t0) / len(hs) * 1e6:6.2f} µs")
    res = {}
    for name, fn in cases.items():
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        res[name] = statistics.median(ts)
    nodes = len(graph_data(raw, exe, with_meta=False)["nodes"])
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(graph_data, raw, exe, with_meta=False)
    pstats.Stats(prof).sort_stats("tottime").print_stats(8)
    print(f"graph of {nodes} nodes on {torch.cuda.get_device_name()}, median of {reps}:")
    base = res["bare GetNodes+GetEdges"]
    for name, t in res.items():
        print(f"  {name:28s} {t * 1e3:8.2f} ms  ({t / base:5.2f}x bare)")
    ok = res["cgtool get_graph_data"] < 0.100
    print(f"target <100 ms: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
