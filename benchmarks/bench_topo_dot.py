"""`cgtool topo` and `cgtool dot` on a generated 100,000-node capture-shaped graph.

    python3 benchmarks/bench_topo_dot.py [NODES]

The graph looks like a long multi-stream capture: 8 streams, each a chain of kernels, with
forks and joins between streams every 50 nodes (event record/wait edges) and an empty join node
per fork/join round. Each command runs end to end (load the JSON file, analyse, render) in a
fresh process. Targets on the CI machine: topo under 5 s, dot under 10 s.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_graph(n: int, streams: int = 8, seed: int = 0) -> dict:
    from cgtool.artifacts.graph import NodeType, from_edges

    rng = random.Random(seed)
    edges: list[tuple[int, int]] = []
    types: list[NodeType] = []
    names: list[str | None] = []
    last = [-1] * streams
    i = 0
    while i < n:
        if i and i % (50 * streams) == 0 and i + 1 < n:  # a join/fork round through an empty node
            j = i
            types.append(NodeType.EMPTY)
            names.append(None)
            edges += [(p, j) for p in last if p >= 0]
            last = [j] * streams
            i += 1
            continue
        s = rng.randrange(streams)
        types.append(NodeType.KERNEL)
        names.append(f"_Z6kernelILi{rng.randrange(40)}EEvPf")
        if last[s] >= 0:
            edges.append((last[s], i))
        if rng.random() < 0.02:  # a cross-stream event wait
            t = rng.randrange(streams)
            if last[t] >= 0 and last[t] != last[s]:
                edges.append((last[t], i))
        last[s] = i
        i += 1
    return from_edges(n, sorted(set(edges)), types=types, names=names).to_json()


def run(args: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "cgtool", *args], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return time.perf_counter() - t0


def main(n: int = 100_000) -> None:
    from cgtool.artifacts.jsonio import write_json

    with tempfile.TemporaryDirectory() as d:
        g = Path(d) / "g.json"
        write_json(g, make_graph(n))
        print(f"{n:,}-node graph, {g.stat().st_size / 2**20:.1f} MiB, {os.cpu_count()} cores")
        t_topo = run(["topo", str(g), "--json", str(Path(d) / "t.json")])
        t_dot = run(["dot", str(g), "-o", str(Path(d) / "g.dot")])
        t_full = run(["dot", str(g), "-o", str(Path(d) / "full.dot"), "--expand"])
        print(f"  cgtool topo            {t_topo:6.2f} s (target < 5 s: {'met' if t_topo < 5 else 'MISSED'})")
        print(f"  cgtool dot             {t_dot:6.2f} s (target < 10 s: {'met' if t_dot < 10 else 'MISSED'})")
        print(f"  cgtool dot --expand    {t_full:6.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
