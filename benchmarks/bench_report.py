"""`cgtool report` on generated 10,000-node graphs with a trace: time to write, size, time to open.

    python3 benchmarks/bench_report.py [NODES]

Three shapes, each a cgtool trace (3 replays, 4 hardware channels, graph embedded) written here:
capture-shaped (8 streams of kernels with cross-stream waits and fork/join rounds, as
bench_topo_dot.py), one straight chain, and 1,000 parallel chains of 10. For each: the wall time of
`cgtool report` in a fresh process (target on the CI machine: under 10 s), the page's size, and
with Chromium installed, the time headless Chromium takes to load the page and draw it (the
script's own time is in the page's ``data-render-ms``), and how many SVG elements it drew.

How it scales: writing is linear in nodes + edges (the layout's barycenter sweeps are linear per
sweep; the JSON is one pass), the page holds one JSON block, and the page draws only the boxes,
edges and bars within a screen of the visible part (re-drawn on scroll), folds the inside of
chains into pieces of at most 24 nodes, and zoomed out over thousands of events merges bars per
pixel; so the DOM stays at a few thousand elements whatever the graph's size.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def chain(n: int) -> dict:
    from cgtool.artifacts.graph import from_edges

    return from_edges(n, [(i, i + 1) for i in range(n - 1)], names=["_Z6kernelILi1EEvPf"] * n).to_json()


def parallel(n: int, length: int = 10) -> dict:
    from cgtool.artifacts.graph import from_edges

    edges = [(i, i + 1) for i in range(n - 1) if (i + 1) % length]
    return from_edges(n, edges, names=[f"_Z6kernelILi{i % 7}EEvPf" for i in range(n)]).to_json()


def trace_of(graph: dict, replays: int = 3, channels: int = 4, seed: int = 0) -> dict:
    """A cgtool trace of ``graph``: each node starts when its predecessors and its channel are done."""
    rng = random.Random(seed)
    nodes = graph["nodes"]
    order, indeg = [], [len(n["dependencies"]) for n in nodes]
    ready = [n["index"] for n in nodes if not indeg[n["index"]]]
    while ready:
        v = ready.pop()
        order.append(v)
        for d in nodes[v]["dependents"]:
            indeg[d] -= 1
            if not indeg[d]:
                ready.append(d)
    events = []
    t = 0.0
    for r in range(replays):
        end = [0.0] * len(nodes)
        free = [t] * channels
        for v in order:
            nd = nodes[v]
            if nd["node_type"] != "kernel":
                end[v] = max([end[p] for p in nd["dependencies"]] + [t])
                continue
            c = v % channels
            s = max([end[p] for p in nd["dependencies"]] + [free[c]]) + 0.5
            d = rng.uniform(2, 40)
            end[v] = free[c] = s + d
            events.append({"ph": "X", "cat": "kernel", "name": nd["kernel_name"], "pid": 0, "tid": 7 + c,
                           "ts": round(s, 3), "dur": round(d, 3),
                           "args": {"device": 0, "stream": 7 + c, "correlation": 100 + r, "graph id": graph["exec_graph_id"],
                                    "graph node id": nd["tools_id"], "channel": c, "channel_type": 1}})
        t = max(end) + 50
    return {"traceEvents": events, "cgtool": {"schema_version": 1, "kind": "trace", "graphs": [graph]}}


def main(n: int = 10_000) -> None:
    from bench_topo_dot import make_graph
    from cgtool.artifacts.jsonio import write_json

    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    print(f"cgtool report, {n:,} nodes, trace of 3 replays on 4 channels (CPU: {os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as d:
        for name, g in (("capture-shaped", make_graph(n)), ("straight chain", chain(n)), ("1000 chains of 10", parallel(n))):
            tr = Path(d) / f"{name[:5]}.json.gz"
            write_json(tr, trace_of(g))
            out = Path(d) / "r.html"
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "cgtool", "-q", "report", str(tr), "-o", str(out), "--force"],
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            dt = time.perf_counter() - t0
            if r.returncode:
                raise SystemExit(r.stderr)
            line = f"  {name:18s} written in {dt:5.2f} s ({'met' if dt < 10 else 'MISSED'} < 10 s), {out.stat().st_size / 1e6:5.1f} MB"
            if chromium:
                for frag in ("", "#unfold-all"):
                    t0 = time.perf_counter()
                    b = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1300",
                                        "--virtual-time-budget=10000", "--dump-dom", out.resolve().as_uri() + frag],
                                       capture_output=True, text=True, timeout=300)
                    bt = time.perf_counter() - t0
                    ms = re.search(r'data-render-ms="(\d+)"', b.stdout)
                    errs = re.search(r'data-errors="([^"]*)"', b.stdout)
                    n_el = len(re.findall(r"<(?:g|rect|path) ", b.stdout))
                    line += (f"\n      chromium{' ' + frag if frag else '':12s} load+draw {bt:5.2f} s (script {ms.group(1) if ms else '?'} ms),"
                             f" {n_el:,} svg elements in the DOM{'' if errs and not errs.group(1) else ', SCRIPT ERRORS'}")
            print(line)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
