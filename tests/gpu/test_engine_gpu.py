"""The capture engine on a real GPU. Run on the GPU machine: `pytest -m gpu`."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch():
    import torch

    return torch


def _capture_chain(torch, g, n=4, x=None):
    x = torch.ones(256, device="cuda") if x is None else x
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.capture_begin()
        y = x
        for _ in range(n):
            y = y * 2
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    return x, y


def test_hooks_fire_in_order_and_remove(torch):
    from cgtool.capture.graph import Graph

    g = Graph(keep_graph=True)
    calls = []
    g.register_capture_end_hook(lambda gr: calls.append(("end1", gr.raw_cuda_graph() != 0)))
    h2 = g.register_capture_end_hook(lambda gr: calls.append(("end2", True)))
    g.register_capture_end_hook(lambda gr: calls.append(("end3", True)))
    h2.remove()
    g.register_post_instantiate_hook(lambda gr: calls.append(("inst", gr.raw_cuda_graph_exec())))
    _capture_chain(torch, g)
    assert calls == [("end1", True), ("end3", True)]
    g.instantiate()
    first_exec = calls[-1][1]
    g.instantiate()  # re-instantiation fires again, with a fresh exec graph
    assert [c[0] for c in calls[2:]] == ["inst", "inst"]
    assert g.instantiations == 2
    ids = [g.get_graph_data()["exec_graph_id"]]
    assert isinstance(first_exec, int) and ids[0] > 0


def test_reinstantiation_changes_exec_id(torch):
    from cgtool.capture.graph import Graph

    g = Graph(keep_graph=True)
    _capture_chain(torch, g)
    g.instantiate()
    a = g.get_graph_data()["exec_graph_id"]
    g.instantiate()
    b = g.get_graph_data()["exec_graph_id"]
    assert a != b


def test_keep_graph_false_releases_template_but_hooks_see_it(torch):
    from cgtool.errors import UsageError
    from cgtool.capture.graph import Graph

    g = Graph(keep_graph=False)
    seen = []
    g.register_capture_end_hook(lambda gr: seen.append(gr.raw_cuda_graph()))
    x, y = _capture_chain(torch, g)
    assert seen and seen[0] != 0
    with pytest.raises(UsageError):
        g.raw_cuda_graph()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 16.0))


def test_capture_end_pre_post(torch):
    from cgtool.capture.graph import Graph
    from cgtool.errors import UsageError

    g = Graph(keep_graph=False)
    s = torch.cuda.Stream()
    x = torch.ones(8, device="cuda")
    with torch.cuda.stream(s):
        g.capture_begin()
        x.add_(1)
        g.capture_end_pre()
    assert g.raw_cuda_graph() != 0  # live between pre and post
    with pytest.raises(UsageError):
        g.capture_end_post()  # keep_graph=False needs instantiate first
    g.instantiate()
    data = g.get_graph_data()
    assert [n["node_type"] for n in data["nodes"]] == ["kernel"]
    g.capture_end_post()
    with pytest.raises(UsageError):
        g.raw_cuda_graph()
    g.replay()
    torch.cuda.synchronize()
    assert x[0].item() == 2.0  # work issued during capture does not run; one replay adds 1


def test_debug_dump(torch, tmp_path):
    from cgtool.capture.graph import Graph

    g = Graph(keep_graph=True)
    _capture_chain(torch, g)
    p = tmp_path / "g.dot"
    g.debug_dump(str(p))
    text = p.read_text()
    assert text.startswith("digraph") and "kernel" in text.lower()
    g.debug_dump(str(tmp_path / "brief.dot"), verbose=False)
    assert len((tmp_path / "brief.dot").read_text()) < len(text)


def test_get_graph_data_schema_and_edges(torch):
    from cgtool.capture.graph import Graph
    from cgtool.artifacts.graph import GraphData

    g = Graph(keep_graph=True)
    x = torch.ones(1024, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    cap = torch.cuda.Stream()
    with torch.cuda.stream(cap):
        g.capture_begin()
        s1.wait_stream(cap)
        s2.wait_stream(cap)
        with torch.cuda.stream(s1):
            a = x * 2
        with torch.cuda.stream(s2):
            b = x * 3
        cap.wait_stream(s1)
        cap.wait_stream(s2)
        c = a + b
        g.capture_end()
    g.instantiate()
    d = g.get_graph_data()
    assert set(d) == {"exec_graph_id", "nodes"}
    assert all(
        set(n) == {"index", "node_type", "tools_id", "graph_id", "node_id", "kernel_name", "dependencies", "dependents"}
        for n in d["nodes"]
    )
    gd = GraphData.from_json(d)  # validates edges both ways and the id packing
    kernels = [n for n in gd.nodes if n.node_type.value == "kernel"]
    assert len(kernels) == 3 and all(n.kernel_name for n in kernels)
    add = [n for n in kernels if len(n.dependencies) >= 1 and not n.dependents]
    assert len(add) == 1 and len(add[0].dependencies) == 2
    assert all(n.graph_id == d["exec_graph_id"] for n in gd.nodes)
    m = g.get_graph_data(with_meta=True)["cgtool"]
    assert m["id_source"] in ("driver", "cupti") and len(m["nodes"]) == len(d["nodes"])
    assert all("grid" in m["nodes"][n.index] for n in kernels)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, torch.full_like(x, 5.0))


def test_pools_shared_between_graphs(torch):
    from cgtool.capture.graph import Graph, graph, graph_pool_handle

    pool = graph_pool_handle()
    g1, g2 = Graph(keep_graph=True), Graph(keep_graph=True)
    x = torch.ones(1 << 20, device="cuda")
    with graph(g1, pool=pool):
        y = x * 2
    with graph(g2, pool=g1.pool()):
        z = y + 1
    assert g1.pool() == g2.pool() == pool
    assert pool in g2.pools()
    g1.replay()
    g2.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.full_like(x, 3.0))


def test_context_manager_accelerator_style(torch):
    from cgtool.capture.graph import Graph, is_current_stream_capturing

    x = torch.zeros(2000, device="cuda")
    stream = torch.cuda.Stream()
    g = Graph()
    flags = []
    with torch.cuda.stream(stream), g:
        x += 1
        flags.append(is_current_stream_capturing())
    assert flags == [True] and not is_current_stream_capturing()
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    assert x[0].item() == 2.0


def test_make_graphed_callables_forward_and_backward_graphs(torch):
    from cgtool.capture.graph import make_graphed_callables

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    x = torch.randn(16, 64, device="cuda", requires_grad=True)
    graphs = []
    graphed = make_graphed_callables(model, (x,), graphs_out=graphs)
    assert [label for label, _ in graphs] == ["fwd0", "bwd0"]
    out = graphed(x)
    out.sum().backward()
    assert x.grad is not None and model[0].weight.grad is not None
    for label, g in graphs:
        d = g.get_graph_data()
        kinds = {n["node_type"] for n in d["nodes"]}
        assert "kernel" in kinds, (label, kinds)
    fwd = graphs[0][1].get_graph_data()
    bwd = graphs[1][1].get_graph_data()
    assert fwd["exec_graph_id"] != bwd["exec_graph_id"]
    assert len(bwd["nodes"]) > len(fwd["nodes"]) // 2


def test_default_stream_capture_is_refused(torch):
    from cgtool.capture.graph import Graph
    from cgtool.errors import CaptureError

    g = Graph()
    with pytest.raises(CaptureError, match="default"):
        g.capture_begin()


CUPTI_JOIN = textwrap.dedent(
    """
    import json, torch
    from cgtool.capture.graph import Graph, graph
    from cgtool.capture.cupti_trace import CuptiCollector
    x = torch.ones(1 << 16, device="cuda")
    s = [torch.cuda.Stream() for _ in range(3)]
    g = Graph(keep_graph=True)
    with graph(g):
        cur = torch.cuda.current_stream()
        outs = []
        for st in s:
            st.wait_stream(cur)
            with torch.cuda.stream(st):
                outs.append(x * 2 + 1)
            cur.wait_stream(st)
        y = sum(outs)
        y.zero_()
    g.instantiate()
    d = g.get_graph_data(with_meta=True)
    g.replay(); torch.cuda.synchronize()
    with CuptiCollector() as c:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    recs = [r for r in c.records if r["kind"] != "launch"]
    print(json.dumps({"export": d, "records": recs}))
    """
)


def test_tools_ids_equal_cupti_graph_node_ids():
    """The key property: every tools_id of an export is the graph node id CUPTI reports."""
    pytest.importorskip("cupti")
    r = subprocess.run([sys.executable, "-c", CUPTI_JOIN], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    export, recs = out["export"], out["records"]
    gpu_nodes = {n["tools_id"]: n for n in export["nodes"] if n["node_type"] in ("kernel", "memset", "memcpy")}
    assert recs, "CUPTI recorded nothing"
    seen = {}
    for rec in recs:
        assert rec["graph_id"] == export["exec_graph_id"]
        assert rec["graph_node_id"] in gpu_nodes, (rec, sorted(gpu_nodes))
        seen[rec["graph_node_id"]] = seen.get(rec["graph_node_id"], 0) + 1
    # every GPU node ran once per replay, and its kernel name matches
    assert set(seen) == set(gpu_nodes) and set(seen.values()) == {3}
    for rec in recs:
        n = gpu_nodes[rec["graph_node_id"]]
        if rec["kind"] == "kernel":
            assert rec["name"] == n["kernel_name"]


def test_export_fast_path_equals_bindings_path(torch):
    """The ctypes per-node path and the cuda.bindings path give the same export."""
    from cgtool.capture.export import graph_data
    from cgtool.capture.graph import Graph, graph

    x = torch.ones(1024, device="cuda")
    a = torch.randn(64, 64, device="cuda")
    a @ a
    torch.cuda.synchronize()
    g = Graph(keep_graph=True)
    with graph(g):
        y = x * 2
        x.zero_()
        b = a @ a
        y.add_(b.sum())
    g.instantiate()
    raw, exe = g.raw_cuda_graph(), g.raw_cuda_graph_exec()
    fast = graph_data(raw, exe, impl="ctypes")
    slow = graph_data(raw, exe, impl="bindings")
    assert fast["nodes"] == slow["nodes"] and fast["exec_graph_id"] == slow["exec_graph_id"]
    assert fast["cgtool"]["nodes"] == slow["cgtool"]["nodes"]
    assert {n["node_type"] for n in fast["nodes"]} >= {"kernel"}
    from cgtool.capture import _fastcuda

    edges = _fastcuda.load().edges(raw)  # the ctypes edge list itself, not a silent fallback
    assert edges is not None
    frm, to = edges
    assert len(frm) == len(to) == sum(len(n["dependents"]) for n in slow["nodes"]) > 0


def _reference_export():
    """benchmarks/export_reference.py: the pure-Python export (commit 6243867), kept as an oracle."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_reference", ROOT / "benchmarks" / "export_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _without_timing(d):
    d = json.loads(json.dumps(d))
    if "cgtool" in d:
        d["cgtool"]["timings"].pop("export_s")
    return json.dumps(d)


