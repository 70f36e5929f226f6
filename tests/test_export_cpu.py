"""The pieces of the graph export that need no GPU: edge grouping and the kernel-parameter layout.
(The export as a whole is checked on the GPU machine against the pure-Python reference export,
benchmarks/export_reference.py.)"""

import ctypes
import random

import numpy as np
import pytest

from cgtool.capture import _fastcuda
from cgtool.capture.export import _KPARAMS_DTYPE, _adjacency


def _by_loop(handles, frm, to):
    """The old export's way: two dict look-ups and two appends per edge."""
    index = {h: i for i, h in enumerate(handles)}
    deps = [[] for _ in handles]
    dents = [[] for _ in handles]
    for a, b in zip(frm, to):
        s, d = index.get(a), index.get(b)
        if s is not None and d is not None:
            dents[s].append(d)
            deps[d].append(s)
    return deps, dents


def test_adjacency_equals_the_per_edge_loop_in_order():
    rng = random.Random(18)
    for n in (0, 1, 2, 7, 200):
        handles = rng.sample(range(1 << 40, (1 << 40) + 10 * n + 10), n)  # pointer-like, unsorted
        frm, to = [], []
        for _ in range(3 * n):
            a, b = rng.randrange(n) if n else 0, rng.randrange(n) if n else 0
            if n and a != b:
                frm.append(handles[a])
                to.append(handles[b])
        if n:
            frm.append(12345)  # an edge from a node outside the list is left out
            to.append(handles[0])
        assert _adjacency(handles, frm, to) == _by_loop(handles, frm, to)


def test_kernel_params_layout_as_numpy_reads_it():
    params = (_fastcuda.KernelParamsV2 * 3)()
    for i, p in enumerate(params):
        p.func = 0x7F00_0000_0000 + i
        p.gridDimX, p.gridDimY, p.gridDimZ = 10 * i + 1, 2, 3
        p.blockDimX, p.blockDimY, p.blockDimZ = 128, 4, 5
        p.sharedMemBytes = 1000 + i
        p.kernelParams = 99  # after the fields read: must not leak into them
    assert _KPARAMS_DTYPE.itemsize == ctypes.sizeof(_fastcuda.KernelParamsV2)
    col = np.frombuffer(memoryview(params), dtype=_KPARAMS_DTYPE)
    assert col["func"].tolist() == [0x7F00_0000_0000 + i for i in range(3)]
    assert col["grid"].tolist() == [[10 * i + 1, 2, 3] for i in range(3)]
    assert col["block"].tolist() == [[128, 4, 5]] * 3
    assert col["smem"].tolist() == [1000, 1001, 1002]


def test_each_calls_every_handle_with_its_slot_and_reports_failures():
    """Driver.each (one C loop where the compiled helper is built, else map()) against a plain loop:
    the entry point is a C-callable stand-in that writes 3 * handle into its slot and fails on
    handles divisible by 5."""
    import ctypes

    from cgtool.capture import _fastcuda

    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    @proto
    def fake(h, out):
        ctypes.c_uint64.from_address(out).value = 3 * h
        return 1 if h % 5 == 0 else 0

    handles = [7, 10, 11, 25, 1 << 40, 13]
    out = (ctypes.c_uint64 * (2 * len(handles)))()
    drv = _fastcuda.Driver.__new__(_fastcuda.Driver)  # no libcuda needed: `each` uses the function given
    failed = drv.each(fake, handles, ctypes.addressof(out), 16)  # every other slot (a stride of 16 bytes)
    assert failed == [i for i, h in enumerate(handles) if h % 5 == 0]
    assert [out[2 * i] for i in range(len(handles))] == [3 * h for h in handles]
    assert all(out[2 * i + 1] == 0 for i in range(len(handles)))


def test_compiled_dicts_equal_the_comprehension_key_for_key():
    import json

    import pytest

    from cgtool.capture import _fastcuda

    batch = _fastcuda._batch()
    if batch is None:
        pytest.skip("the compiled helper is not built here")
    rng = random.Random(7)
    n = 50
    grid = [[rng.randrange(9), 1, 1] for _ in range(n)]
    smem = [rng.randrange(4096) for _ in range(n)]
    dm = [None if rng.random() < 0.3 else f"f{i}()" for i in range(n)]
    got = batch.dicts(("grid", "block", "shared_mem", "demangled"), (grid, grid, smem, dm), (False, False, False, True))
    want = [{"grid": g, "block": g, "shared_mem": s} if d is None else {"grid": g, "block": g, "shared_mem": s,
                                                                      "demangled": d}
            for g, s, d in zip(grid, smem, dm)]
    assert json.dumps(got) == json.dumps(want)  # same keys in the same order
    with pytest.raises(ValueError):
        batch.dicts(("a", "b"), ([1], [1, 2]), (False, False))


