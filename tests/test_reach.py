import random

import networkx as nx
import pytest

from cgtool.errors import InvalidInputError
from cgtool.artifacts.graph import GraphData, from_edges
from cgtool.inspect.reach import Reachability


def _nx(g):
    G = nx.DiGraph()
    G.add_nodes_from(range(len(g.nodes)))
    G.add_edges_from(g.edges())
    return G


def _check_all_pairs(g):
    r = Reachability(g)
    G = _nx(g)
    closure = {v: nx.descendants(G, v) for v in G}
    for a in range(len(g.nodes)):
        for b in range(len(g.nodes)):
            assert r.reachable(a, b) == (b in closure[a]), (a, b)


@pytest.mark.parametrize("case", ["forkjoin", "transformer_block", "resnet50"])
def test_reachability_matches_networkx_on_real_graphs(data_dir, case):
    _check_all_pairs(GraphData.load(data_dir / case / "graph.json"))


@pytest.mark.parametrize("seed", range(12))
def test_reachability_matches_networkx_on_random_dags(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    p = rng.choice([0.02, 0.08, 0.3])
    edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < p]
    perm = list(range(n))
    rng.shuffle(perm)  # node indices not in topological order
    g = from_edges(n, [(perm[a], perm[b]) for a, b in edges])
    _check_all_pairs(g)


def test_chain_cover_is_small_for_stream_shaped_graphs(data_dir):
    g = GraphData.load(data_dir / "forkjoin" / "graph.json")
    assert Reachability(g).k == 8  # one chain per branch


def test_cycles_are_refused_with_a_way_to_find_them():
    g = from_edges(3, [(0, 1), (1, 2), (2, 1)])
    with pytest.raises(InvalidInputError, match="cycle"):
        Reachability(g)
