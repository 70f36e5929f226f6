"""`cgtool report` pages loaded in a real browser: Debian's headless Chromium runs the page's
script, and the DOM it leaves (``--dump-dom``) and a screenshot are checked against what the
input JSON says, computed here without cgtool (networkx and the raw trace events).

Skipped when no Chromium is installed (`apt-get install chromium`; `.ci/run` installs it).
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import re
import zlib
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import networkx as nx
import pytest

from cgtool.cli.main import main

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--window-size=1400,1300", "--virtual-time-budget=5000"]


class _Dom(HTMLParser):
    """Elements of the dumped DOM as (tag, attributes, id of the enclosing svg, first text)."""

    def __init__(self) -> None:
        super().__init__()
        self.els: list[dict] = []
        self.svg: str | None = None
        self.body: dict = {}
        self._open: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("id") in ("graph", "timeline"):
            self.svg = a["id"]
        if tag == "body":
            self.body = a
        el = {"tag": tag, "a": a, "svg": self.svg, "text": []}
        self.els.append(el)
        if tag == "g":
            self._open.append(el)

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None if self.svg else self.svg
        if tag == "g" and self._open:
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            self._open[-1]["text"].append(data)

    def find(self, svg, tag, cls):
        return [e for e in self.els if e["svg"] == svg and e["tag"] == tag and cls in e["a"].get("class", "").split()]


def _browse(page: Path, tmp: Path) -> tuple[_Dom, str, Path]:
    url = page.resolve().as_uri()
    png = tmp / (page.stem + ".png")
    # One browser run: the DOM after the script ran, a screenshot, the console on stderr.
    r = subprocess.run([CHROMIUM, *FLAGS, "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
                        "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    dom = _Dom()
    dom.feed(r.stdout)
    return dom, r.stderr, png


def _png_colours(path: Path) -> int:
    """Distinct byte values in the PNG's decompressed scanlines: a blank page has a handful."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)))


def _report(tmp: Path, *inputs: Path) -> Path:
    out = tmp / "report.html"
    with pytest.raises(SystemExit) as e:
        main(["report", *map(str, inputs), "-o", str(out)])  # not -q: it would stay set for later tests
    assert e.value.code == 0
    return out


def _common(dom: _Dom, stderr: str, png: Path) -> None:
    assert dom.body.get("data-ready") == "1"
    assert dom.body.get("data-errors") == "", dom.body.get("data-errors")
    assert "Uncaught" not in stderr, [ln for ln in stderr.splitlines() if "Uncaught" in ln]
    assert _png_colours(png) > 50  # not blank: text, boxes, colours were painted


def _graph_nodes_shown(dom: _Dom, nodes: list[dict]) -> None:
    """Every node is drawn once, alone or inside a folded box; a drawn node's label starts with
    its ``#node_id`` as `deps` prints it."""
    drawn = dom.find("graph", "g", "node")
    folds = dom.find("graph", "g", "fold")
    assert len(drawn) + sum(int(f["a"]["data-n"]) for f in folds) == len(nodes)
    for el in drawn:
        i = int(el["a"]["data-i"])
        assert "".join(el["text"]).startswith(f"#{nodes[i]['node_id']} ")


def _lanes_per_replay(events: list[dict]) -> int:
    by_corr: dict[int, set] = defaultdict(set)
    for e in events:
        by_corr[e["args"]["correlation"]].add(e["args"]["channel"])
    return len(next(iter(by_corr.values())))


def _fake_pairs(doc: dict) -> set[tuple[int, int]]:
    """Distinct fake serialized pairs (node indices) by brute force over the trace's events."""
    gexp = doc["cgtool"]["graphs"][0]
    G = nx.DiGraph()
    idx = {n["tools_id"]: n["index"] for n in gexp["nodes"]}
    for n in gexp["nodes"]:
        G.add_node(n["index"])
        G.add_edges_from((n["index"], d) for d in n["dependents"])
    lanes = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and "graph node id" in e.get("args", {}):
            a = e["args"]
            lanes[(a["correlation"], a["channel_type"], a["channel"])].append(
                (e["ts"], e["ts"] + e["dur"], idx[a["graph node id"]]))
    out = set()
    for items in lanes.values():
        for sb, eb, b in items:
            cands = [(ea, sa, a) for sa, ea, a in items if a != b and ea <= sb + 0.5 and sa < sb]
            if cands:
                _, _, a = max(cands)
                if not nx.has_path(G, a, b):
                    out.add((a, b))
    return out