def test_export_equals_the_export_before_issue_18(torch):
    """The one-pass export writes the same JSON as the old one, on a graph with two streams, kernels of
    several functions (cuBLAS's mangled names among them), a memset and a device-to-device copy."""
    from cuda.bindings import runtime as rt

    from cgtool.capture.export import graph_data
    from cgtool.capture.graph import Graph, graph

    ref = _reference_export()
    x = torch.ones(4096, device="cuda")
    z = torch.zeros(4096, device="cuda")
    a = torch.randn(64, 64, device="cuda")
    a @ a
    torch.cuda.synchronize()
    g = Graph(keep_graph=True)
    with graph(g):
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            b = a @ a
            b.relu_()
        y = x * 2
        st = cur.cuda_stream
        assert int(rt.cudaMemsetAsync(x.data_ptr(), 0, x.numel() * 4, st)[0]) == 0
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        assert int(rt.cudaMemcpyAsync(z.data_ptr(), y.data_ptr(), y.numel() * 4, kind, st)[0]) == 0
        cur.wait_stream(side)
        y.add_(b.sum())
    g.instantiate()
    raw, exe = g.raw_cuda_graph(), g.raw_cuda_graph_exec()
    for meta in (False, True):
        new, old = graph_data(raw, exe, with_meta=meta), ref.graph_data(raw, exe, with_meta=meta)
        assert _without_timing(new) == _without_timing(old)
    kinds = {n["node_type"] for n in new["nodes"]}
    assert {"kernel", "memset", "memcpy"} <= kinds, kinds
    assert any("demangled" in e for e in new["cgtool"]["nodes"])
    full = g.get_graph_data(with_meta=True)
    full["cgtool"]["timings"].pop("capture_s"), full["cgtool"]["timings"].pop("instantiate_s")
    assert _without_timing(full) == _without_timing(old)


def test_make_graphed_callables_as_the_first_engine_use_in_a_process():
    """torch's own classes must be remembered before they are patched (a fresh process whose first
    engine call is make_graphed_callables once recursed without end)."""
    code = textwrap.dedent("""
        import torch
        from cgtool.capture.graph import make_graphed_callables
        model = torch.nn.Linear(8, 8).cuda()
        x = torch.randn(4, 8, device="cuda", requires_grad=True)
        graphs = []
        f = make_graphed_callables(model, (x,), graphs_out=graphs)
        f(x).sum().backward()
        print(sorted(label for label, _ in graphs))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("['bwd0', 'fwd0']")
