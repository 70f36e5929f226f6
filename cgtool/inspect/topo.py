"""Topology of a graph export (linear but for the exact width; no networkx: see ``_components``).

Definitions (the JSON keys of `cgtool topo --json`):

* ``depth``: nodes on the longest path.
* ``levels``: the longest-path layering (a node's level is one more than its deepest dependency);
  ``max_level_width`` is the most nodes in one level.
* ``max_concurrency``: the largest set of nodes no two of which are ordered by a path (a maximum
  antichain, by Dilworth's theorem via bipartite matching); computed exactly up to
  ``EXACT_WIDTH_LIMIT`` nodes and ``EXACT_PAIR_LIMIT`` comparable pairs, else None
  (``max_level_width`` is then a lower bound).
* ``redundant_edges``: edges implied by other paths (removed by a transitive reduction).
* ``critical_path``: tools ids along the longest path by node count, or, when a trace is given,
  the measured critical path (``cgtool.inspect.cost``: the longest path of the median replay with
  that replay's durations; ``critical_path_us`` is its length, the lower bound on replay time —
  the same figure ``deps`` reports).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from cgtool.artifacts.graph import GraphData
from cgtool.inspect.cost import CriticalPath
from cgtool.inspect.reach import Reachability, topological_order

EXACT_WIDTH_LIMIT = 3000
#: ... and up to this many comparable pairs (edges of the matching's bipartite graph).
EXACT_PAIR_LIMIT = 300_000


@dataclass
class Topology:
    nodes: int
    edges: int
    nodes_by_type: dict[str, int]
    edges_by_type: dict[str, int]
    roots: list[int]
    leaves: list[int]
    depth: int
    level_widths: list[int]
    max_level_width: int
    max_concurrency: int | None
    forks: list[int]
    joins: list[int]
    redundant_edges: list[tuple[int, int]]
    components: int
    critical_path: list[int]  # node indices
    critical_path_us: float | None = None
    distinct_kernels: int = 0
    tools_ids: list[int] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        t = self.tools_ids
        return {
            "nodes": self.nodes,
            "edges": self.edges,
            "nodes_by_type": self.nodes_by_type,
            "edges_by_type": self.edges_by_type,
            "roots": [t[i] for i in self.roots],
            "leaves": [t[i] for i in self.leaves],
            "depth": self.depth,
            "level_widths": self.level_widths,
            "max_level_width": self.max_level_width,
            "max_concurrency": self.max_concurrency,
            "forks": [t[i] for i in self.forks],
            "joins": [t[i] for i in self.joins],
            "redundant_edges": [[t[a], t[b]] for a, b in self.redundant_edges],
            "components": self.components,
            "critical_path": [t[i] for i in self.critical_path],
            "critical_path_us": self.critical_path_us,
            "distinct_kernels": self.distinct_kernels,
        }


def analyze(g: GraphData, durations_us: Mapping[int, float] | None = None,
            measured: CriticalPath | None = None) -> Topology:
    """Topology of ``g``; ``measured`` (from a trace, see cgtool.inspect.deps.measured_critical_path)
    gives the critical path; else ``durations_us`` (node index -> µs) weights it, else node count."""
    n = len(g.nodes)
    order = topological_order(g)
    reach = Reachability(g, order)
    level = [0] * n
    longest = [0.0] * n
    prev = [-1] * n
    w = durations_us or {}
    for v in order:
        deps = g.nodes[v].dependencies
        if deps:
            level[v] = 1 + max(level[u] for u in deps)
            best = max(deps, key=lambda u: (longest[u], -u))
            longest[v] = longest[best] + (w.get(v, 0.0) if durations_us else 1.0)
            prev[v] = best
        else:
            longest[v] = w.get(v, 0.0) if durations_us else 1.0
    widths = Counter(level)
    level_widths = [widths[i] for i in range(max(level) + 1)] if n else []
    end = max(range(n), key=lambda v: (longest[v], -v)) if n else -1
    path: list[int] = []
    while end != -1:
        path.append(end)
        end = prev[end]
    path.reverse()
    crit_us = round(longest[path[-1]], 3) if (durations_us and path) else None
    if measured is not None:
        path, crit_us = list(measured.path), round(measured.median_us, 3)
    redundant = []
    nodes = g.nodes
    for nd in nodes:
        ds = nd.dependents
        if len(ds) > 1:
            u = nd.index
            for v in ds:
                # (u, v) is implied when another path u -> ... -> v exists: some other dependent of u
                # reaches v, or u reaches some other dependency of v. Ask from the smaller side.
                dv = nodes[v].dependencies
                if len(dv) < len(ds):
                    implied = any(w != u and reach.reachable(u, w) for w in dv)
                else:
                    implied = any(x != v and reach.reachable(x, v) for x in ds)
                if implied:
                    redundant.append((u, v))
    edges_by_type: Counter[str] = Counter()
    for nd in g.nodes:
        for d in nd.dependents:
            edges_by_type[f"{nd.node_type.value}->{g.nodes[d].node_type.value}"] += 1
    edges = g.edges()
    return Topology(
        nodes=n,
        edges=len(set(edges)),  # an edge listed twice is one edge
        nodes_by_type=dict(Counter(nd.node_type.value for nd in g.nodes)),
        edges_by_type=dict(edges_by_type),
        roots=[nd.index for nd in g.nodes if not nd.dependencies],
        leaves=[nd.index for nd in g.nodes if not nd.dependents],
        depth=(max(level) + 1) if n else 0,
        level_widths=level_widths,
        max_level_width=max(level_widths, default=0),
        max_concurrency=_max_antichain(g, reach) if n <= EXACT_WIDTH_LIMIT else None,
        forks=[nd.index for nd in g.nodes if len(nd.dependents) > 1],
        joins=[nd.index for nd in g.nodes if len(nd.dependencies) > 1],
        redundant_edges=redundant,
        components=_components(n, edges),
        critical_path=path,
        critical_path_us=crit_us,
        distinct_kernels=len({nd.kernel_name for nd in g.nodes if nd.kernel_name}),
        tools_ids=[nd.tools_id for nd in g.nodes],
    )


def _components(n: int, edges: list[tuple[int, int]]) -> int:
    """Weakly connected components of nodes ``0..n-1`` joined by ``edges``: a depth-first walk over
    the edges taken both ways. Hand-written for speed: networkx's count needs a DiGraph built first,
    and importing networkx was a third of the CPU time of a `cgtool topo` process
    (docs/performance.md#hand-written-code)."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        adj[u].append(v)
        adj[v].append(u)
    seen = bytearray(n)
    count = 0
    for s in range(n):
        if seen[s]:
            continue
        count += 1
        seen[s] = 1
        stack = [s]
        while stack:
            for v in adj[stack.pop()]:
                if not seen[v]:
                    seen[v] = 1
                    stack.append(v)
    return count


def _max_antichain(g: GraphData, reach: Reachability) -> int | None:
    """Width of the partial order = n - maximum matching in the bipartite comparability graph;
    None when that graph would have more than EXACT_PAIR_LIMIT edges (a long chain of 3,000 nodes
    has 4.5 million: minutes and gigabytes)."""
    n = len(g.nodes)
    if n == 0:
        return 0
    # Ancestor sets as bitsets over node indices, in topological order: they count the pairs first.
    anc = [0] * n
    for v in reach.order:
        b = 0
        for u in g.nodes[v].dependencies:
            b |= anc[u] | (1 << u)
        anc[v] = b
    if sum(b.bit_count() for b in anc) > EXACT_PAIR_LIMIT:
        return None
    return n - _max_matching(anc, reach.order)


def _max_matching(anc: list[int], order: list[int]) -> int:
    """Size of a maximum matching of the comparability graph (left u, right v, u an ancestor of v):
    Kuhn's augmenting paths over bitsets. Hand-written for speed: networkx's Hopcroft-Karp needs the
    graph built edge by edge first, one edge per comparable pair (the transitive closure), and that
    building was most of the width's time (docs/performance.md, hand-written code); here a node's
    descendants are one integer and each augmenting search visits a right node once."""
    n = len(anc)
    desc = [0] * n
    for v in order:  # descendants from the ancestor sets: v is a descendant of each of its ancestors
        bits = anc[v]
        while bits:
            low = bits & -bits
            desc[low.bit_length() - 1] |= 1 << v
            bits ^= low
    match_l, match_r = [-1] * n, [-1] * n
    free = (1 << n) - 1  # right nodes not matched yet
    size = 0
    for u in reversed(order):  # greedy first: the nearest free descendant (a chain's next node)
        cand = desc[u] & free
        if cand:
            r = (cand & -cand).bit_length() - 1
            match_l[u], match_r[r] = r, u
            free &= ~(1 << r)
            size += 1
    for u in order:
        if match_l[u] >= 0 or not desc[u]:
            continue
        seen, reached_from = 0, {}
        stack = [[u, desc[u]]]
        while stack:
            top = stack[-1]
            cand = top[1] & ~seen
            if not cand:
                stack.pop()
                continue
            low = cand & -cand
            r = low.bit_length() - 1
            seen |= low
            top[1] = cand ^ low
            reached_from[r] = top[0]
            if match_r[r] < 0:  # an augmenting path: flip it back to u
                while True:
                    lu = reached_from[r]
                    prev = match_l[lu]
                    match_l[lu], match_r[r] = r, lu
                    if lu == u:
                        break
                    r = prev
                size += 1
                break
            stack.append([match_r[r], desc[match_r[r]]])
    return size
