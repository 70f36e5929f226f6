"""`cgtool report` and the shared folding without a browser: what is folded, what the page holds,
the inputs it takes, the step summaries of `deps` and `diff`. Expected values come from the
input JSON (networkx, raw trace events), not from the code under test."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict

import networkx as nx
import pytest

from cgtool.artifacts.graph import GraphData, from_edges
from cgtool.report.fold import MAX_FOLD, fold, source_of

GRAPHS = ["chain/graph.json", "forkjoin/graph.json", "resnet50/graph.json", "gpt2_decode/graph.json",
          "transformer_block/graph.json", "train_step/graph-bwd0.json"]


def _nx(doc):
    G = nx.DiGraph()
    G.add_nodes_from(n["index"] for n in doc["nodes"])
    G.add_edges_from((n["index"], d) for n in doc["nodes"] for d in n["dependents"])
    return G


@pytest.mark.parametrize("path", GRAPHS)
def test_folding_keeps_forks_joins_and_chain_ends(data_dir, path):
    doc = json.loads((data_dir / path).read_text())
    G = _nx(doc)
    pieces = fold(GraphData.load(data_dir / path)).pieces
    inside = [i for p in pieces for i in p]
    assert len(inside) == len(set(inside))  # a node is in one piece at most
    for p in pieces:
        assert 4 <= len(p) <= MAX_FOLD
        assert all(G.has_edge(a, b) for a, b in zip(p, p[1:]))  # a piece is a path of the graph
        for i in p:  # a folded node has one way in and one way out, and so do its neighbours
            assert G.in_degree(i) == 1 and G.out_degree(i) == 1
            (u,), (v,) = G.predecessors(i), G.successors(i)
            assert G.out_degree(u) == 1 and G.in_degree(v) == 1
    visible = G.number_of_nodes() - len(inside) + len(pieces)
    assert visible >= min(G.number_of_nodes(), 3)  # never the whole graph in one box


def test_a_straight_line_is_many_boxes():
    g = from_edges(1000, [(i, i + 1) for i in range(999)])
    pieces = fold(g).pieces
    assert len(pieces) == -(-998 // MAX_FOLD) and sum(map(len, pieces)) == 998
    assert pieces[0][0] == 1 and pieces[-1][-1] == 998  # the ends stay visible


def test_source_lines_from_record_extras():
    assert source_of({"source": "model.py:12"}) == "model.py:12"
    assert source_of({"source": {"file": "/x/model.py", "line": 12, "function": "f"}}) == "/x/model.py:12"
    assert source_of({"file": "/x/model.py", "line": 3}) == "/x/model.py:3"
    assert source_of({"grid": [1, 1, 1]}) is None and source_of({}) is None


def _with_sources(data_dir, tmp_path):
    doc = json.loads((data_dir / "forkjoin" / "graph.json").read_text())
    for k, extra in enumerate(doc["cgtool"]["nodes"]):
        extra["source"] = {"file": f"/home/u/proj/model_{k}.py", "line": 100 + k}
    p = tmp_path / "graph.json"
    p.write_text(json.dumps(doc))
    return p, doc


def _dot(path, trace=None):
    """`cgtool dot PATH [--trace TRACE]` as the command builds it: the analysis in inspect, the DOT in report."""
    from cgtool.inspect.files import graph_views
    from cgtool.report.dot import dot_of_view

    _, (view,), _ = graph_views(path, trace, command="dot", one=True)
    return dot_of_view(view, title=str(path))


def test_dot_labels_carry_node_id_and_source_line(data_dir, tmp_path):
    p, doc = _with_sources(data_dir, tmp_path)
    text = _dot(p)
    for n in doc["nodes"]:
        assert re.search(rf'n{n["index"]} \[[^\]]*label="#{n["node_id"]} [^"]*\\nmodel_{n["index"]}\.py:{100 + n["index"]}', text)
    assert "legend [" in text
    plain = _dot(data_dir / "forkjoin" / "graph.json")  # no record extras: no source line, no error
    assert ".py:" not in plain and plain.count('label="#') == len(doc["nodes"])


def _fake_pairs(doc):
    gexp = doc["cgtool"]["graphs"][0]
    idx = {n["tools_id"]: n["index"] for n in gexp["nodes"]}
    G = _nx(gexp)
    lanes = defaultdict(list)
    for e in doc["traceEvents"]:
        a = e.get("args", {})
        if e.get("ph") == "X" and "graph node id" in a:
            lanes[(a["correlation"], a["channel_type"], a["channel"])].append((e["ts"], e["ts"] + e["dur"], idx[a["graph node id"]]))
    out = set()
    for items in lanes.values():
        for sb, _, b in items:
            c = [(ea, sa, a) for sa, ea, a in items if a != b and ea <= sb + 0.5 and sa < sb]
            if c and not nx.has_path(G, max(c)[2], b):
                out.add((max(c)[2], b))
    return out


def test_dot_with_trace_draws_fake_dependencies_and_durations(data_dir):
    path = data_dir / "forkjoin_trace_mc1" / "trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    text = _dot(path)
    fakes = {(int(a), int(b)) for a, b in re.findall(r"n(\d+) -> n(\d+) \[style=dashed", text)}
    assert fakes == _fake_pairs(doc) and fakes
    # every kernel's label ends with its measured mean duration
    durs = defaultdict(list)
    idx = {n["tools_id"]: n["index"] for n in doc["cgtool"]["graphs"][0]["nodes"]}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and "graph node id" in e.get("args", {}):
            durs[idx[e["args"]["graph node id"]]].append(e["dur"])
    for i, ds in durs.items():
        mean = sum(ds) / len(ds)
        assert re.search(rf'n{i} \[[^\]]*label="[^"]*\\n{mean:.1f} µs"', text), (i, mean)


def test_report_page_is_self_contained_and_holds_the_data(data_dir, tmp_path, run_cli):
    p, doc = _with_sources(data_dir, tmp_path)
    out = tmp_path / "r.html"
    rc, _, err = run_cli("report", p, data_dir / "bench" / "h200_samples.json", "-o", out)
    assert rc == 0, err
    page = out.read_text()
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"(src|href)=[\"']?https?:", page)  # nothing fetched at view time
    data = json.loads(re.search(r'<script type="application/json" id=cgdata>(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))
    sec = data["sections"][0]
    assert sec["id"] == [n["node_id"] for n in doc["nodes"]]
    assert sec["src"] == [f"/home/u/proj/model_{k}.py:{100 + k}" for k in range(len(doc["nodes"]))]
    assert sorted(i for m in sec["units"]["members"] for i in m) == list(range(len(doc["nodes"])))
    bench = json.loads((data_dir / "bench" / "h200_samples.json").read_text())
    pytest.importorskip("matplotlib")
    assert page.count("<figure class=plot") == sum(1 for w in bench["workloads"].values() if w.get("gpu_us"))


def test_report_with_baseline_shows_verdicts(data_dir, tmp_path, run_cli):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    f = data_dir / "tp_mlp_2gpu" / "bench.json"
    rc, _, err = run_cli("report", f, "--baseline", f, "-o", out)
    assert rc == 0, err
    page = out.read_text()
    n = len(json.loads(f.read_text())["workloads"])
    assert page.count("unchanged: median +0.0%") == 2 * n  # table and plot title, per workload
    assert page.count(">baseline<") == n  # the baseline's samples plotted beside each


def test_per_rank_folder_gives_one_section_per_rank(data_dir):
    from cgtool.inspect.gather import gather

    d = gather([data_dir / "tp_mlp_2gpu"])
    assert [v.rank for v in d.graphs] == [0, 1]
    for v in d.graphs:
        assert v.deps is not None and v.replay is not None
        gpu = [n for n in v.graph.nodes if n.node_type.runs_on_gpu]
        assert sorted(v.replay.node.tolist()) == sorted(n.index for n in gpu)
    assert len(d.bench) == 1


def test_profiler_trace_beside_its_export(data_dir):
    """torch.profiler trace (no graph ids) + the export: matched by launch, one replay drawn."""
    from cgtool.inspect.gather import gather

    d = gather([data_dir / "chain_kineto"])
    (v,) = d.graphs
    raw = json.loads(gzip.decompress((data_dir / "chain_kineto" / "trace.json.gz").read_bytes()))
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    per_launch = defaultdict(int)
    for e in kernels:
        per_launch[e["args"]["correlation"]] += 1
    assert v.replay is not None and len(v.replay.node) in set(per_launch.values())
    assert len(v.durations or {}) == len(v.graph.nodes)


def test_report_errors_are_clear(data_dir, tmp_path, run_cli):
    out = tmp_path / "r.html"
    out.write_text("x")
    rc, _, err = run_cli("report", data_dir / "forkjoin" / "graph.json", "-o", out)
    assert rc == 2 and "--force" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    rc, _, err = run_cli("report", bad, "-o", tmp_path / "o.html")
    assert rc == 4 and "not a graph export" in err
    rc, _, err = run_cli("report", tmp_path / "missing", "-o", tmp_path / "o.html")
    assert rc == 2 and "No such file" in err
    assert "Traceback" not in err


def test_step_summaries_for_deps_and_diff_link_the_report(data_dir, tmp_path, run_cli, monkeypatch):
    summary = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "CGTOOL_REPORT_URL": "https://ci.example/artifacts/report.html"}
    trace = data_dir / "forkjoin_trace_mc1" / "trace.json.gz"
    rc, _, err = run_cli("deps", trace, env=env)
    assert rc == 0, err
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    text = summary.read_text()
    n_fake = len(_fake_pairs(doc))
    assert "### cgtool deps" in text and "(https://ci.example/artifacts/report.html)" in text
    assert text.count("\n| #") == min(5, n_fake)
    rc, _, err = run_cli("diff", data_dir / "chain" / "graph.json", data_dir / "forkjoin" / "graph.json", env=env)
    assert rc == 0, err
    text = summary.read_text()
    assert "### cgtool diff" in text and text.count("report.html)") == 2


def test_a_trace_of_another_instantiation_is_noted_not_fatal(data_dir, tmp_path):
    """A profiler trace beside an export it does not match: the graph is shown alone, with a note."""
    from cgtool.inspect.gather import gather

    (tmp_path / "graph.json").write_bytes((data_dir / "forkjoin" / "graph.json").read_bytes())
    (tmp_path / "trace.json.gz").write_bytes((data_dir / "chain_kineto" / "trace.json.gz").read_bytes())
    d = gather([tmp_path])
    (v,) = d.graphs
    assert v.replay is None and v.durations is None
    assert any("trace.json.gz: not used" in n for n in d.notes)


def test_without_matplotlib_the_report_names_the_extra(data_dir, tmp_path, run_cli, monkeypatch):
    import cgtool.report.plots as plots
    from cgtool.cli._common import err as err_console

    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    monkeypatch.setattr(err_console, "quiet", False)  # an earlier test's `-q` leaves it set
    out = tmp_path / "r.html"
    rc, _, err = run_cli("report", data_dir / "tp_mlp_2gpu" / "bench.json", "-o", out)
    assert rc == 0 and "pip install 'cgtool[report]'" in err
    page = out.read_text()
    assert "<figure" not in page and "cgtool[report]" in page
    assert page.count("sample_workloads/tp_mlp.py [rank") == 2  # the table is there all the same


def test_record_style_sources_label_and_detail(data_dir, tmp_path):
    """`cgtool record` writes source as a dict with its own short label, the function and the code."""
    from cgtool.report.fold import source_detail, source_label

    rec = {"file": "tests/programs/server_runner.py", "line": 22, "function": "forward", "op": "layer_norm",
           "label": "server_runner.py:22 layer_norm", "code": "h = self.norm(x)"}
    assert source_label({"source": rec}) == "server_runner.py:22 layer_norm"
    assert source_detail({"source": rec}) == "tests/programs/server_runner.py:22 in forward: h = self.norm(x)"
    doc = json.loads((data_dir / "forkjoin" / "graph.json").read_text())
    doc["cgtool"]["nodes"][3]["source"] = rec
    p = tmp_path / "g.json"
    p.write_text(json.dumps(doc))
    text = _dot(p)
    node3 = re.search(r"  n3 \[[^\n]*", text).group(0)
    assert "\\nserver_runner.py:22 layer_norm" in node3 and "in forward: h = self.norm(x)" in node3
    assert text.count("layer_norm") == 1  # only node 3 has a source


def test_a_graph_the_trace_embeds_but_never_replayed_is_shown_untimed(data_dir, tmp_path):
    from cgtool.inspect.gather import gather

    doc = json.loads(gzip.decompress((data_dir / "forkjoin_trace_mc1" / "trace.json.gz").read_bytes()))
    extra = json.loads((data_dir / "chain" / "graph.json").read_text())
    extra["exec_graph_id"] = 99
    for n in extra["nodes"]:
        n["graph_id"], n["tools_id"] = 99, (99 << 32) | n["node_id"]
    doc["cgtool"]["graphs"].append(extra)
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    timed, untimed = gather([p]).graphs
    assert timed.replay is not None and len(timed.replay.node) == len(timed.graph.nodes)
    assert untimed.graph.exec_graph_id == 99 and untimed.replay is None and untimed.durations is None
