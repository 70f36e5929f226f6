"""Source lines from `cgtool record` exports wherever a node is named: topo's critical path, deps'
fake dependencies, diff's match by line (issue 13)."""

import gzip
import io
import json
from collections import Counter
from pathlib import Path

from rich.console import Console

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.names import short_name
from cgtool.inspect.diff import diff
from cgtool.inspect.files import deps_of_file
from cgtool.report.tables import deps_report


def _doc(p: Path):
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _server_graph(data_dir: Path, k: int) -> Path:
    """Graph ``k`` of the recorded server process (record_server/p<PID>/graph_00k.json.gz)."""
    (path,) = (data_dir / "record_server").glob(f"p*/graph_00{k}.json.gz")
    return path


def test_topo_names_the_lines_on_the_critical_path(run_cli, data_dir):
    doc = _doc(_server_graph(data_dir, 0))
    labels = {n["source"]["label"] for n in doc["cgtool"]["nodes"] if n.get("source")}
    rc, out, err = run_cli("topo", _server_graph(data_dir, 0), env={"COLUMNS": "200"})
    assert rc == 0, err
    assert "source lines" in out
    shown = [lbl for lbl in labels if lbl in out]
    assert shown and all("server_runner.py:" in lbl for lbl in shown)


def test_deps_names_both_lines_of_a_fake_dependency(data_dir):
    run = deps_of_file(data_dir / "forkjoin_trace_mc1" / "trace.json.gz")
    fakes = run.result.fakes()[:3]
    sources = {t: f"prog.py:{100 + (t & 0xFFFF)} branch" for f in fakes for t in (f.before, f.after)}
    buf = io.StringIO()
    deps_report(Console(file=buf, width=200), run.result, top=3, sources=sources)
    for f in fakes:
        assert f"at {sources[f.before]}" in buf.getvalue() and f"at {sources[f.after]}" in buf.getvalue()


def test_diff_matches_nodes_by_source_line(data_dir):
    a_doc, b_doc = (_doc(_server_graph(data_dir, k)) for k in (0, 3))

    def by_line(doc):  # independently: nodes per (line, kernel) straight from the JSON
        c = Counter()
        for n, extra in zip(doc["nodes"], doc["cgtool"]["nodes"]):
            if extra.get("source"):
                c[f"{extra['source']['label']} {short_name(n['kernel_name'], 1 << 30) if n['kernel_name'] else n['node_type']}"] += 1
        return c

    d = diff(GraphData.from_json(a_doc), GraphData.from_json(b_doc))
    rows = {r.key: (r.a, r.b) for r in d.rows if r.section == "source"}
    ca, cb = by_line(a_doc), by_line(b_doc)
    assert rows == {k: (ca.get(k, 0), cb.get(k, 0)) for k in set(ca) | set(cb)}
