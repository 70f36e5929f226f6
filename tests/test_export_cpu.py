"""The pieces of the graph export that need no GPU: edge grouping and the kernel-parameter layout.
(The export as a whole is checked on the GPU machine against the export before issue 18.)"""

import ctypes
import random

import numpy as np

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
