"""The detection-quality table of docs/deps.md ("How sure"), one test per CUPTI recording: the exact
answer is computed here from the raw CUPTI records (records.json.gz) and networkx reachability, the
inferred one is cgtool's on the same trace with its channels and node ids removed
(scripts/detection_quality.py strips it), and the recall and precision by waited time must be the
table's. The words `deps` prints about its inference are checked against the same table."""

from __future__ import annotations

import functools
import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from types import MappingProxyType

import networkx as nx
import pytest

#: Every recording analysed twice (with and without its channels): the README's test command runs
#: it; CI's runs on the other Pythons leave it out (`-m "not slow"`). The tests share those analyses
#: (``_inferred`` is cached), so they run on one pytest-xdist worker (`--dist loadgroup`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("detection_quality")]

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


def _how_sure_rows(marker: str) -> dict[str, list[str]]:
    """The table rows holding ``marker`` in docs/deps.md's '## How sure' section, by first cell."""
    part = DOC.read_text().split("## How sure", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in part.splitlines():
        if line.startswith("| ") and marker in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def doc_table() -> dict[str, list[str]]:
    """The rows of the table under '## How sure' in docs/deps.md, by trace."""
    return _how_sure_rows("trace.json.gz")


def graph_of(trace_doc: dict) -> nx.DiGraph:
    """The embedded graphs of a cgtool trace as one networkx graph of tools ids (``gpu``: a GPU node)."""
    G = nx.DiGraph()
    for g in trace_doc["cgtool"]["graphs"]:
        for n in g["nodes"]:
            G.add_node(n["tools_id"], gpu=n["node_type"] in ("kernel", "memcpy", "memset"))
            for d in n["dependents"]:
                G.add_edge(n["tools_id"], g["nodes"][d]["tools_id"])
    return G


def truth_from_records(case: Path, trace_doc: dict) -> dict[tuple[int, int], float]:
    """(correlation, tools id) of B -> µs waited, for every fake serialization on a hardware channel
    that waited at least 1 µs: brute force over the raw records, networkx for paths and readiness."""
    recs = [r for r in _gz(case / "records.json.gz") if r["kind"] != "launch" and r.get("graph_id")]
    G = graph_of(trace_doc)
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


@functools.cache
def _inferred(path: Path, keep_setting: bool):
    """cgtool on the stripped trace: (found, cannot tell) as (correlation, tools id) -> µs, joined to
    the original events by their position in the file. Computed once per trace and setting (a
    recording of 20 replays of 200 small kernels takes seconds) and shared read-only by the tests."""
    doc = _gz(path)
    st, inf = dq._inferred(doc, path, 0.5, keep_setting)
    found, cannot = dq._found(st, inf)
    events = doc["traceEvents"]

    def key(seq: int) -> tuple[int, int]:
        a = events[seq]["args"]
        return (a["correlation"], a["graph node id"])
    return (MappingProxyType({key(s): w for s, w in found.items()}),
            MappingProxyType({key(s): w for s, w in cannot.items()}), inf)


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


def late_starts_from_records(case: Path, trace_doc: dict) -> tuple[dict, dict]:
    """(during, after): every late start (B started more than 1 µs after its graph predecessors ended;
    a root: after the replay's first start) as (correlation, tools id) -> µs waited, split by whether B
    started no later than SUBMIT_LATENCY_US after the host's cudaGraphLaunch call returned. From the
    raw CUPTI records (their launch records' end) and networkx, not from cgtool."""
    from cgtool.inspect.analyzers.waits import SUBMIT_LATENCY_US

    recs = _gz(case / "records.json.gz")
    launch_end = {r["correlation"]: r["end"] for r in recs if r["kind"] == "launch"}
    recs = [r for r in recs if r["kind"] != "launch" and r.get("graph_id")]
    G = graph_of(trace_doc)
    order = list(nx.topological_sort(G))
    by_replay = defaultdict(list)
    for r in recs:
        by_replay[r["correlation"]].append(r)
    during, after = {}, {}
    for corr, items in by_replay.items():
        end = {r["graph_node_id"]: r["end"] for r in items}
        t0 = min(r["start"] for r in items)
        ready, finish = {}, {}
        for v in order:
            ready[v] = max((finish[u] for u in G.predecessors(v)), default=t0)
            finish[v] = end.get(v, ready[v])
        for r in items:
            wait = r["start"] - ready[r["graph_node_id"]]
            if wait > MIN_WAIT_NS:
                sub = r["start"] <= launch_end[corr] + SUBMIT_LATENCY_US * 1000
                (during if sub else after)[(corr, r["graph_node_id"])] = wait / 1000
    return during, after


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(DATA)) for p in TRACES])
def test_no_wait_found_while_the_launch_was_submitting(path):
    """A late start before its launch's host call returned (plus SUBMIT_LATENCY_US) is never reported
    as a wait behind unrelated work: the launch may not have submitted it yet. Launch ends and
    readiness come from the raw records."""
    doc = _gz(path)
    during, after = late_starts_from_records(path.parent, doc)
    found, cannot, inf = _inferred(path, keep_setting=False)
    assert not set(found) & set(during)
    assert set(found) <= set(after)
    if set(cannot) & set(during):
        assert "launch was still submitting" in (inf.cannot_tell_reason or "")
    assert inf.cost["launch_waits"] == len(set(cannot) & set(during))


