"""deps against real traces from the H200, with expectations computed independently from the raw
CUPTI records (records.json.gz) and networkx reachability — not from cgtool's analysis."""

import dataclasses
import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import networkx as nx
import pytest

from cgtool.errors import InvalidInputError
from cgtool.inspect.deps import analyze, graphs_from_trace
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import load_trace

TRACES = ["forkjoin_trace", "forkjoin_trace_mc1", "forkjoin_trace_mc2", "transformer_trace_mc1",
          "chain_trace", "train_step_trace"]


def _load_gz(p):
    return json.loads(gzip.decompress(p.read_bytes()))


def expected_from_records(case_dir, tol_ns=500):
    """Serializations by brute force over the raw CUPTI records (ns), per replay and channel."""
    recs = [r for r in _load_gz(case_dir / "records.json.gz") if r["kind"] != "launch" and r["graph_id"]]
    doc = _load_gz(case_dir / "trace.json.gz")
    G = nx.DiGraph()
    for gexp in doc["cgtool"]["graphs"]:
        for n in gexp["nodes"]:
            G.add_node(n["tools_id"])
            for d in n["dependents"]:
                G.add_edge(n["tools_id"], gexp["nodes"][d]["tools_id"])
    lanes = defaultdict(list)
    for r in recs:
        lanes[(r["correlation"], r["channel_type"], r["channel"])].append(r)
    pairs = Counter()
    for items in lanes.values():
        for b in items:
            cands = [a for a in items if a is not b and a["end"] <= b["start"] + tol_ns and a["start"] < b["start"]]
            if not cands:
                continue
            a = max(cands, key=lambda a: (a["end"], a["start"]))  # ties: the one that started last
            kind = "true" if nx.has_path(G, a["graph_node_id"], b["graph_node_id"]) else "fake"
            pairs[(a["graph_node_id"], b["graph_node_id"], kind)] += 1
    return pairs


@pytest.mark.parametrize("case", TRACES)
def test_classification_matches_independent_computation(data_dir, case):
    t = load_trace(data_dir / case / "trace.json.gz")
    res = analyze(t, graphs_from_trace(t), tolerance_us=0.5)
    got = Counter({(f.before, f.after, f.kind.value): f.count for f in res.findings})
    want = expected_from_records(data_dir / case)
    assert got == want
    js = res.to_json()
    assert js["summary"]["true"] == sum(v for (_, _, k), v in want.items() if k == "true")
    assert js["summary"]["fake"] == sum(v for (_, _, k), v in want.items() if k == "fake")
    assert js["summary"]["match"] == "exact" and js["summary"]["lane"] == "channel"


