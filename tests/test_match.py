"""Matching torch.profiler traces without node ids (cgtool.inspect.match), checked against a brute
force written here from the raw JSON and networkx: every assignment of each replay's events to the
graph's nodes is enumerated, event by event in start order, per replay and without the matcher's
symmetry reduction, kept when

* the event is of the node's kind, name, grid and block (and of at least its shared memory),
* it starts no earlier than the end of every GPU ancestor's event (tolerance 0.5 µs),
* a chain link (single GPU parent whose single GPU child it is) is on its parent's stream,

and then the assignments common to all replays (the same node in the k-th slot of every stream)
are counted. Verdicts of every serialization (per stream, the event that ended last before B
started) are taken under every common assignment."""

import gzip
import json
from collections import Counter, defaultdict

import networkx as nx
import numpy as np
import pytest

from cgtool.errors import InvalidInputError
from cgtool.inspect.deps import analyze, graphs_from_trace, replay_times
from cgtool.artifacts.graph import GraphData
from cgtool.inspect.reach import topological_order
from cgtool.inspect.match import match_launches, prepare
from cgtool.artifacts.trace import load_trace

TOL = 0.5
GPU = {"kernel", "memcpy", "memset"}
CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def _raw(case):
    d = json.loads(gzip.decompress((case / "trace.json.gz").read_bytes()))
    g = json.loads((case / "graph.json").read_text())
    return d, g


def brute_force(case):
    doc, g = _raw(case)
    ev = doc["traceEvents"]
    launches = {e["args"]["correlation"] for e in ev if e.get("name", "").startswith("cudaGraphLaunch")}
    replays = defaultdict(list)
    for e in ev:
        if e.get("cat") in CATS and e["args"]["correlation"] in launches:
            replays[e["args"]["correlation"]].append(e)
    nodes, extras = g["nodes"], g["cgtool"]["nodes"]
    G = nx.DiGraph()
    G.add_nodes_from(range(len(nodes)))
    for n in nodes:
        for d in n["dependents"]:
            G.add_edge(n["index"], d)
    gpu = [n["index"] for n in nodes if n["node_type"] in GPU]
    gpu_set = set(gpu)
    anc = {v: nx.ancestors(G, v) & gpu_set for v in gpu}
    # GPU parents: GPU ancestors with no GPU node between them and v.
    parents = {v: [u for u in anc[v] if not any(w in anc[v] and u in anc[w] for w in gpu)] for v in gpu}
    children = {u: [v for v in gpu if u in parents[v]] for u in gpu}
    link = {v: parents[v][0] for v in gpu if len(parents[v]) == 1 and len(children[parents[v][0]]) == 1}
    desc = {v: nx.descendants(G, v) for v in gpu}

    def fits(e, v):
        n, x = nodes[v], extras[v]
        if CATS[e["cat"]] != n["node_type"]:
            return False
        if n["node_type"] != "kernel":
            return True
        a = e["args"]
        return (e["name"] == (x.get("demangled") or n["kernel_name"]) and a["grid"] == x["grid"]
                and a["block"] == x["block"] and a["shared memory"] >= x["shared_mem"])

    def slots(events):
        by = defaultdict(list)
        for e in sorted(events, key=lambda e: e["ts"]):
            by[e["args"]["stream"]].append(e)
        return {id(e): (s, k) for s, es in by.items() for k, e in enumerate(es)}

    per_replay = []
    for corr, events in sorted(replays.items()):
        slot = slots(events)
        events = sorted(events, key=lambda e: e["ts"])
        sols = set()
        node_of = {}  # node -> event
        fitting = [[v for v in gpu if fits(e, v)] for e in events]

        def rec(i):
            if i == len(events):
                sols.add(tuple(sorted((slot[id(e)], v) for v, e in node_of.items())))
                return
            e = events[i]
            latest = e["ts"] + TOL
            for v in fitting[i]:
                if v in node_of:
                    continue
                ok = True
                for u in anc[v]:
                    a = node_of.get(u)
                    if a is None or a["ts"] + a["dur"] > latest:
                        ok = False
                        break
                if not ok:
                    continue
                if v in link and node_of[link[v]]["args"]["stream"] != e["args"]["stream"]:
                    continue
                node_of[v] = e
                rec(i + 1)
                del node_of[v]

        rec(0)
        per_replay.append((events, slot, sols))
    common = set.intersection(*(s for _, _, s in per_replay))
    # Serializations, per replay and stream, and their verdict under every common assignment.
    verdicts = Counter()
    maps = [dict(s) for s in common]
    for events, slot, _ in per_replay:
        by = defaultdict(list)
        for e in events:
            by[e["args"]["stream"]].append(e)
        for items in by.values():
            for b in items:
                c = [a for a in items if a is not b and round(a["ts"] + a["dur"], 3) <= b["ts"] + TOL and a["ts"] < b["ts"]]
                if not c:
                    continue
                a = max(c, key=lambda a: (round(a["ts"] + a["dur"], 3), a["ts"]))
                sa, sb = slot[id(a)], slot[id(b)]
                vs = {mp[sb] in desc[mp[sa]] for mp in maps}
                verdicts["true" if vs == {True} else "fake" if vs == {False} else "undecided"] += 1
    return len(common), verdicts, common