TINY = sorted(DATA.glob("forkjoin_tiny_kineto_mc*/cupti_trace.json.gz"))


@pytest.mark.parametrize("path", TINY, ids=[p.parent.name for p in TINY])
def test_launch_bound_branches_start_as_the_launch_submits_them(path):
    """The many-small-kernels fork/join at every setting: its branches wait for the launch, not for
    each other. Per replay 7 of the 8 branch heads (roots of the graph) start late, all before the
    launch's host call returned (plus SUBMIT_LATENCY_US), so the timing cannot tell them; the kernels
    cover a few % of the H100, so none of them is left for a full GPU."""
    doc = _gz(path)
    during, _ = late_starts_from_records(path.parent, doc)
    roots = {n["tools_id"] for g in doc["cgtool"]["graphs"] for n in g["nodes"]} - {
        g["nodes"][d]["tools_id"] for g in doc["cgtool"]["graphs"] for n in g["nodes"] for d in n["dependents"]}
    replays = {c for c, _ in during}
    late_roots = {k for k in during if k[1] in roots}
    assert len(roots) == 8 and len(late_roots) == 7 * len(replays) == 140
    _, cannot, inf = _inferred(path, keep_setting=False)
    assert late_roots <= set(cannot)
    assert inf.cost["full_gpu_waits"] == 0


def test_a_launch_of_unknown_duration_is_not_judged(tmp_path):
    """Without the launches' durations (when each call returned is unknown) the late starts are
    judged from timing as before: the waits behind unrelated work come back, none is put down to
    the launch. torch.profiler's own trace of the many-small-kernels fork/join at the default setting."""
    from cgtool.artifacts.graph import GraphData
    from cgtool.artifacts.trace import load_trace
    from cgtool.inspect.analyzers.waits import SUBMIT_LATENCY_US
    from cgtool.inspect.deps import analyze

    case = DATA / "forkjoin_tiny_kineto_mcdef"
    doc = _gz(case / "trace.json.gz")
    graph = GraphData.from_json(json.loads((case / "graph.json").read_text()))
    with_dur = analyze(load_trace(case / "trace.json.gz"), [graph])
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and str(e.get("name", "")).startswith("cudaGraphLaunch"):
            del e["dur"]
    p = tmp_path / "no_launch_dur.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.launches and not t.launch_ends
    without = analyze(t, [graph])
    assert with_dur.cost["launch_waits"] > 0 and without.cost["launch_waits"] == 0
    assert without.figures().waits > with_dur.figures().waits
    # what the profiler's trace shows: the late starts before the call returned, from its JSON
    ends = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in _gz(case / "trace.json.gz")["traceEvents"]
            if e.get("cat") == "cuda_runtime" and str(e.get("name", "")).startswith("cudaGraphLaunch")}
    m = with_dur.events
    raw = _gz(case / "trace.json.gz")["traceEvents"]
    t0 = load_trace(case / "trace.json.gz")
    for j in range(len(m.ev)):
        e = raw[int(t0.seq[m.ev[j]])]
        if m.late[j] == 1:
            assert e["ts"] > ends[e["args"]["correlation"]] + SUBMIT_LATENCY_US


def doc_spread_table() -> dict[str, list[str]]:
    """The rows of the run-to-run table under '## How sure' in docs/deps.md, by recording."""
    return _how_sure_rows("_kineto_mcdef |")


def _range(vals: list[float]) -> str:
    lo, hi = f"{min(vals):.1f}", f"{max(vals):.1f}"
    return lo if lo == hi else f"{lo}–{hi}"


def test_run_to_run_spread_at_the_default_setting():
    """Every recording repeated at the default setting in fresh processes has its row: the number of
    runs, the range over the runs of the exact waited time and of what timing alone found (µs per
    replay), of the median span and of its IQR, from the raw records and networkx (found: cgtool on
    the stripped trace). The target of the inference at the default setting: found no more than the
    exact waited time plus this spread."""
    import numpy as np

    rows = doc_spread_table()
    repeated = sorted({p.name.rsplit("_rep", 1)[0] for p in DATA.glob("*_kineto_mcdef_rep*")})
    assert repeated and sorted(rows) == repeated
    for name in repeated:
        runs = [DATA / name] + sorted(DATA.glob(f"{name}_rep*"))
        truth_us, found_us, med, iqr = [], [], [], []
        for case in runs:
            path = case / "cupti_trace.json.gz"
            recs = [r for r in _gz(case / "records.json.gz") if r["kind"] != "launch" and r.get("graph_id")]
            by = defaultdict(list)
            for r in recs:
                by[r["correlation"]].append(r)
            spans = [(max(r["end"] for r in v) - min(r["start"] for r in v)) / 1000 for v in by.values()]
            truth = truth_from_records(case, _gz(path))
            found, _, _ = _inferred(path, keep_setting=False)
            truth_us.append(sum(truth.values()) / len(by))
            found_us.append(sum(found.values()) / len(by))
            med.append(float(np.median(spans)))
            iqr.append(float(np.percentile(spans, 75) - np.percentile(spans, 25)))
        assert rows[name][1:] == [str(len(runs)), _range(truth_us), _range(found_us), _range(med), _range(iqr)]
        # the target: nothing reported beyond the exact waited time and its run-to-run spread
        assert max(found_us) <= max(truth_us) + (max(truth_us) - min(truth_us)) + 0.05