def test_the_result_and_the_match_it_carries_are_built_once_and_frozen(data_dir):
    case = data_dir / "forkjoin_trace_mc1"
    t = load_trace(case / "trace.json.gz")
    res = analyze(t, graphs_from_trace(t), tolerance_us=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.notes = []
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.events.verdict = res.events.verdict
    # the carried match is the completed one: each event's verdict, counted against the raw records
    want = expected_from_records(case)
    v = res.events.verdict
    assert len(v) == len(res.events.ev) and len(res.events.late) == len(res.events.ev)
    assert int((v == 1).sum()) == sum(n for (_, _, k), n in want.items() if k == "fake") > 0
    assert int((v == 0).sum()) == sum(n for (_, _, k), n in want.items() if k == "true")


def test_default_channels_have_no_fake_dependencies_and_one_channel_has_many(data_dir):
    def fakes(case):
        t = load_trace(data_dir / case / "trace.json.gz")
        return analyze(t, graphs_from_trace(t)).n_fake

    assert fakes("forkjoin_trace") == 0  # 8 branches on channels 0-7
    assert fakes("forkjoin_trace_mc1") > fakes("forkjoin_trace_mc2") > 0
    assert fakes("chain_trace") == 0  # a chain has only true dependencies


def test_json_schema(data_dir):
    t = load_trace(data_dir / "forkjoin_trace_mc1" / "trace.json.gz")
    js = analyze(t, graphs_from_trace(t)).to_json()
    assert {"true", "fake"} <= set(js["summary"])
    ids = {n.tools_id for n in graphs_from_trace(t)[0].nodes}
    for s in js["serializations"]:
        assert {"before", "after", "kind", "channel", "stream", "gap_us", "count"} <= set(s)
        assert s["before"] in ids and s["after"] in ids and s["kind"] in ("true", "fake")
        assert isinstance(s["channel"], int) and s["count"] >= 1
    fake = [s for s in js["serializations"] if s["kind"] == "fake"]
    assert all(s["wait_us"] >= 0 for s in fake) and js["summary"]["fake_wait_us"] > 0
    assert all(s["certainty"] == "exact" and s["assignments"] == 1 for s in js["serializations"])
    # The GEMMs fill the GPU either way (this trace's span, 795 µs, equals the default setting's):
    # the waits cost nothing, so nothing is suggested, and a note says why.
    assert js["cost"]["gpu_filled"] and js["cost"]["saving_share"] < 0.05
    assert not js["suggestions"] and any("filled the GPU" in n for n in js["notes"])


def _rewrite(doc, fn):
    doc = json.loads(json.dumps(doc))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            fn(e["args"])
    return doc


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_low32_node_ids_beside_graph_id_give_the_same_result(data_dir, tmp_path):
    src = data_dir / "forkjoin_trace_mc2" / "trace.json.gz"
    doc = _load_gz(src)

    def low32(a):
        a["graph node id"] &= 0xFFFFFFFF

    t2 = load_trace(_write(tmp_path, "low.json", _rewrite(doc, low32)))
    assert t2.node_id_form == "low32+graph id"
    t1 = load_trace(src)
    r1, r2 = analyze(t1, graphs_from_trace(t1)), analyze(t2, graphs_from_trace(t2))
    assert r1.to_json()["serializations"] == r2.to_json()["serializations"]


def test_without_channels_lanes_are_streams_and_waits_are_inferred(data_dir, tmp_path):
    doc = _load_gz(data_dir / "forkjoin_trace_mc1" / "trace.json.gz")

    def drop(a):
        a.pop("channel")
        a.pop("channel_type")

    nochan = _rewrite(doc, drop)
    kept = load_trace(_write(tmp_path, "kept.json", nochan))
    del nochan["cgtool"]["CUDA_DEVICE_MAX_CONNECTIONS"]  # as a plain profiler trace: the setting unknown
    nochan["cgtool"]["environment"].pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    t = load_trace(_write(tmp_path, "nochan.json", nochan))
    r = analyze(t, graphs_from_trace(t))
    assert r.lane == "stream" and any("no hardware channel" in n for n in r.notes)
    assert r.to_json()["summary"]["fake"] is None  # not visible: unknown, never 0
    # Branches run on their own streams: on each stream only the true (chain) order shows...
    assert r.n_fake == 0 and r.n_true > 0
    # ...and the branches that sat ready did so while the other GEMMs covered the whole GPU: from
    # timing alone these are waits for room on the GPU, one per fake serialization on the channel.
    fakes = sum(v for (_, _, k), v in expected_from_records(data_dir / "forkjoin_trace_mc1").items() if k == "fake")
    assert not r.inferred_waits and r.cost["full_gpu_waits"] == fakes == 60
    assert r.figures().cannot_tell == 60 and "GPU was full" in r.cannot_tell_reason
    # The trace records CUDA_DEVICE_MAX_CONNECTIONS=1: every stream went through channel 0, and the
    # serializations on it are the independent computation's, as with the channel data itself.
    rk = analyze(kept, graphs_from_trace(kept))
    assert rk.lane == "channel" and rk.channels_from.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1")
    got = Counter({(f.before, f.after, f.kind.value): f.count for f in rk.findings})
    assert got == expected_from_records(data_dir / "forkjoin_trace_mc1")


def test_kineto_trace_without_graph_ids_is_matched_by_launch_name_and_order(data_dir):
    t = load_trace(data_dir / "chain_kineto" / "trace.json.gz")
    assert not t.has_graph_ids and not t.has_channels
    g = GraphData.load(data_dir / "chain_kineto" / "graph.json")
    r = analyze(t, [g])
    assert r.match == "inferred" and any("inferred" in n for n in r.notes)
    assert len(r.replays) == 3
    # a 40-kernel chain on one stream: 39 true serializations per replay, no fake ones
    assert r.n_true == 3 * 39 and r.n_fake == 0


def test_exec_id_mismatch_names_both_ids(data_dir, tmp_path):
    t = load_trace(data_dir / "forkjoin_trace" / "trace.json.gz")
    g = GraphData.load(data_dir / "forkjoin" / "graph.json").to_json()
    g["exec_graph_id"] = 7
    for n in g["nodes"]:
        n["graph_id"] = 7
        n["tools_id"] = (7 << 32) | n["node_id"]
    with pytest.raises(InvalidInputError) as e:
        analyze(t, [GraphData.from_json(g)])
    assert "[2]" in e.value.message and "[7]" in e.value.message and "same instantiation" in e.value.message


def test_node_missing_from_export_is_an_error(data_dir):
    t = load_trace(data_dir / "forkjoin_trace" / "trace.json.gz")
    g = graphs_from_trace(t)[0].to_json()
    g["nodes"] = g["nodes"][:-1]
    for n in g["nodes"]:
        n["dependents"] = [d for d in n["dependents"] if d < len(g["nodes"])]
    with pytest.raises(InvalidInputError, match="not a node of exec graph"):
        analyze(t, [GraphData.from_json(g)])


def test_non_graph_kernels_interleaved_are_ignored(data_dir, tmp_path):
    doc = _load_gz(data_dir / "chain_trace" / "trace.json.gz")
    gpu = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    extra = []
    for k, e in enumerate(gpu[::7]):
        x = json.loads(json.dumps(e))
        x["args"] = {"device": 0, "stream": 7, "correlation": 900000 + k, "channel": 0, "channel_type": 1}
        x["ts"] += 0.1
        extra.append(x)
    doc["traceEvents"] += extra
    t = load_trace(_write(tmp_path, "mixed.json", doc))
    t0 = load_trace(data_dir / "chain_trace" / "trace.json.gz")
    r, r0 = analyze(t, graphs_from_trace(t)), analyze(t0, graphs_from_trace(t0))
    assert r.non_graph_events == len(extra)
    assert r.to_json()["serializations"] == r0.to_json()["serializations"]


def test_several_graphs_and_memsets(data_dir):
    t = load_trace(data_dir / "train_step_trace" / "trace.json.gz")
    gs = graphs_from_trace(t)
    assert len(gs) == 2  # forward and backward graphs of make_graphed_callables
    r = analyze(t, gs)
    assert sorted(r.graphs) == sorted(g.exec_graph_id for g in gs)
    assert {rp.graph_id for rp in r.replays} == set(r.graphs)
    assert any(e.kind == "memset" for e in t.events())


def test_tolerance_changes_what_counts_as_after(data_dir):
    t = load_trace(data_dir / "forkjoin_trace_mc1" / "trace.json.gz")
    g = graphs_from_trace(t)
    strict = analyze(t, g, tolerance_us=0.0)
    loose = analyze(t, g, tolerance_us=50.0)
    assert strict.n_true + strict.n_fake <= loose.n_true + loose.n_fake


@pytest.mark.subprocess  # the trace reader's worker processes
def test_two_process_decode_gives_the_same_columns(data_dir, tmp_path, monkeypatch):
    """The forked second reader (used on big plain files) must give exactly what one reader gives,
    with windows small enough that both halves take many chunks."""
    import os

    from cgtool.artifacts.trace import stream as T

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    path = tmp_path / "trace.json"  # several graphs, memsets, eager kernels; plain: the worker seeks
    path.write_bytes(gzip.decompress((data_dir / "train_step_trace" / "trace.json.gz").read_bytes()))
    monkeypatch.setattr(T, "WINDOW", 4096)
    monkeypatch.setenv("CGTOOL_TRACE_WORKERS", "1")
    one = T.load_trace(path)
    monkeypatch.setattr(T, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setenv("CGTOOL_TRACE_WORKERS", "2")
    joined = []
    real_join = T._Worker.join
    monkeypatch.setattr(T._Worker, "join", lambda self, acc: joined.append(1) or real_join(self, acc))
    two = T.load_trace(path)
    assert joined, "the worker's half was not used"
    for col in ("kind", "start", "end", "device", "stream", "correlation", "graph_id", "tools_id",
                "channel", "channel_type", "seq", "shape", "shared_memory", "nbytes"):
        assert (getattr(one, col) == getattr(two, col)).all(), col
    assert [one.names[i] for i in one.name] == [two.names[i] for i in two.name]
    assert one.launches == two.launches and one.launch_ends == two.launch_ends
    assert one.n_events == two.n_events == len(json.loads(path.read_bytes())["traceEvents"])
    r1, r2 = analyze(one, graphs_from_trace(one)), analyze(two, graphs_from_trace(two))
    assert r1.to_json()["serializations"] == r2.to_json()["serializations"]


@pytest.mark.subprocess  # the trace reader's worker processes
def test_two_process_decode_reports_bad_events_in_the_second_half(data_dir, tmp_path, monkeypatch):
    import os

    from cgtool.artifacts.trace import stream as T

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    doc = _load_gz(data_dir / "chain_trace" / "trace.json.gz")
    gpu = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    del gpu[-1]["args"]["stream"]
    bad = doc["traceEvents"].index(gpu[-1])
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(T, "WINDOW", 4096)
    monkeypatch.setattr(T, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setenv("CGTOOL_TRACE_WORKERS", "2")
    with pytest.raises(InvalidInputError, match=rf"traceEvents\[{bad}\] .*lacks args.stream"):
        T.load_trace(p)


def test_a_profiler_trace_with_channels_and_node_ids_is_read_with_them(data_dir, tmp_path):
    """Newer Kineto writes "graph node id" and "channel": such a trace (no cgtool block here, the
    export given beside it) is matched exactly, taken per channel, and the output says so."""
    doc = _load_gz(data_dir / "forkjoin_trace_mc1" / "trace.json.gz")
    graph = doc.pop("cgtool")["graphs"][0]
    t = load_trace(_write(tmp_path, "kineto_new.json", doc))
    r = analyze(t, [GraphData.from_json(graph)])
    assert r.match == "exact" and r.lane == "channel" and r.fake_visible
    assert any("profiler trace carries hardware channels and graph node ids" in n for n in r.notes)
    got = Counter({(f.before, f.after, f.kind.value): f.count for f in r.findings})
    assert got == expected_from_records(data_dir / "forkjoin_trace_mc1")


# ------------------------------------------- what a trace without hardware channels cannot show
_PROFILER_TRACES = sorted(p for p in (Path(__file__).parent / "data").glob("*_kineto*") if (p / "trace.json.gz").is_file() and (p / "graph.json").is_file())


@pytest.mark.parametrize("folder", [pytest.param(p, marks=pytest.mark.slow) if "forkjoin_tiny" in p.name else p
                                    for p in _PROFILER_TRACES], ids=lambda p: p.name)
def test_no_saving_is_claimed_for_what_a_profiler_trace_cannot_show(folder, run_cli):
    """On a torch.profiler trace (no channels) the estimated saving is computed only from what the
    trace shows -- inferred waits, or independent work serialized on one stream -- and is unknown
    (null, said in words) otherwise, late starts it cannot tell included: never 0.0 µs."""
    trace = load_trace(folder / "trace.json.gz")
    if trace.has_channels:
        pytest.skip("this profiler trace carries channels")
    code, out, err = run_cli("deps", str(folder / "trace.json.gz"), "--graph", str(folder / "graph.json"), "--json", "-")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["fake"] is None
    shown = s["waits"] or s["fake_on_one_stream"]  # late starts it cannot tell are no basis: they may be fake
    if not shown:
        assert s["saving_us"] is None and s["saving_basis"] is None
    else:
        assert s["saving_basis"] in ("inferred waits", "serializations on one stream")
    code, text, err = run_cli("deps", str(folder / "trace.json.gz"), "--graph", str(folder / "graph.json"))
    assert code == 0, err
    flat = " ".join(text.split())
    assert "without the fake serializations" not in flat
    assert "fake dependencies │ 0" not in flat and "fake dependencies 0" not in flat