def test_forkjoin_mc1_report_in_chromium(data_dir, tmp_path):
    """Fork/join traced with one hardware channel: the graph, the timeline and the fake
    dependencies the channel made, all drawn."""
    case = data_dir / "forkjoin_trace_mc1"
    doc = json.loads(gzip.decompress((case / "trace.json.gz").read_bytes()))
    nodes = doc["cgtool"]["graphs"][0]["nodes"]
    dom, stderr, png = _browse(_report(tmp_path, case / "trace.json.gz"), tmp_path)
    _common(dom, stderr, png)
    _graph_nodes_shown(dom, nodes)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "graph node id" in e.get("args", {})]
    gpu_nodes = [n for n in nodes if n["node_type"] in ("kernel", "memcpy", "memset")]
    assert len(dom.find("timeline", "rect", "ev")) == len(gpu_nodes)  # one replay: every GPU node once
    assert len(dom.find("timeline", "text", "lanelabel")) == _lanes_per_replay(events) == 1
    n_edges = sum(len(n["dependents"]) for n in nodes)
    assert len(dom.find("timeline", "path", "dep")) == n_edges
    fakes = _fake_pairs(doc)
    assert fakes  # one channel serializes the eight independent branches
    drawn = {(int(p["a"]["data-a"]), int(p["a"]["data-b"])) for p in dom.find("graph", "path", "fake")}
    arrows = {(int(p["a"]["data-a"]), int(p["a"]["data-b"])) for p in dom.find("timeline", "path", "fakearrow")}
    assert drawn == arrows == fakes
    # The critical path: a chain of edges from a root to a leaf of the export.
    crit = [int(e["a"]["data-i"]) for e in dom.find("graph", "g", "crit")]
    G = nx.DiGraph((n["index"], d) for n in nodes for d in n["dependents"])
    path = [v for v in nx.topological_sort(G) if v in set(crit)]
    assert len(path) >= 2 and not nodes[path[0]]["dependencies"] and not nodes[path[-1]]["dependents"]
    assert all(G.has_edge(a, b) for a, b in zip(path, path[1:]))


@pytest.mark.parametrize("case", ["resnet50", "gpt2_decode"])
def test_graph_only_reports_in_chromium(data_dir, tmp_path, case):
    """Graph exports without a trace: every node accounted for, never folded into one box, no
    folded box over the limit, and a note instead of a timeline."""
    nodes = json.loads((data_dir / case / "graph.json").read_text())["nodes"]
    dom, stderr, png = _browse(_report(tmp_path, data_dir / case), tmp_path)
    _common(dom, stderr, png)
    _graph_nodes_shown(dom, nodes)
    folds = dom.find("graph", "g", "fold")
    boxes = len(dom.find("graph", "g", "node")) + len(folds)
    assert boxes >= 10 and all(int(f["a"]["data-n"]) <= 24 for f in folds)
    assert not dom.find("timeline", "rect", "ev")
    note = [e for e in dom.els if e["a"].get("id") == "tnone"]
    assert note and "hidden" not in note[0]["a"]


def test_per_rank_folder_report_in_chromium(data_dir, tmp_path):
    """A two-GPU run's folder: one tab per rank, the first rank's graph and timeline drawn, the
    bench distributions plotted (when matplotlib is installed)."""
    case = data_dir / "tp_mlp_2gpu"
    dom, stderr, png = _browse(_report(tmp_path, case), tmp_path)
    _common(dom, stderr, png)
    tabs = [e for e in dom.els if e["tag"] == "button" and "tab" in e["a"].get("class", "").split()]
    ranks = sorted(case.glob("traces/trace.rank*.json.gz"))
    assert len(tabs) == len(ranks) == 2
    doc = json.loads(gzip.decompress(ranks[0].read_bytes()))
    nodes = doc["cgtool"]["graphs"][0]["nodes"]
    _graph_nodes_shown(dom, nodes)
    gpu_nodes = [n for n in nodes if n["node_type"] in ("kernel", "memcpy", "memset")]
    assert len(dom.find("timeline", "rect", "ev")) == len(gpu_nodes)
    bench = json.loads((case / "bench.json").read_text())
    figs = [e for e in dom.els if e["tag"] == "figure"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not figs
    else:
        assert sorted(f["a"]["data-workload"] for f in figs) == sorted(bench["workloads"])


def test_a_selected_node_shows_its_predecessors_and_what_it_waited_behind(data_dir, tmp_path):
    """report.html#node=N: the details of node N, as a click shows them: its predecessors with
    their end times in the replay, and the nodes it waited behind (fake dependencies)."""
    case = data_dir / "forkjoin_trace_mc1"
    doc = json.loads(gzip.decompress((case / "trace.json.gz").read_bytes()))
    nodes = doc["cgtool"]["graphs"][0]["nodes"]
    fakes = _fake_pairs(doc)
    after = max({b for _, b in fakes}, key=lambda b: (len(nodes[b]["dependencies"]), b))
    behind = sorted(nodes[a]["node_id"] for a, b in fakes if b == after)
    page = _report(tmp_path, case / "trace.json.gz")
    r = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", page.resolve().as_uri() + f"#node={after}"],
                       capture_output=True, text=True, timeout=120)
    dom = _Dom()
    dom.feed(r.stdout)
    assert dom.body.get("data-errors") == ""
    m = re.search(r'<aside id="info">(.*?)</aside>', r.stdout, re.S)
    assert m, r.stdout[-500:]
    panel = m.group(1)
    assert f"<h3>#{nodes[after]['node_id']} " in panel
    n_pred = len(nodes[after]["dependencies"])
    assert f"predecessors ({n_pred})" in panel and panel.count("ends at") == n_pred
    waited = panel.split("waited behind (fake dependencies)")[1].split("</ul>")[0]
    assert sorted(int(x) for x in re.findall(r'data-goto="\d+">#(\d+)<', waited)) == behind
    sel = [e for e in dom.find("graph", "g", "sel")]
    assert [int(e["a"]["data-i"]) for e in sel] == [after]


