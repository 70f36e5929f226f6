"""Matching without node ids: a 1,000-node graph with 20 replays in a torch.profiler-style trace.

    python3 benchmarks/bench_match.py [NODES] [REPLAYS]

The graph: a head kernel forks into 10 branches (each its own executor stream), every branch a
chain of kernels cycling through 4 names (so many nodes share a name and shape), the branches
joining into a tail kernel; 8 branches have the same kernels (those of equal length are
interchangeable: each such group's permutations are assignments with the same verdicts), 2 have
their own kernels. The trace: per replay one cudaGraphLaunch, the events of
each branch on its stream in order, branches overlapping in time, no node ids (as torch <= 2.12
writes them). Timed: `cgtool.inspect.match.match_launches` (target: under 1 s), and the whole of
`deps`'s analysis for scale. Prints the figures.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cgtool.inspect.deps import analyze  # noqa: E402
from cgtool.artifacts.graph import GraphData  # noqa: E402
from cgtool.inspect.match import match_launches, prepare  # noqa: E402
from cgtool.inspect.reach import topological_order  # noqa: E402
from cgtool.artifacts.trace import load_trace  # noqa: E402

BRANCHES = 10
NAMES = ["gemm_a", "gelu", "gemm_b", "add"]


def make(n_nodes: int, replays: int) -> tuple[dict, dict]:
    per, rem = divmod(n_nodes - 2, BRANCHES)
    nodes: list[dict] = []
    extras: list[dict] = []

    def add(name: str, deps: list[int], grid: list[int]) -> int:
        i = len(nodes)
        nodes.append({"index": i, "node_type": "kernel", "tools_id": (2 << 32) | i, "graph_id": 2, "node_id": i,
                      "kernel_name": name, "dependencies": deps, "dependents": []})
        extras.append({"grid": grid, "block": [128, 1, 1], "shared_mem": 0})
        for d in deps:
            nodes[d]["dependents"].append(i)
        return i

    head = add("head", [], [64, 1, 1])
    tails = []
    branch_nodes = []
    for b in range(BRANCHES):
        prev = head
        mine = []
        for k in range(per + (b >= BRANCHES - rem)):  # the last branches take the remainder
            name = NAMES[k % len(NAMES)] if b < 8 else f"{NAMES[k % len(NAMES)]}_{b}"
            prev = add(name, [prev], [32, 1, 1])
            mine.append(prev)
        tails.append(prev)
        branch_nodes.append(mine)
    tail = add("tail", tails, [64, 1, 1])
    graph = {"exec_graph_id": 2, "nodes": nodes,
             "cgtool": {"schema_version": 1, "nodes": extras, "environment": {"sm_count": 132}}}
    events = []
    t = 0.0
    for r in range(replays):
        corr = 100 + r
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t, "dur": 5.0,
                       "pid": 1, "tid": 1, "args": {"correlation": corr}})

        def ev(i: int, stream: int, ts: float, dur: float) -> None:
            events.append({"ph": "X", "cat": "kernel", "name": nodes[i]["kernel_name"], "ts": round(ts, 3),
                           "dur": dur, "pid": 0, "tid": stream,
                           "args": {"device": 0, "stream": stream, "correlation": corr,
                                    "grid": extras[i]["grid"], "block": [128, 1, 1], "shared memory": 0}})
        ev(head, 7, t + 10.0, 2.0)
        end = 0.0
        for b, mine in enumerate(branch_nodes):
            ts = t + 12.5 + 0.7 * b + 0.01 * r
            for k, i in enumerate(mine):
                dur = 1.0 + 0.1 * ((b + k) % 3)
                ev(i, 7 if b == 0 else 200 + b, ts, dur)
                ts += dur + 0.8
            end = max(end, ts)
        ev(tail, 7, end + 1.0, 2.0)
        t = end + 20.0
    return graph, {"traceEvents": events}


def main() -> None:
    n_nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    replays = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    graph, trace = make(n_nodes, replays)
    with tempfile.TemporaryDirectory() as d:
        gp, tp = Path(d) / "graph.json", Path(d) / "trace.json"
        gp.write_text(json.dumps(graph))
        tp.write_text(json.dumps(trace))
        g = GraphData.load(gp)
        t = load_trace(tp)
    t0 = time.perf_counter()
    model = prepare(g, topological_order(g))
    m = match_launches(t, {g.exec_graph_id: model})
    dt = time.perf_counter() - t0
    lg = m.groups[0]
    print(f"match: {len(g.nodes)} nodes x {replays} replays ({len(t)} events) in {dt:.3f} s "
          f"(target < 1 s): {len(m.groups)} launch group(s), {lg.assignments} consistent assignments "
          f"({len(lg.solutions)} searched, complete={lg.complete})")
    t0 = time.perf_counter()
    r = analyze(t, [g])
    print(f"deps analysis (match, serializations, cost estimate): {time.perf_counter() - t0:.3f} s, "
          f"{r.n_true} true, {r.n_fake} fake, certainty {r.certainties()}")
    if dt >= 1.0:
        sys.exit(1)


if __name__ == "__main__":
    main()
