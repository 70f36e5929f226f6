"""Every form of the reachability index against networkx: the chain cover (with and without its
numpy form), ancestor bitsets and the plain search, each forced by its size limits, on random DAGs
whose node indices are not in topological order; and the topological order itself."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest

from cgtool.artifacts.graph import from_edges
from cgtool.errors import InvalidInputError
from cgtool.inspect import reach
from cgtool.inspect.reach import Reachability, topological_order


def random_dag(seed: int, n: int | None = None):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    n = rng.randint(2, 50) if n is None else n
    p = rng.choice([0.03, 0.1, 0.3])
    edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < p]
    perm = list(range(n))
    rng.shuffle(perm)
    g = from_edges(n, [(perm[a], perm[b]) for a, b in edges])
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(g.edges())
    return g, G


KINDS = {
    "chains": {},
    "chains without arrays": {"ARRAY_MAX_ENTRIES": 0},
    "bitsets": {"DENSE_ENTRIES_PER_NODE": 0, "DENSE_MIN_ENTRIES": 0},
    "search": {"DENSE_ENTRIES_PER_NODE": 0, "DENSE_MIN_ENTRIES": 0, "BITSET_MAX_BYTES": -1},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(8))
def test_every_index_answers_as_networkx(monkeypatch: pytest.MonkeyPatch, kind: str, seed: int) -> None:
    for name, value in KINDS[kind].items():
        monkeypatch.setattr(reach, name, value)
    g, G = random_dag(seed)
    r = Reachability(g)
    assert r.kind == kind.split()[0]
    assert ("too wide for a reachability index" in r.note) == (kind == "search")
    n = len(g.nodes)
    desc = {a: nx.descendants(G, a) for a in range(n)}
    want = np.array([[b in desc[a] for b in range(n)] for a in range(n)])
    got = np.array([[r.reachable(a, b) for b in range(n)] for a in range(n)])
    assert (got == want).all()
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    many = r.reachable_many(a.ravel(), b.ravel())
    assert many.dtype == bool and (many.reshape(n, n) == want).all()
    if kind == "chains":
        anc, chain, pos = r.arrays()
        assert anc.shape == (n, r.k) and list(chain) == r.chain and list(pos) == r.pos
        # a chain cover: each chain is a path of the graph, its positions 0, 1, 2, ... in order
        for c in range(r.k):
            members = sorted((v for v in range(n) if r.chain[v] == c), key=lambda v: r.pos[v])
            assert [r.pos[v] for v in members] == list(range(len(members)))
            assert all(nx.has_path(G, u, v) for u, v in zip(members, members[1:]))
    else:
        with pytest.raises(ValueError):
            r.arrays()


def test_the_chain_index_gives_way_to_bitsets_past_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    g, G = random_dag(3, n=40)
    monkeypatch.setattr(reach, "DENSE_MIN_ENTRIES", 0)
    monkeypatch.setattr(reach, "DENSE_ENTRIES_PER_NODE", 1)  # fewer entries than the chains need
    r = Reachability(g)
    assert r.kind == "bitsets" and r.chain == [] and r.k == 0
    assert all(r.reachable(a, b) == (b in nx.descendants(G, a)) for a in range(40) for b in range(40))


def test_stream_shaped_graphs_take_one_chain_per_stream() -> None:
    """Four independent streams of five nodes each, joined at the end: four chains, plus the join."""
    edges = [(s * 5 + i, s * 5 + i + 1) for s in range(4) for i in range(4)] + [(s * 5 + 4, 20) for s in range(4)]
    r = Reachability(from_edges(21, edges))
    assert r.kind == "chains" and r.k == 4


@pytest.mark.parametrize("seed", range(6))
def test_topological_order_is_one(seed: int) -> None:
    g, G = random_dag(seed)
    order = topological_order(g)
    assert sorted(order) == list(range(len(g.nodes)))
    where = {v: i for i, v in enumerate(order)}
    assert all(where[u] < where[v] for u, v in G.edges)


def test_a_cycle_names_the_nodes_left_on_it() -> None:
    g = from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 1), (0, 4)])  # 1 -> 2 -> 3 -> 1
    with pytest.raises(InvalidInputError, match=r"cycle through 3 nodes \(e\.g\. indices \[1, 2, 3\]\)"):
        Reachability(g)


def _entries(g) -> int:  # type: ignore[no-untyped-def]
    """How many entries the chain index of ``g`` holds (one per node and chain it has an ancestor on)."""
    return sum(len(a) for a in Reachability(g)._anc)


def test_the_chain_budget_is_a_limit_reached_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    g, _ = random_dag(5, n=30)
    total, n = _entries(g), len(g.nodes)
    for per_node, least, kind in ((0, total, "chains"), (0, total - 1, "bitsets"),
                                  (-(-total // n), 0, "chains"), (total // n - 1, 0, "bitsets")):
        monkeypatch.setattr(reach, "DENSE_ENTRIES_PER_NODE", per_node)
        monkeypatch.setattr(reach, "DENSE_MIN_ENTRIES", least)
        assert Reachability(g).kind == kind, (per_node, least)


@pytest.mark.parametrize("edges, n", [([(i, i + 1) for i in range(9)], 10),  # one chain
                                      ([(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 5)], 6)])
def test_the_array_form_up_to_its_limit(monkeypatch: pytest.MonkeyPatch, edges: list[tuple[int, int]], n: int) -> None:
    g = from_edges(n, edges)
    k = Reachability(g).k
    monkeypatch.setattr(reach, "ARRAY_MAX_ENTRIES", n * k)
    anc, _, _ = Reachability(g).arrays()
    assert anc.shape == (n, k)
    monkeypatch.setattr(reach, "ARRAY_MAX_ENTRIES", n * k - 1)
    with pytest.raises(ValueError):
        Reachability(g).arrays()