CASES = ["chain_kineto", pytest.param("forkjoin_kineto", marks=pytest.mark.slow), "transformer_kineto",
         "transformer_kineto_mc1", "moe_kineto_mc1"]


@pytest.mark.parametrize("case", CASES)
def test_inferred_match_agrees_with_brute_force(data_dir, case):
    n, verdicts, common = brute_force(data_dir / case)
    assert n >= 1
    t = load_trace(data_dir / case / "trace.json.gz")
    g = GraphData.load(data_dir / case / "graph.json")
    mt = match_launches(t, {g.exec_graph_id: prepare(g, topological_order(g))})
    assert [lg.assignments for lg in mt.groups] == [n] and mt.groups[0].complete and not mt.unmatched
    r = analyze(t, [g])
    got = Counter()
    for f in r.findings:
        got[f.kind.value] += f.count
    assert got == verdicts
    want_cert = "inferred-unique" if n == 1 else "inferred-invariant"
    assert {f.certainty for f in r.findings if f.kind.value != "undecided"} <= {want_cert}
    assert all(f.assignments == n for f in r.findings)
    js = r.to_json()
    assert js["summary"]["match"] == "inferred" and js["match_groups"][0]["assignments"] == n
    assert js["summary"]["certainty"] == ({want_cert: sum(verdicts.values())} if verdicts else {})
    if n == 1:  # the one assignment is the brute force's
        (sol,) = common
        lg = mt.groups[0]
        ev = lg.events[:, 0]
        by_slot = {}
        for i, node in zip(ev.tolist(), lg.solutions[0].tolist()):
            by_slot[(int(t.stream[i]), i)] = node
        streams = defaultdict(list)
        for (s, i) in sorted(by_slot, key=lambda k: t.start[k[1]]):
            streams[s].append(by_slot[(s, i)])
        assert sorted((s, k, v) for s, vs in streams.items() for k, v in enumerate(vs)) == \
            sorted((s, k, v) for (s, k), v in sol)


def test_symmetric_branches_are_invariant_and_counted(data_dir):
    """Fork/join: 8 identical branches on 8 executor streams — 8! assignments, all with the
    same verdicts; the old matcher refused this trace as ambiguous."""
    t = load_trace(data_dir / "forkjoin_kineto" / "trace.json.gz")
    g = GraphData.load(data_dir / "forkjoin_kineto" / "graph.json")
    r = analyze(t, [g])
    assert {f.certainty for f in r.findings} == {"inferred-invariant"}
    assert r.match_groups[0]["assignments"] == 40320 and r.n_undecided == 0


def _events(doc):
    return [e for e in doc["traceEvents"] if e.get("cat") in CATS]


