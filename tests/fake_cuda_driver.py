"""A stand-in for the driver and CUPTI entry points a graph export calls, made of C-callable ctypes
functions over a graph held in Python, so the export's read (``graphread.read_graph``: the compiled
one-call read and the column-by-column one) runs on a machine without a GPU.

The graph: ``n`` nodes with pointer-like handles (not sorted), some of them memset nodes (they
refuse ``cuGraphKernelNodeGetParams_v2`` and answer ``cuGraphNodeGetType`` with 2), kernels of a few
functions with their grid/block/shared memory, edges of a random DAG, and CUPTI node ids
``(graph_id << 32) | i``.
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass, field
from typing import Any

from cgtool.capture import _fastcuda

GET_NODES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))
GET_EDGES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_size_t))
CALL2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
FUNC_NAME = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
MEMSET_TYPE = 2  # cudaGraphNodeTypeMemset
KERNEL_TYPE = 0
INVALID_VALUE = 1


@dataclass
class FakeGraph:
    handles: list[int]
    kinds: list[str]  # "kernel" or "memset"
    funcs: list[int]  # per node, 0 for memsets
    grid: list[tuple[int, int, int]]
    block: list[tuple[int, int, int]]
    smem: list[int]
    edges: list[tuple[int, int]]  # (from handle, to handle)
    names: dict[int, bytes]  # function -> mangled name
    graph_id: int = 7
    exec_id: int = 11
    calls: dict[str, int] = field(default_factory=dict)


def make_graph(n: int, seed: int = 0, *, memsets: float = 0.1, funcs: int = 3, fan_in: tuple[int, ...] = (0, 1, 1, 2)) -> FakeGraph:
    rng = random.Random(seed)
    handles = rng.sample(range(0x7F00_0000_0000, 0x7F00_0000_0000 + 64 * (n + 10), 16), n)
    fn = [0x5500_0000_1000 + 0x40 * k for k in range(funcs)]
    names = {f: f"_Z6kernel{k}Pfi".encode() for k, f in enumerate(fn)}
    names[fn[-1]] = b"triton_poi_fused_add_0"  # one that does not demangle
    kinds = ["memset" if rng.random() < memsets else "kernel" for _ in range(n)]
    order = list(range(n))
    edges = []
    for b in range(1, n):
        for a in rng.sample(order[:b], min(b, rng.choice(fan_in))):
            edges.append((handles[a], handles[b]))
    rng.shuffle(edges)
    return FakeGraph(
        handles=handles, kinds=kinds,
        funcs=[rng.choice(fn) if k == "kernel" else 0 for k in kinds],
        grid=[(rng.randrange(1, 900), 1, 1) for _ in range(n)],
        block=[(rng.choice((64, 128, 256)), 1, 1) for _ in range(n)],
        smem=[rng.choice((0, 1024)) for _ in range(n)],
        edges=edges, names=names)


class FakeDriver:
    """What ``_fastcuda.Driver`` and ``graphread.CuptiIds`` offer, answered from a :class:`FakeGraph`."""

    def __init__(self, g: FakeGraph, *, graph_handle: int = 0xABC000, exec_handle: int = 0xDEF000,
                 edges_fail: bool = False) -> None:
        self.g, self.graph_handle, self.exec_handle = g, graph_handle, exec_handle
        index = {h: i for i, h in enumerate(g.handles)}
        self._keep = [ctypes.create_string_buffer(v) for v in g.names.values()]
        name_addr = {f: ctypes.addressof(b) for f, b in zip(g.names, self._keep)}

        def count(what: str) -> None:
            g.calls[what] = g.calls.get(what, 0) + 1

        @GET_NODES
        def get_nodes(graph: int, out: int, num: Any) -> int:
            count("nodes")
            if graph != graph_handle:
                return INVALID_VALUE
            if out:
                k = min(num[0], len(g.handles))
                (ctypes.c_uint64 * k).from_address(out)[:] = g.handles[:k]
                num[0] = k
            else:
                num[0] = len(g.handles)
            return 0

        @GET_EDGES
        def get_edges(graph: int, frm: int, to: int, data: int, num: Any) -> int:
            count("edges")
            if graph != graph_handle or edges_fail:
                return INVALID_VALUE
            if frm:
                k = min(num[0], len(g.edges))
                (ctypes.c_uint64 * k).from_address(frm)[:] = [a for a, _ in g.edges[:k]]
                (ctypes.c_uint64 * k).from_address(to)[:] = [b for _, b in g.edges[:k]]
                num[0] = k
            else:
                num[0] = len(g.edges)
            return 0

        @CALL2
        def kparams(node: int, out: int) -> int:
            count("kparams")
            i = index[node]
            if g.kinds[i] != "kernel":
                return INVALID_VALUE
            p = _fastcuda.KernelParamsV2.from_address(out)
            p.func = g.funcs[i]
            p.gridDimX, p.gridDimY, p.gridDimZ = g.grid[i]
            p.blockDimX, p.blockDimY, p.blockDimZ = g.block[i]
            p.sharedMemBytes = g.smem[i]
            p.kernelParams = 0x1234  # past the fields the export reads
            return 0

        @CALL2
        def get_type(node: int, out: int) -> int:
            count("type")
            ctypes.c_int.from_address(out).value = KERNEL_TYPE if g.kinds[index[node]] == "kernel" else MEMSET_TYPE
            return 0

        @FUNC_NAME
        def func_name(out: int, func: int) -> int:
            count("name")
            a = name_addr.get(func)
            if a is None:
                return INVALID_VALUE
            ctypes.c_void_p.from_address(out).value = a
            return 0

        @CALL2
        def node_id(node: int, out: int) -> int:
            count("node_id")
            i = index.get(node)
            if i is None:
                return INVALID_VALUE
            ctypes.c_uint64.from_address(out).value = (g.graph_id << 32) | i
            return 0

        self.get_nodes, self.get_edges, self.kparams, self.get_type = get_nodes, get_edges, kparams, get_type
        self.func_name, self._node = func_name, node_id
        self._node_addr = ctypes.cast(node_id, ctypes.c_void_p).value or 0

    # _fastcuda.Driver's methods, bound to this stand-in
    entry_points = _fastcuda.Driver.entry_points
    each = _fastcuda.Driver.each
    nodes = _fastcuda.Driver.nodes
    edges = _fastcuda.Driver.edges
    name = _fastcuda.Driver.name

    # graphread.CuptiIds
    def get_graph_exec_id(self, exec_: int) -> int:
        assert exec_ == self.exec_handle
        return self.g.exec_id

    def get_graph_node_id(self, node: int) -> int:
        out = ctypes.c_uint64()
        if self._node(node, ctypes.addressof(out)):
            raise OSError("cuptiGetGraphNodeId failed")
        return int(out.value)


class FakeRuntime:
    """The few cuda.bindings names ``read_graph`` touches on its ctypes paths."""

    class cudaGraphNodeType:
        cudaGraphNodeTypeKernel = KERNEL_TYPE
        cudaGraphNodeTypeMemset = MEMSET_TYPE

    @staticmethod
    def cudaGraph_t(init_value: int) -> int:
        return init_value

    @staticmethod
    def cudaGraphNode_t(init_value: int) -> int:
        return init_value


def install(monkeypatch: Any, drv: FakeDriver) -> None:
    """Point the export at the stand-in: its driver, cuda.bindings' few names, CUPTI's ids."""
    from cgtool.capture import export, graphread

    for mod in (export, graphread):
        monkeypatch.setattr(mod, "require_bindings", lambda what="": (FakeRuntime, object()))
    monkeypatch.setattr(graphread, "_NODE_TYPE_NAMES", None)
    monkeypatch.setattr(graphread, "_tools_id_probe", False)  # a driver before 13.1: CUPTI's ids
    monkeypatch.setattr(_fastcuda, "load", lambda: drv)
    monkeypatch.setattr(graphread, "_compiled_ids", lambda: drv)
