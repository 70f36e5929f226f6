"""The engine as a drop-in torch.cuda.CUDAGraph, on a real GPU: pools, liveness, hooks, exports.

Run on the GPU machine: `pytest -m gpu`. PyTorch's own tests of the same APIs run through
scripts/torch_tests/run.py; these pin the behaviour cgtool adds on torch 2.11.
"""

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch():
    import torch

    return torch


def test_mempool_pool_is_used_and_kept_alive(torch):
    from cgtool.capture.graph import Graph, graph

    if not hasattr(torch.cuda, "MemPool"):
        pytest.skip("this torch has no torch.cuda.MemPool")
    x = torch.ones(1 << 16, device="cuda")
    mp = torch.cuda.MemPool()
    ref = weakref.ref(mp)
    g = Graph(keep_graph=True)
    with graph(g, pool=mp):
        y = x * 3
    assert tuple(mp.id) in [tuple(p) for p in g.pools()]
    del mp
    gc.collect()
    assert ref() is not None  # the graph keeps its MemPool alive
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 3.0))
    del y
    g.reset()
    gc.collect()
    assert ref() is None


FAILED_CAPTURE = textwrap.dedent(
    """
    import gc, json, sys, torch
    from cgtool.capture.graph import Graph, graph
    MiB = 1 << 20
    def reserved():
        gc.collect(); torch.cuda.synchronize(); torch.cuda.empty_cache()
        return torch.cuda.memory_reserved()
    x = torch.ones(16, device="cuda")
    warm = Graph()  # the first capture lazily allocates the RNG's graph-safe state: not a leak
    with graph(warm):
        x + 1
    warm.reset()
    out = {}
    for how in ("invalidated", "python_error"):
        before = reserved()
        g = Graph()
        try:
            with graph(g):
                a = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")
                if how == "invalidated":
                    torch.cuda.synchronize()  # not allowed while capturing: the capture is invalid
                raise ValueError("body failed")
        except Exception as e:
            out[how + "_error"] = "RuntimeError" if isinstance(e, RuntimeError) else type(e).__name__
        a = None
        held = reserved()
        g.reset()
        out[how] = {"before": before, "held_before_reset": held, "after_reset": reserved()}
    print(json.dumps(out))
    """
)