def test_a_launch_without_consistent_assignment_is_left_out_not_the_trace(data_dir, tmp_path):
    doc, g = _raw(data_dir / "transformer_kineto")
    # Move one replay's first kernel after its successors: that launch has no consistent assignment.
    launches = sorted({e["args"]["correlation"] for e in _events(doc)})
    evs = sorted((e for e in _events(doc) if e["args"]["correlation"] == launches[1]), key=lambda e: e["ts"])
    evs[0]["ts"] = evs[-1]["ts"] + evs[-1]["dur"] + 5
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    r = analyze(load_trace(p), [GraphData.load(data_dir / "transformer_kineto" / "graph.json")])
    assert len(r.replays) == 2 and any("left out" in n for n in r.notes)


def test_trace_whose_launches_match_no_graph_is_refused(data_dir):
    t = load_trace(data_dir / "forkjoin_kineto" / "trace.json.gz")
    with pytest.raises(InvalidInputError, match="match no given graph"):
        analyze(t, [GraphData.load(data_dir / "chain_kineto" / "graph.json")])


def test_launch_shape_tells_same_named_kernels_apart(data_dir, tmp_path):
    """Give one replay's kernel a grid no node has: that launch cannot be matched."""
    doc, _ = _raw(data_dir / "chain_kineto")
    first = sorted(_events(doc), key=lambda e: e["ts"])[0]
    first["args"]["grid"] = [7, 7, 7]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    r = analyze(load_trace(p), [GraphData.load(data_dir / "chain_kineto" / "graph.json")])
    assert len(r.replays) == 2


def test_chain_links_stay_on_one_stream_in_every_cupti_recording(data_dir):
    """The matcher's stream assumptions, checked where the trace names the node of every event:
    a node runs on one stream in every replay, and a chain link on its parent's stream."""
    cases = sorted(data_dir.glob("*_kineto_mc*/cupti_trace.json.gz")) + sorted(data_dir.glob("*_trace*/trace.json.gz"))
    assert len(cases) >= 15
    for path in cases:
        t = load_trace(path)
        for g in graphs_from_trace(t):
            m = prepare(g, topological_order(g))
            index = {n.tools_id: n.index for n in g.nodes}
            stream_of = defaultdict(set)
            per_replay = defaultdict(dict)
            for i in np.flatnonzero(t.graph_id == g.exec_graph_id).tolist():
                v = index[int(t.tools_id[i])]
                stream_of[v].add(int(t.stream[i]))
                per_replay[int(t.correlation[i])][v] = int(t.stream[i])
            assert all(len(s) == 1 for s in stream_of.values()), path
            for v, u in m.link.items():
                assert all(r[v] == r[u] for r in per_replay.values()), (path, u, v)


def test_replay_times_work_without_node_ids(data_dir):
    t = load_trace(data_dir / "moe_kineto_mc1" / "trace.json.gz")
    g = GraphData.load(data_dir / "moe_kineto_mc1" / "graph.json")
    S, E = replay_times(t, g)
    assert S.shape == (20, len(g.nodes)) and not np.isnan(S[:, [n.index for n in g.nodes if n.node_type.runs_on_gpu]]).any()


def _strip_ids(src, dst):
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        a.pop("graph node id", None)
        a.pop("graph id", None)
    dst.write_text(json.dumps(doc))
    return dst


GROUND_TRUTH = sorted(p.parent.name + "/" + p.name for p in
                      (__import__("pathlib").Path(__file__).parent / "data").glob("*_kineto_mc*/cupti_trace.json.gz")) + \
    ["forkjoin_trace_mc1/trace.json.gz", "transformer_trace_mc1/trace.json.gz", "train_step_trace/trace.json.gz"]


@pytest.mark.parametrize("rel", GROUND_TRUTH)
def test_inferred_verdicts_equal_the_ids_verdicts_per_replay(data_dir, tmp_path, rel):
    """CUPTI traces (channels, fake serializations) with their node ids removed: the inferred
    match must give, replay by replay, the verdicts the ids give (the ids analysis is itself
    checked against the raw records in test_deps)."""
    t_ids = load_trace(data_dir / rel)
    gs = graphs_from_trace(t_ids)
    exact = analyze(t_ids, gs)
    t = load_trace(_strip_ids(data_dir / rel, tmp_path / "noids.json"))
    assert not t.has_graph_ids and t.has_channels
    inferred = analyze(t, gs)
    assert inferred.match == "inferred" and inferred.n_undecided == 0
    for col in ("correlation", "true", "fake", "span_us", "critical_path_us"):
        assert (inferred.replay_table[col] == exact.replay_table[col]).all(), col
    assert {f.certainty for f in inferred.findings} <= {"inferred-unique", "inferred-invariant"}


