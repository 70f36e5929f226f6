"""What a graph export costs per node, on the GPU machine (the part `cgtool record` must do inside
the graph-exec callback, while the template graph is alive).

    python benchmarks/bench_export_nodes.py [--layers 24] [--repeat 50]

Captures tests/programs/server_runner.py's model (LAYERS blocks, batch 8) with a kept template and
times, median over REPEAT calls: the whole export (``graph_data``), and the per-node driver and
CUPTI calls it makes through ctypes on their own (node list, node type, kernel parameters, CUPTI
node id, kernel name, edge list).
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _med(fn: Callable[[], Any], repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    from cgtool.capture import _fastcuda
    from cgtool.capture.export import graph_data
    from cgtool.capture.graph import Graph, graph

    sys.argv = ["server_runner.py", str(a.layers)]
    spec = importlib.util.spec_from_file_location("server_runner", os.path.join(ROOT, "tests", "programs",
                                                                                 "server_runner.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    model = mod.Model().cuda().eval()
    x = torch.zeros(8, mod.HIDDEN, device="cuda")
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = Graph(keep_graph=True)
        with graph(g):
            model(x)
        g.instantiate()
    raw, exe = int(g.raw_cuda_graph()), int(g.raw_cuda_graph_exec())
    graph_data(raw, exe)  # first call: imports, probes
    fast = _fastcuda.load()
    fc = _fastcuda.load_cupti()
    handles = fast.nodes(raw)
    n = len(handles)
    ct = ctypes.c_int()
    kp = _fastcuda.KernelParamsV2()
    res = {
        "nodes": n,
        "graph_data_ms": _med(lambda: graph_data(raw, exe, with_environment=False), a.repeat) * 1e3,
        "graph_data_no_meta_ms": _med(lambda: graph_data(raw, exe, with_meta=False), a.repeat) * 1e3,
        "node_list_ms": _med(lambda: fast.nodes(raw), a.repeat) * 1e3,
        "types_ms": _med(lambda: [fast.get_type(h, ctypes.byref(ct)) for h in handles], a.repeat) * 1e3,
        "kparams_ms": _med(lambda: [fast.kparams(h, ctypes.byref(kp)) for h in handles], a.repeat) * 1e3,
        "cupti_node_ids_ms": _med(lambda: [fc.node_id(h) for h in handles], a.repeat) * 1e3 if fc else None,
        "edges_ms": _med(lambda: fast.edges(raw), a.repeat) * 1e3,
        "python": sys.version.split()[0],
    }
    res["per_node_us"] = res["graph_data_ms"] * 1e3 / n
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
