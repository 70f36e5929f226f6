import io
import json

import networkx as nx
import pytest

from cgtool.inspect.diff import Change, diff, failed_conditions
from cgtool.artifacts.graph import GraphData, NodeType, from_edges
from cgtool.inspect.topo import analyze
from cgtool.report.dot import chains, esc, render_dot

GOLDEN = __import__("pathlib").Path(__file__).parent / "golden"


def _nx(g):
    G = nx.DiGraph()
    G.add_nodes_from(range(len(g.nodes)))
    G.add_edges_from(g.edges())
    return G


@pytest.mark.parametrize("case", ["chain", "forkjoin", "transformer_block", "resnet50", "gpt2_decode"])
def test_topology_agrees_with_networkx(data_dir, case):
    g = GraphData.load(data_dir / case / "graph.json")
    t = analyze(g)
    G = _nx(g)
    assert t.depth == len(nx.dag_longest_path(G))
    assert len(t.critical_path) == t.depth
    assert all(G.has_edge(a, b) for a, b in zip(t.critical_path, t.critical_path[1:]))
    red = nx.transitive_reduction(G)
    assert sorted(t.redundant_edges) == sorted(set(G.edges()) - set(red.edges()))
    assert t.components == nx.number_weakly_connected_components(G)
    assert sum(t.level_widths) == len(g.nodes)
    assert t.max_concurrency is not None and t.max_concurrency >= t.max_level_width
    js = t.to_json()
    assert {"nodes", "edges", "depth", "max_level_width", "redundant_edges", "critical_path"} <= set(js)
    ids = {n.tools_id for n in g.nodes}
    assert set(js["critical_path"]) <= ids


def test_forkjoin_shape(data_dir):
    t = analyze(GraphData.load(data_dir / "forkjoin" / "graph.json"))
    assert (t.nodes, t.edges, t.depth, t.max_level_width, t.max_concurrency) == (18, 17, 4, 8, 8)
    assert len(t.roots) == 8 and len(t.joins) == 1


def test_max_concurrency_is_exact_where_levels_underestimate():
    # a0->a1->a2, a1->b0->b1->b2, and a lone c0. Levels {a0,c0},{a1},{a2,b0},{b1},{b2}: widest 2.
    # But a2, b2 and c0 may all run at once: the largest antichain has 3 nodes.
    g = from_edges(7, [(0, 1), (1, 2), (1, 3), (3, 4), (4, 5)])
    t = analyze(g)
    assert t.max_level_width == 2
    assert t.max_concurrency == 3


from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 11))
    pairs = [(u, v) for v in range(n) for u in range(v)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=3 * n, unique=True)) if pairs else []
    return n, edges


@settings(max_examples=200, deadline=None)
@given(_dags())
def test_max_concurrency_is_the_largest_antichain_by_brute_force(dag):
    """The width (Kuhn's matching over bitsets) against the largest antichain found by trying every
    set of nodes, largest first, on random DAGs: no two nodes of it joined by a path (networkx);
    and the components and edges (a walk over the edges) against networkx's count."""
    from itertools import combinations

    n, edges = dag
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(edges)
    closure = nx.transitive_closure_dag(G)
    want = next(k for k in range(n, 0, -1) for c in combinations(range(n), k)
                if not any(closure.has_edge(a, b) or closure.has_edge(b, a) for a, b in combinations(c, 2)))
    t = analyze(from_edges(n, edges))
    assert t.max_concurrency == want
    assert (t.components, t.edges) == (nx.number_weakly_connected_components(G), G.number_of_edges())


def test_measured_critical_path(data_dir):
    g = GraphData.load(data_dir / "forkjoin" / "graph.json")
    durs = {n.index: 100.0 if n.index % 2 else 1.0 for n in g.nodes}
    t = analyze(g, durs)
    best = max(sum(durs[v] for v in p) for p in nx.all_simple_paths(_nx(g), t.critical_path[0], t.critical_path[-1]))
    assert t.critical_path_us == pytest.approx(best)


def test_diff_categories(data_dir):
    a = GraphData.load(data_dir / "forkjoin" / "graph.json")
    b = GraphData.load(data_dir / "transformer_block" / "graph.json")
    d = diff(a, b)
    by = d.by_change()
    assert set(by) == {c.value for c in Change}
    assert by["added"] and by["removed"]
    assert failed_conditions(d, ["any"]) == ["any"]
    assert failed_conditions(diff(a, a), ["any", "kernels-increased"]) == []
    assert not diff(a, a).changed()
    assert "depth-increased" in failed_conditions(d, ["depth-increased"])  # 4 -> 6


def test_diff_unknown_condition_is_a_usage_error(data_dir):
    from cgtool.errors import UsageError

    a = GraphData.load(data_dir / "forkjoin" / "graph.json")
    with pytest.raises(UsageError, match="kernels-increased"):
        failed_conditions(diff(a, a), ["more-kernels"])


def test_escaping():
    assert esc('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def _render(g, **kw):
    s = io.StringIO()
    render_dot(g, s, topo=analyze(g), title="t", **kw)
    return s.getvalue()


def test_golden_dot_forkjoin(data_dir):
    out = _render(GraphData.load(data_dir / "forkjoin" / "graph.json"))
    assert out == (GOLDEN / "forkjoin.dot").read_text()


def test_chains_collapse_and_expand(data_dir):
    """A straight line of 400 nodes: its ends stay, the inside folds into pieces of at most 24
    (never the whole graph into one box); every node is in exactly one box."""
    import re

    g = GraphData.load(data_dir / "chain" / "graph.json")
    folded = _render(g)
    pieces = [int(n) for n in re.findall(r'label="(\d+) nodes #', folded)]
    singles = re.findall(r'label="#\d+ ', folded)
    assert len(pieces) >= 400 // 24 and max(pieces) <= 24 and sum(pieces) + len(singles) == 400
    assert len(singles) == 2 and folded.count("->") == len(pieces) + 1  # one chain of boxes
    full = _render(g, collapse=0)
    assert full.count("->") == 399
    assert len(chains(g, 4)) == 1


@pytest.mark.parametrize("shape", ["empty", "one", "many_streams", "all_types"])
def test_every_renderer_on_every_shape(shape):
    if shape == "empty":
        g = from_edges(0, [])
    elif shape == "one":
        g = from_edges(1, [])
    elif shape == "many_streams":
        g = from_edges(40, [(i, i + 8) for i in range(32)])
    else:
        types = list(NodeType)
        g = from_edges(len(types), [(i, i + 1) for i in range(len(types) - 1)], types=types,
                       names=['void k<int, "x">(int)'] * len(types))
    dot = _render(g, lanes={i: f"channel {i % 3}" for i in range(len(g.nodes))})
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    from rich.console import Console

    from cgtool.report.tables import topo_table

    con = Console(file=io.StringIO(), width=100, color_system=None)
    topo_table(con, g, analyze(g))
    assert "nodes" in con.file.getvalue()
    json.dumps(analyze(g).to_json())