def _synthetic(tmp_path):
    """X1 and X2: same kernel, independent roots; Y and Z follow X1. Both X events end before Y and
    Z start, so X1 may be either: two assignments, and the verdicts of the serializations X→Y
    (stream 1) and X→Z (stream 2) depend on which."""
    def node(i, name, deps, dependents):
        return {"index": i, "node_type": "kernel", "tools_id": (2 << 32) | i, "graph_id": 2, "node_id": i,
                "kernel_name": name, "dependencies": deps, "dependents": dependents}
    g = {"exec_graph_id": 2, "nodes": [node(0, "k", [], [2, 3]), node(1, "k", [], []), node(2, "m", [0], []),
                                       node(3, "n", [0], [])],
         "cgtool": {"schema_version": 1, "nodes": [{"grid": [1, 1, 1], "block": [32, 1, 1], "shared_mem": 0}] * 4}}
    evs = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0.0, "dur": 1.0, "pid": 1, "tid": 1,
            "args": {"correlation": 5}}]
    for name, stream, ts in [("k", 1, 10.0), ("k", 2, 10.0), ("m", 1, 30.0), ("n", 2, 30.0)]:
        evs.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": 10.0, "pid": 0, "tid": stream,
                    "args": {"device": 0, "stream": stream, "correlation": 5, "grid": [1, 1, 1], "block": [32, 1, 1],
                             "shared memory": 0}})
    (tmp_path / "graph.json").write_text(json.dumps(g))
    with gzip.open(tmp_path / "trace.json.gz", "wt") as f:
        json.dump({"traceEvents": evs}, f)
    return tmp_path


def test_disagreeing_assignments_leave_the_verdict_undecided(tmp_path):
    case = _synthetic(tmp_path)
    n, verdicts, _ = brute_force(case)
    assert n == 2 and verdicts == Counter({"undecided": 2})
    r = analyze(load_trace(case / "trace.json.gz"), [GraphData.load(case / "graph.json")])
    js = r.to_json()
    assert js["summary"]["undecided"] == 2 and js["summary"]["true"] == js["summary"]["fake_on_one_stream"] == 0
    assert js["summary"]["fake"] is None  # no channels: not visible, not 0
    assert {(s["kind"], s["certainty"], s["assignments"]) for s in js["serializations"]} == {("undecided", "undecided", 2)}
    assert js["match_groups"] == [{"graph_id": 2, "replays": 1, "events_per_replay": 4, "assignments": 2,
                                   "complete": True}]
    assert not r.suggestions


def test_chains_cannot_crowd_a_stream_so_the_search_ends(data_dir):
    """forkjoin_tiny: 8 interchangeable 16-kernel chains on 8 streams of 16 slots, one kernel name
    throughout. Starting a second chain on a stream whose later slots cannot hold both chains' rests
    has no completion; cut when it is made, the search ends (complete) within its bounds with the one
    assignment the chains' symmetry leaves. Without that cut it ran into its time bound and reported a
    lower bound."""
    case = data_dir / "forkjoin_tiny_kineto_mc1"
    t = load_trace(case / "trace.json.gz")
    g = GraphData.load(case / "graph.json")
    mt = match_launches(t, {g.exec_graph_id: prepare(g, topological_order(g))})
    assert mt.groups and all(lg.complete for lg in mt.groups) and not mt.unmatched
    assert not any("stopped at its bound" in n for n in mt.notes)
    streams = Counter(int(s) for s in t.stream[mt.groups[0].events[:, 0]])
    assert sorted(streams.values()) == [16] * 7 + [18]  # the case is the one described
