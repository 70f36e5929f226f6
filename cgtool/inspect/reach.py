"""Reachability from an index built once: a chain cover of the DAG.

Capture graphs are only as wide as their streams, so a greedy path cover has few chains ``k``.
For every node ``v`` and chain ``c`` the index holds the first position on ``c`` reachable from
``v``; ``reachable(a, b)`` is then one comparison. Building costs O(E·k) time and O(V·k) memory;
no query ever searches the graph.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from cgtool.errors import InvalidInputError
from cgtool.inspect.graph import GraphData

_INF = 1 << 62


def topological_order(g: GraphData) -> list[int]:
    """Kahn's order over node indices; a cycle is an InvalidInputError naming nodes on it."""
    n = len(g.nodes)
    indeg = [len(nd.dependencies) for nd in g.nodes]
    q = deque(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    while q:
        v = q.popleft()
        order.append(v)
        for s in g.nodes[v].dependents:
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
        tails: list[int] = []  # last node of each chain
        for v in self.order:
            placed = False
            for u in g.nodes[v].dependencies:
                c = chain[u]
                if tails[c] == u:
                    chain[v], pos[v] = c, pos[u] + 1
                    tails[c] = v
                    placed = True
                    break
            if not placed:
                chain[v], pos[v] = len(tails), 0
                tails.append(v)
        self.chain, self.pos, self.k = chain, pos, len(tails)
        k = self.k
        reach: list[list[int]] = [[]] * n
        for v in reversed(self.order):
            r = [_INF] * k
            for s in g.nodes[v].dependents:
                rs = reach[s]
                r = list(map(min, r, rs))
            r[chain[v]] = pos[v]
            reach[v] = r
        self._reach = reach
        self._np: tuple[object, object, object] | None = None

    def arrays(self):  # type: ignore[no-untyped-def]
        """(reach, chain, pos) as numpy arrays, for vectorized queries."""
        if self._np is None:
            import numpy as np

            n = len(self._reach)
            reach = np.array(self._reach, dtype=np.int64).reshape(n, self.k) if n else np.zeros((0, 0), np.int64)
            self._np = (reach, np.array(self.chain, dtype=np.int64), np.array(self.pos, dtype=np.int64))
        return self._np

    def reachable_many(self, a, b):  # type: ignore[no-untyped-def]
        """Element-wise ``reachable`` over two integer arrays of node indices."""
        reach, chain, pos = self.arrays()
        return (reach[a, chain[b]] <= pos[b]) & (a != b)

    def reachable(self, a: int, b: int) -> bool:
        """True when b is reachable from a by a non-empty path."""
        if a == b:
            return False
        return self._reach[a][self.chain[b]] <= self.pos[b]