@pytest.mark.parametrize("shape", ["empty", "one", "many_streams"])
def test_every_shape_loads_without_script_errors(tmp_path, shape):
    """The renderer smoke test in the browser: an empty graph, one node, many parallel streams."""
    from cgtool.artifacts.graph import from_edges
    from cgtool.inspect.gather import Gathered, graph_view
    from cgtool.report.html import render_html

    n, edges = {"empty": (0, []), "one": (1, []), "many_streams": (40, [(i, i + 8) for i in range(32)])}[shape]
    g = from_edges(n, edges, names=["_Z1kv"] * n)
    page = tmp_path / f"{shape}.html"
    page.write_text(render_html(Gathered([graph_view(shape, g)])))
    dom, stderr, png = _browse(page, tmp_path)
    assert dom.body.get("data-ready") == "1" and dom.body.get("data-errors") == ""
    assert len(dom.find("graph", "g", "node")) == n and not dom.find("graph", "g", "fold")
    assert len(dom.find("graph", "path", "edge")) == len(edges)


def test_names_from_the_input_are_text_not_markup(tmp_path):
    """A kernel name holding markup (from a hostile or odd export) is shown, never run."""
    from cgtool.artifacts.graph import from_edges
    from cgtool.inspect.gather import Gathered, graph_view
    from cgtool.report.html import render_html

    evil = '</script><img src=x onerror="document.title=1"><!--<script>'
    g = from_edges(2, [(0, 1)], names=[evil, "_Z1kv"])
    page = tmp_path / "evil.html"
    page.write_text(render_html(Gathered([graph_view(evil, g)])))
    dom, stderr, png = _browse(page, tmp_path)
    assert dom.body.get("data-ready") == "1" and dom.body.get("data-errors") == ""
    assert not [e for e in dom.els if e["tag"] == "img"]
    assert len(dom.find("graph", "g", "node")) == 2


def test_record_folder_report_shows_source_lines(data_dir, tmp_path):
    """A `cgtool record` folder: one tab per recorded graph, each node labelled with the source
    line record attributed it to (its ``source.label``), the replay drawn from record's trace."""
    case = data_dir / "record_server"
    (proc,) = case.glob("p*")  # the one recorded process of the program
    index = json.loads(gzip.decompress((proc / "index.json.gz").read_bytes()))
    first = json.loads(gzip.decompress((proc / "graph_000.json.gz").read_bytes()))  # index["graphs"][0], stored gzipped
    dom, stderr, png = _browse(_report(tmp_path, case), tmp_path)
    _common(dom, stderr, png)
    tabs = [e for e in dom.els if e["tag"] == "button" and "tab" in e["a"].get("class", "").split()]
    assert len(tabs) == len(index["graphs"])
    nodes, extras = first["nodes"], first["cgtool"]["nodes"]
    _graph_nodes_shown(dom, nodes)
    drawn = dom.find("graph", "g", "node")
    assert drawn
    for el in drawn:
        i = int(el["a"]["data-i"])
        label = extras[i]["source"]["label"]
        assert label[:31] in "".join(el["text"])
    gpu = [n for n in nodes if n["node_type"] in ("kernel", "memcpy", "memset")]
    assert len(dom.find("timeline", "rect", "ev")) == len(gpu)
