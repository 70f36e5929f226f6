"""The detection-quality table of docs/deps.md ("How sure"), one test per CUPTI recording: the exact
answer is computed here from the raw CUPTI records (records.json.gz) and networkx reachability, the
inferred one is cgtool's on the same trace with its channels and node ids removed
(scripts/detection_quality.py strips it), and the recall and precision by waited time must be the
table's. The words `deps` prints about its inference are checked against the same table."""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
DOC = ROOT / "docs" / "deps.md"
sys.path.insert(0, str(ROOT / "scripts"))

import detection_quality as dq  # noqa: E402

TRACES = dq.cupti_traces([DATA])
TOL_NS = 500
MIN_WAIT_NS = 1000


def _gz(p: Path):
    return json.loads(gzip.decompress(p.read_bytes()))


def doc_table() -> dict[str, list[str]]:
    """The rows of the table under '## How sure' in docs/deps.md, by trace."""
    text = DOC.read_text()
    part = text[text.index("## How sure"):]
    rows = {}
    for line in part.splitlines():
        if line.startswith("| ") and "trace.json.gz" in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def truth_from_records(case: Path, trace_doc: dict) -> dict[tuple[int, int], float]:
    """(correlation, tools id) of B -> µs waited, for every fake serialization on a hardware channel
    that waited at least 1 µs: brute force over the raw records, networkx for paths and readiness."""
    recs = [r for r in _gz(case / "records.json.gz") if r["kind"] != "launch" and r.get("graph_id")]
    G = nx.DiGraph()
    for g in trace_doc["cgtool"]["graphs"]:
        for n in g["nodes"]:
            G.add_node(n["tools_id"], gpu=n["node_type"] in ("kernel", "memcpy", "memset"))
            for d in n["dependents"]:
                G.add_edge(n["tools_id"], g["nodes"][d]["tools_id"])
    order = list(nx.topological_sort(G))
    by_replay = defaultdict(list)
    for r in recs:
        by_replay[r["correlation"]].append(r)
    out = {}
    for corr, items in by_replay.items():
        end = {r["graph_node_id"]: r["end"] for r in items}
        t0 = min(r["start"] for r in items)
        ready, finish = {}, {}
        for v in order:
            preds = list(G.predecessors(v))
            ready[v] = max((finish[u] for u in preds), default=t0)
            finish[v] = end.get(v, ready[v])
        lanes = defaultdict(list)
        for r in items:
            lanes[(r["channel_type"], r["channel"])].append(r)
        for lane in lanes.values():
            for b in lane:
                cands = [a for a in lane if a is not b and a["end"] <= b["start"] + TOL_NS and a["start"] < b["start"]]
                if not cands:
                    continue
                a = max(cands, key=lambda a: (a["end"], a["start"]))
                if nx.has_path(G, a["graph_node_id"], b["graph_node_id"]):
                    continue
                wait = b["start"] - ready[b["graph_node_id"]]
                if wait >= MIN_WAIT_NS:
                    out[(corr, b["graph_node_id"])] = wait / 1000
    return out


def _inferred(path: Path, keep_setting: bool):
    """cgtool on the stripped trace: (found, cannot tell) as (correlation, tools id) -> µs, joined to
    the original events by their position in the file."""
    doc = _gz(path)
    st, inf = dq._inferred(doc, path, 0.5, keep_setting)
    found, cannot = dq._found(st, inf)
    events = doc["traceEvents"]

    def key(seq: int) -> tuple[int, int]:
        a = events[seq]["args"]
        return (a["correlation"], a["graph node id"])
    return {key(s): w for s, w in found.items()}, {key(s): w for s, w in cannot.items()}, inf


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _rp(truth, found):
    t, f = sum(truth.values()), sum(found.values())
    hit = sum(w for k, w in truth.items() if k in found)
    ft = sum(w for k, w in found.items() if k in truth)
    return (hit / t if t else None), (ft / f if f else None)


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(DATA)) for p in TRACES])
def test_detection_quality_row(path):
    rows = doc_table()
    name = str(path.relative_to(DATA))
    assert name in rows, f"docs/deps.md's table lacks {name}: run scripts/detection_quality.py"
    row = rows[name]
    doc = _gz(path)
    truth = truth_from_records(path.parent, doc)
    replays = len({r["correlation"] for r in _gz(path.parent / "records.json.gz") if r["kind"] == "launch"})
    found, cannot, inf = _inferred(path, keep_setting=False)
    recall, precision = _rp(truth, found)
    fake_all, truth_n = re.fullmatch(r"(\d+) \((\d+)\)", row[3]).groups()
    assert int(truth_n) == len(truth)
    assert row[4] == f"{sum(truth.values()) / replays:.1f}"
    assert row[5] == f"{sum(found.values()) / replays:.1f}"
    assert row[7] == _pct(recall) and row[8] == _pct(precision)
    found2, _, inf2 = _inferred(path, keep_setting=True)
    r2, p2 = _rp(truth, found2)
    assert row[9] == f"{_pct(r2)} / {_pct(p2)}"
    # where the trace records one connection, every stream shared channel 0: exact again
    if (doc["cgtool"].get("CUDA_DEVICE_MAX_CONNECTIONS") or "") == "1" and truth:
        assert r2 == p2 == 1.0
    # never "fake 0" without channels: unknown, and said so
    assert inf.figures().fake is None and inf.to_json()["summary"]["fake"] is None


def test_the_wording_follows_the_table():
    """What `deps` says about its inference (waits.DETECTION_QUALITY) quotes the pooled figures of the
    recordings, computed here from the raw records: the share of the time fake serializations waited
    that timing alone found at 1 and 2 connections, the share it left under "cannot tell", and the
    most it reported at the default setting."""
    from cgtool.inspect.analyzers.waits import DETECTION_QUALITY

    t_all = hit = cannot_hit = 0.0
    default_found = []
    for path in TRACES:
        doc = _gz(path)
        setting = doc["cgtool"].get("CUDA_DEVICE_MAX_CONNECTIONS")
        replays = len({r["correlation"] for r in _gz(path.parent / "records.json.gz") if r["kind"] == "launch"})
        found, cannot, _ = _inferred(path, keep_setting=False)
        if setting in ("1", "2"):
            truth = truth_from_records(path.parent, doc)
            t_all += sum(truth.values())
            hit += sum(w for k, w in truth.items() if k in found)
            cannot_hit += sum(w for k, w in truth.items() if k in cannot)
        elif not setting:
            default_found.append(sum(found.values()) / replays)
    assert f"{100 * hit / t_all:.0f}% of the time" in DETECTION_QUALITY
    assert f"{100 * cannot_hit / t_all:.0f}% under 'cannot tell'" in DETECTION_QUALITY
    assert f"{max(default_found):.1f} µs per replay" in DETECTION_QUALITY
    assert DETECTION_QUALITY in DOC.read_text().replace("\n", " ")
