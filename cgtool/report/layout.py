"""A layered (Sugiyama-style) top-down layout of a folded graph, for the HTML report.

Why not Graphviz: ``dot`` is not installed everywhere (the report must be written on a CI machine
with the base install), its network-simplex placement takes minutes on a 10,000-node graph, and
the page unfolds a folded piece in place, which needs a layout in rows it can stretch (a piece
unfolded at row r pushes the rows below it down) rather than fixed coordinates. So: rows by
longest path from the roots (networkx's topological order), order within a row by a few
barycenter sweeps (the classic crossing-reduction heuristic), rows centred. Linear in the edges
per sweep: 10,000 nodes lay out in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from cgtool.artifacts.graph import GraphData
from cgtool.report.fold import Folding

SWEEPS = 4


@dataclass(frozen=True)
class Layout:
    """The boxes of the picture ("units"): each node that is not folded, and each folded piece.
    Every unit has a row (top-down) and an x position (in box widths, each row centred on 0)."""

    unit_of: list[int]  # node index -> unit index
    members: list[list[int]]  # unit index -> its node indices (one, or a folded piece)
    row: list[int]
    x: list[float]
    edges: list[tuple[int, int]]  # between units, distinct


def layered(g: GraphData, folding: Folding) -> Layout:
    n = len(g.nodes)
    piece_of = folding.piece_of()
    unit_of = [-1] * n
    members: list[list[int]] = []
    for i in range(n):
        if i in piece_of:
            p = folding.pieces[piece_of[i]]
            if p[0] == i:
                for j in p:
                    unit_of[j] = len(members)
                members.append(p)
        elif unit_of[i] < 0:
            unit_of[i] = len(members)
            members.append([i])
    for p in folding.pieces:  # pieces whose first node comes after others of theirs in index order
        if unit_of[p[0]] < 0:
            for j in p:
                unit_of[j] = len(members)
            members.append(p)
    edges = sorted({(unit_of[a], unit_of[b]) for a, b in g.edges() if unit_of[a] != unit_of[b]})
    m = len(members)
    G = nx.DiGraph()
    G.add_nodes_from(range(m))
    G.add_edges_from(edges)
    preds: list[list[int]] = [[] for _ in range(m)]
    succs: list[list[int]] = [[] for _ in range(m)]
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    row = [0] * m
    order = list(nx.topological_sort(G))
    for u in order:
        if preds[u]:
            row[u] = 1 + max(row[p] for p in preds[u])
    n_rows = max(row, default=-1) + 1
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    for u in order:
        rows[row[u]].append(u)
    pos = [0.0] * m
    for r in rows:
        for k, u in enumerate(r):
            pos[u] = float(k)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        seq = rows[1:] if down else rows[-2::-1]
        for r in seq:
            keys = {}
            for u in r:
                nb = preds[u] if down else succs[u]
                keys[u] = sum(pos[v] for v in nb) / len(nb) if nb else pos[u]
            r.sort(key=lambda u: keys[u])
            for k, u in enumerate(r):
                pos[u] = float(k)
    x = [0.0] * m
    for r in rows:
        half = (len(r) - 1) / 2
        for k, u in enumerate(r):
            x[u] = k - half
    return Layout(unit_of, members, row, x, edges)