def _raw_fields(raw):
    """A RawGraph as plain values (numpy columns and the params buffer as lists/bytes)."""
    import numpy as np

    from cgtool.capture.export import _KPARAMS_DTYPE

    col = np.frombuffer(memoryview(raw.params), dtype=_KPARAMS_DTYPE) if raw.handles else None
    return {
        "exec_id": raw.exec_id, "source": raw.source, "handles": list(raw.handles),
        "frm": raw.frm.tolist(), "to": raw.to.tolist(), "refused": list(raw.refused),
        "other_types": raw.other_types, "func_names": raw.func_names, "ids": raw.ids.tolist(),
        "func": None if col is None else [f if i not in raw.refused else 0 for i, f in enumerate(col["func"].tolist())],
        "grid": None if col is None else col["grid"].tolist(), "block": None if col is None else col["block"].tolist(),
        "smem": None if col is None else col["smem"].tolist(),
    }


@pytest.mark.parametrize("n,fan_in", [(0, (1,)), (1, (1,)), (2, (1,)), (40, (0, 1, 1, 2)), (1000, (0, 1, 1, 2)),
                                      (60, (5, 6))])
def test_compiled_read_equals_the_column_by_column_read(monkeypatch, n, fan_in):
    """export.read_graph through the compiled helper's one call (``_graphread.read_graph``) and through
    the ctypes columns (impl="map"), over one stand-in driver: the same RawGraph, the same export
    document, and the stand-in's own graph in it (ids, names, kernels, edges)."""
    import json

    import fake_cuda_driver as fake

    from cgtool.capture import _fastcuda, export

    if _fastcuda._batch() is None:
        pytest.skip("the compiled helper is not built here")
    g = fake.make_graph(n, seed=n, fan_in=fan_in)
    drv = fake.FakeDriver(g)
    fake.install(monkeypatch, drv)
    compiled = export.read_graph(drv.graph_handle, drv.exec_handle)
    by_map = export.read_graph(drv.graph_handle, drv.exec_handle, impl="map")
    assert _raw_fields(compiled) == _raw_fields(by_map)
    a = export.build(compiled, with_environment=False).data
    b = export.build(by_map, with_environment=False).data
    for d in (a, b):
        d["cgtool"]["timings"] = {}
    assert json.dumps(a) == json.dumps(b)
    # ... and both say what the stand-in holds (an independent account of the graph)
    idx = {h: i for i, h in enumerate(g.handles)}
    nodes = a["nodes"]
    assert [nd["tools_id"] for nd in nodes] == [(g.exec_id << 32) | i for i in range(n)]
    assert [nd["kernel_name"] for nd in nodes] == [g.names[f].decode() if f else None for f in g.funcs]
    assert [nd["node_type"] for nd in nodes] == ["kernel" if k == "kernel" else "memset" for k in g.kinds]
    want_deps = [[] for _ in range(n)]
    for x, y in g.edges:
        want_deps[idx[y]].append(idx[x])
    assert [nd["dependencies"] for nd in nodes] == want_deps
    assert [m.get("grid") for m in a["cgtool"]["nodes"]] == [list(gr) if k == "kernel" else None
                                                            for gr, k in zip(g.grid, g.kinds)]
    # names: once per distinct function, not once per node
    assert g.calls.get("name", 0) <= 2 * (len(set(g.funcs)))


def test_compiled_read_leaves_edges_to_the_caller_when_the_driver_refuses():
    import fake_cuda_driver as fake

    from cgtool.capture import _fastcuda

    batch = _fastcuda._batch()
    if batch is None:
        pytest.skip("the compiled helper is not built here")
    drv = fake.FakeDriver(fake.make_graph(20, seed=3), edges_fail=True)
    size = ctypes.sizeof(_fastcuda.KernelParamsV2)
    handles, frm, to, params, refused, funcs, ids = batch.read_graph(drv.entry_points() + (0,), drv.graph_handle, size)
    assert frm is None and to is None and ids is None
    assert handles == drv.g.handles and len(params) == 20 * size
    with pytest.raises(OSError, match="cuGraphGetNodes"):
        batch.read_graph(drv.entry_points() + (0,), 0x1, size)  # a graph the driver does not know


def test_compiled_adjacency_equals_the_per_edge_loop():
    from cgtool.capture import _fastcuda

    batch = _fastcuda._batch()
    if batch is None:
        pytest.skip("the compiled helper is not built here")
    rng = random.Random(5)
    for n in (0, 1, 3, 50, 3000):
        handles = rng.sample(range(1 << 40, (1 << 40) + 40 * n + 40, 8), n)
        if n > 2:
            handles[1] = 0  # handle 0 (the table's empty mark) is a node like any other
        pairs = [(rng.randrange(n), rng.randrange(n)) for _ in range(2 * n)] if n else []
        frm = [handles[a] for a, b in pairs if a != b] + [999]  # 999: not a node, left out
        to = [handles[b] for a, b in pairs if a != b] + [handles[0] if n else 998]
        got = batch.adjacency(handles, np.array(frm, dtype=np.uint64), np.array(to, dtype=np.uint64))
        assert got == _by_loop(handles, frm, to) == _adjacency(handles, frm, to)
