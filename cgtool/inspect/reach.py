"""Reachability from an index built once: a chain cover of the DAG.

Capture graphs are only as wide as their streams. Nodes are visited in topological order and
each joins a chain whose last node is already one of its ancestors (or starts a new chain), so
the number of chains ``k`` stays near the graph's width. For every node ``v`` and chain ``c`` the
index holds the last position on ``c`` that is an ancestor of ``v`` (or ``v`` itself): then
``reachable(a, b)`` is one comparison, ``anc[b][chain[a]] >= pos[a]``. Building costs O(E·k)
time and O(V·k) memory; no query ever searches the graph.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

from cgtool.errors import InvalidInputError
from cgtool.artifacts.graph import GraphData


def topological_order(g: GraphData) -> list[int]:
    """Kahn's order over node indices; a cycle is an InvalidInputError naming nodes on it."""
    n = len(g.nodes)
    indeg = [len(nd.dependencies) for nd in g.nodes]
    q = deque(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    nodes = g.nodes
    while q:
        v = q.popleft()
        order.append(v)
        for s in nodes[v].dependents:
            indeg[s] -= 1
            if indeg[s] == 0:
                q.append(s)
    if len(order) != n:
        stuck = [i for i in range(n) if indeg[i] > 0]
        raise InvalidInputError(
            f"{g.source}: the graph has a cycle through {len(stuck)} nodes (e.g. indices "
            f"{stuck[:6]}); a CUDA graph is acyclic, so the file was edited or corrupted. "
            "List the cycle with networkx.find_cycle on the edges, or export the graph again."
        )
    return order


#: The chain index is kept while it holds at most this many entries (scaled by the node count) ...
DENSE_ENTRIES_PER_NODE = 64
DENSE_MIN_ENTRIES = 1 << 22
#: ... then ancestor bitsets, while they fit in this many bytes ...
BITSET_MAX_BYTES = 512 * 1024**2
#: ... else every query searches the graph (no index).
#: The numpy form of the chain index (nodes x chains) is built up to this many entries.
ARRAY_MAX_ENTRIES = 1 << 25


class Reachability:
    """``reachable(a, b)``: is there a path a → b (through any node types)?

    The index is chosen by the graph's width: a chain cover (O(1) queries) while it stays within
    ``DENSE_ENTRIES_PER_NODE`` entries per node — capture graphs are as wide as their streams;
    for wide graphs (thousands of independent nodes) ancestor bitsets while they fit in
    ``BITSET_MAX_BYTES``; beyond that no index: each query searches the graph, and ``note`` says so."""

    def __init__(self, g: GraphData, order: Sequence[int] | None = None) -> None:
        self.order = list(order) if order is not None else topological_order(g)
        n = len(g.nodes)
        self._g = g
        self._np: tuple[Any, Any, Any] | None = None
        self.note = ""
        self.tpos = [0] * n
        for i, v in enumerate(self.order):
            self.tpos[v] = i
        self.kind = "chains"
        if self._chains(g, max(DENSE_ENTRIES_PER_NODE * n, DENSE_MIN_ENTRIES)):
            return
        self.chain: list[int] = []
        self.pos: list[int] = []
        self.k = 0
        self._anc: list[list[int]] = []
        nodes, tpos = g.nodes, self.tpos
        est = sum(max((tpos[u] for u in nd.dependencies), default=0) for nd in nodes) // 8 + 64 * n
        if est <= BITSET_MAX_BYTES:
            self.kind = "bitsets"
            bits = [0] * n
            for v in self.order:
                b = 0
                for u in nodes[v].dependencies:
                    b |= bits[u] | (1 << tpos[u])
                bits[v] = b
            self._bits = bits
        else:
            self.kind = "search"
            self.note = (f"the graph is too wide for a reachability index ({n:,} nodes; ancestor sets would need "
                         f"about {est / 2**20:,.0f} MiB): each question searches the graph, which is slower")

    def _chains(self, g: GraphData, budget: int) -> bool:
        """Build the chain index; False (and nothing kept) when it would pass ``budget`` entries."""
        n = len(g.nodes)
        chain = [0] * n
        pos = [0] * n
        tail_pos: list[int] = []  # position of each chain's last node
        anc: list[list[int]] = [[]] * n
        nodes = g.nodes
        total = 0
        for v in self.order:
            deps = nodes[v].dependencies
            if not deps:
                a: list[int] = []
            elif len(deps) == 1:
                a = list(anc[deps[0]])
            else:
                a = []
                for u in deps:
                    au = anc[u]
                    if len(au) > len(a):
                        a, au = list(au), a
                    a[: len(au)] = map(max, a[: len(au)], au)
            # Extend a chain whose tail is an ancestor of v: prefer a direct predecessor's chain.
            c = -1
            for u in deps:
                cu = chain[u]
                if pos[u] == tail_pos[cu]:
                    c = cu
                    break
            if c < 0:
                for cc, tp in enumerate(tail_pos[: len(a)]):
                    if a[cc] == tp:
                        c = cc
                        break
            if c < 0:
                c = len(tail_pos)
                tail_pos.append(-1)
            p = tail_pos[c] + 1
            tail_pos[c] = p
            chain[v], pos[v] = c, p
            if len(a) <= c:
                a.extend([-1] * (c + 1 - len(a)))
            a[c] = p
            anc[v] = a
            total += len(a)
            if total > budget:
                return False
        self.chain, self.pos, self.k = chain, pos, len(tail_pos)
        self._anc = anc
        return True

    def reachable(self, a: int, b: int) -> bool:
        """True when b is reachable from a by a non-empty path."""
        if a == b:
            return False
        if self.kind == "chains":
            ab = self._anc[b]
            c = self.chain[a]
            return c < len(ab) and bool(ab[c] >= self.pos[a])
        if self.tpos[a] >= self.tpos[b]:
            return False
        if self.kind == "bitsets":
            return bool((self._bits[b] >> self.tpos[a]) & 1)
        return self._search(a, b)

    def _search(self, a: int, b: int) -> bool:
        nodes, tpos, limit = self._g.nodes, self.tpos, self.tpos[b]
        seen = {a}
        stack = [a]
        while stack:
            for s in nodes[stack.pop()].dependents:
                if s == b:
                    return True
                if s not in seen and tpos[s] < limit:
                    seen.add(s)
                    stack.append(s)
        return False

    def arrays(self) -> tuple[Any, Any, Any]:
        """(anc, chain, pos) of the chain index as numpy arrays (anc padded with -1), for
        vectorized queries; only for a chain index of at most ARRAY_MAX_ENTRIES entries."""
        if self._np is None:
            import numpy as np

            n = len(self._anc)
            if self.kind != "chains" or n * max(self.k, 1) > ARRAY_MAX_ENTRIES:
                raise ValueError("no array form of this reachability index")
            anc = np.full((n, max(self.k, 1)), -1, dtype=np.int64)
            for v, a in enumerate(self._anc):
                anc[v, : len(a)] = a
            self._np = (anc, np.array(self.chain, dtype=np.int64), np.array(self.pos, dtype=np.int64))
        return self._np

    def reachable_many(self, a: Any, b: Any) -> Any:
        """Element-wise ``reachable`` over two integer arrays of node indices."""
        import numpy as np

        if self.kind == "chains" and len(self._anc) * max(self.k, 1) <= ARRAY_MAX_ENTRIES:
            anc, chain, pos = self.arrays()
            return (anc[b, chain[a]] >= pos[a]) & (a != b)
        return np.fromiter((self.reachable(x, y) for x, y in zip(np.asarray(a).tolist(), np.asarray(b).tolist())),
                           dtype=bool, count=len(a))
