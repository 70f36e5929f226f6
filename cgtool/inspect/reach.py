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


class Reachability:
    """``reachable(a, b)``: is there a path a → b (through any node types)? O(1) per query."""

    def __init__(self, g: GraphData, order: Sequence[int] | None = None) -> None:
        self.order = list(order) if order is not None else topological_order(g)
        n = len(g.nodes)
        chain = [0] * n
        pos = [0] * n
        tail_pos: list[int] = []  # position of each chain's last node
        anc: list[list[int]] = [[]] * n
        nodes = g.nodes
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
                for cc, tp in enumerate(tail_pos):
                    if cc < len(a) and a[cc] == tp:
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
        self.chain, self.pos, self.k = chain, pos, len(tail_pos)
        self._anc = anc
        self._np: tuple[Any, Any, Any] | None = None

    def reachable(self, a: int, b: int) -> bool:
        """True when b is reachable from a by a non-empty path."""
        if a == b:
            return False
        ab = self._anc[b]
        c = self.chain[a]
        return c < len(ab) and ab[c] >= self.pos[a]

    def arrays(self) -> tuple[Any, Any, Any]:
        """(anc, chain, pos) as numpy arrays (anc padded with -1), for vectorized queries."""
        if self._np is None:
            import numpy as np

            n = len(self._anc)
            anc = np.full((n, max(self.k, 1)), -1, dtype=np.int64)
            for v, a in enumerate(self._anc):
                anc[v, : len(a)] = a
            self._np = (anc, np.array(self.chain, dtype=np.int64), np.array(self.pos, dtype=np.int64))
        return self._np

    def reachable_many(self, a: Any, b: Any) -> Any:
        """Element-wise ``reachable`` over two integer arrays of node indices."""
        anc, chain, pos = self.arrays()
        return (anc[b, chain[a]] >= pos[a]) & (a != b)