def test_failed_capture_pool_is_released_on_reset():
    """32 MiB allocated inside a capture: given back when the capture fails (invalidated), or by
    reset() after a body that raised (the capture itself ended cleanly and holds its pool)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", FAILED_CAPTURE], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    m = out["python_error"]
    assert m["held_before_reset"] >= m["before"] + (32 << 20), m  # the ended capture holds its pool
    assert m["after_reset"] == m["before"], m  # reset() gave it back
    # The invalidated capture: its pool was given back and its routing ended when capture_end
    # raised, so empty_cache() frees the block at once. torch 2.11 alone keeps the 32 MiB pool and
    # a 2 MiB segment (1 KiB allocated) after reset() and empty_cache().
    m = out["invalidated"]
    assert m["held_before_reset"] == m["before"] and m["after_reset"] == m["before"], m
    # torch 2.11 raises torch.AcceleratorError, a RuntimeError, for the sync inside the capture
    assert out["invalidated_error"] == "RuntimeError" and out["python_error_error"] == "ValueError"


def test_check_input_liveness_names_dead_inputs(torch):
    from cgtool.capture.graph import Graph, graph

    x = torch.randn(100, device="cuda")
    w = torch.randn(100, device="cuda")
    x * w  # warm up outside the capture
    torch.cuda.synchronize()
    g = Graph()
    with graph(g, check_input_liveness=True):
        tmp = x * w
        y = tmp + 1
    assert set(g._external_inputs) == {x.data_ptr(), w.data_ptr()}  # tmp and y are the graph's own
    del tmp
    gc.collect()
    g.replay()  # intermediate outputs may die: no error
    torch.cuda.synchronize()
    assert torch.allclose(y, x * w + 1)

    def drop_weight():
        nonlocal w
        del w

    drop_weight()
    gc.collect()
    with pytest.raises(RuntimeError, match=r"1 dead tensor") as e:
        g.replay()
    msg = str(e.value)
    assert "drop_weight" in msg and "Replay Traceback (Python)" in msg


def test_replay_hooks_and_export_hook_factories(torch, tmp_path):
    from cgtool.capture.graph import Graph, export_dot, export_graph_data, graph

    x = torch.ones(1024, device="cuda")
    g = Graph()  # keep_graph=False: both exports run while the template is still live
    g.register_capture_end_hook(export_dot(tmp_path / "g.dot"))
    g.register_post_instantiate_hook(export_graph_data(tmp_path / "g.json"))
    events = []
    g.register_replay_start_hook(lambda gr: events.append("start"))
    g.register_replay_end_hook(lambda gr: events.append("end"))
    with graph(g):
        y = (x + 1).relu()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert events == ["start", "end"] * 3
    assert torch.equal(y, torch.full_like(x, 2.0))
    assert (tmp_path / "g.dot").read_text().lstrip().startswith("digraph")
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["exec_graph_id"] > 0 and {n["node_type"] for n in data["nodes"]} == {"kernel"}
    assert all(n["tools_id"] >> 32 == data["exec_graph_id"] for n in data["nodes"])


def test_child_graph_node_reported_once_with_warning(torch):
    from cuda.bindings import runtime as rt

    from cgtool.capture.graph import Graph, graph

    dst = torch.zeros(64, device="cuda")
    x = torch.zeros(2000, device="cuda")
    g = Graph(keep_graph=True)
    with graph(g):
        x + 1
    err, body = rt.cudaGraphCreate(0)
    assert int(err) == 0
    p = rt.cudaMemsetParams()
    p.dst, p.elementSize, p.width, p.height, p.pitch, p.value = dst.data_ptr(), 4, dst.numel(), 1, 0, 0
    assert int(rt.cudaGraphAddMemsetNode(body, [], 0, p)[0]) == 0
    assert int(rt.cudaGraphAddChildGraphNode(g.raw_cuda_graph(), [], 0, body)[0]) == 0
    g.instantiate()
    with pytest.warns(UserWarning, match="child_graph"):
        data = g.get_graph_data()
    kinds = [n["node_type"] for n in data["nodes"]]
    assert kinds.count("child_graph") == 1 and "memset" not in kinds


def test_pool_arg_and_nested_use_mem_pool_retained_until_reset(torch):
    # The case of PyTorch's test_graph_mem_pool_arg_and_nested_use_mem_pool (upstream PR #187929):
    # a capture into a MemPool with a nested use_mem_pool(side). Expected counts: one use for each
    # MemPool object plus one for the graph that retains it (upstream's design).
    from cgtool.capture.graph import Graph, graph

    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        pytest.skip("this torch has no torch.cuda.MemPool / use_mem_pool")
    x = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    (x * 2 + 1).sum()  # warm up outside the capture
    torch.cuda.synchronize()
    default_pool, side_pool = torch.cuda.MemPool(), torch.cuda.MemPool()
    torch_use_mem_pool = torch.cuda.use_mem_pool
    g = Graph()
    with graph(g, pool=default_pool):
        y = x * 2
        with torch.cuda.use_mem_pool(side_pool):
            tmp = y + 1
        z = tmp * 3
    side_id = side_pool.id
    assert torch.cuda.use_mem_pool is torch_use_mem_pool  # torch's own again after the capture
    assert set(g.pools()) == {default_pool.id, side_id}
    assert default_pool.use_count() == 2 and side_pool.use_count() == 2
    seg_pools = {tuple(s["segment_pool_id"]) for s in torch.cuda.memory_snapshot()}
    assert tuple(side_id) in seg_pools  # tmp really lives in the side pool
    del tmp, side_pool
    gc.collect()
    torch.cuda.empty_cache()
    x.add_(1)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, (x * 2 + 1) * 3)
    del y, z
    g.reset()
    gc.collect()
    assert default_pool.use_count() == 1


def test_liveness_tracks_what_pytorchs_checker_tracks(torch):
    # The rules of PyTorch's checker (upstream main): no CUDA result -> nothing tracked; a tensor of
    # the capture's shared pool is not an input; pinned host memory only through a copy.
    from cgtool.capture.graph import Graph, graph, graph_pool_handle

    x = torch.randn(100, device="cuda")
    pinned = torch.randn(100).pin_memory()
    dest = torch.empty(100, device="cuda")
    torch.equal(x, x), x + 1, pinned * 2
    torch.cuda.synchronize()

    g0 = Graph()
    with graph(g0, check_input_liveness=True):
        assert torch.equal(x, x)
    assert dict(g0._external_inputs) == {}

    pool = graph_pool_handle()
    g1, g2 = Graph(), Graph()
    with graph(g1, pool=pool):
        y = x + 1
    external = torch.randn(100, device="cuda")
    (y * 2 + external).sum()
    torch.cuda.synchronize()
    with graph(g2, pool=pool, check_input_liveness=True):
        z = y * 2 + external
        host = pinned * 2  # a host op on pinned memory: not captured, not tracked
        dest.copy_(pinned, non_blocking=True)
    assert external.data_ptr() in g2._external_inputs and dest.data_ptr() in g2._external_inputs
    assert y.data_ptr() not in g2._external_inputs  # lives in the pool g2 captures into
    assert pinned.data_ptr() in g2._external_inputs  # read by the captured copy
    assert host.data_ptr() not in g2._external_inputs
    del y
    gc.collect()
    g1.replay()
    g2.replay()
    torch.cuda.synchronize()
    assert torch.allclose(z, (x + 1) * 2 + external)


def test_no_cuda_graph_t_message_is_pytorchs(torch, tmp_path):
    from cgtool.capture.graph import Graph, graph

    x = torch.ones(16, device="cuda")
    g = Graph()  # keep_graph=False: the template is gone once capture is finalized
    with graph(g):
        x + 1
    for call in (g.raw_cuda_graph, lambda: g.debug_dump(str(tmp_path / "g.dot"))):
        with pytest.raises(RuntimeError, match=r"No (cuda|hip)Graph_t is available"):
            call()
    assert not (tmp_path / "g.dot").exists()


def test_export_graph_data_writes_pytorchs_pickle_to_a_pkl_name(torch, tmp_path):
    # The bytes equal the standard pickle of get_graph_data(): nothing is unpickled here.
    import pickle

    from cgtool.capture.graph import Graph, export_graph_data, graph

    x = torch.zeros(2000, device="cuda")
    g = Graph(keep_graph=True)
    with graph(g, capture_error_mode="relaxed"):
        (x + 1).relu()
    g.register_post_instantiate_hook(export_graph_data(tmp_path / "kept.pkl"))
    g.register_post_instantiate_hook(export_graph_data(tmp_path / "kept.json"))
    g.instantiate()
    data = g.get_graph_data()
    assert (tmp_path / "kept.pkl").read_bytes() == pickle.dumps(data, protocol=pickle.DEFAULT_PROTOCOL)
    assert json.loads((tmp_path / "kept.json").read_text()) == json.loads(json.dumps(data))
