"""The per-node driver calls of a graph export through ctypes on libcuda.

cuda.bindings builds a Python object per handle and per parameter struct; these direct calls
build none and cost a fraction of that a node (docs/performance.md#hand-written-code).
Only stable, versioned entry points are
used (``cuGraphGetNodes``, ``cuGraphGetEdges_v2``, ``cuGraphNodeGetType``,
``cuGraphKernelNodeGetParams_v2``, ``cuFuncGetName``); when one is missing, :func:`load` returns
None (``cuGraphGetEdges_v2``: :meth:`Driver.edges` returns None) and the export falls back to
cuda.bindings.

Handle arrays are filled into ``array.array("Q")`` buffers: ``tolist()`` turns one into Python ints
at C speed, where indexing a ctypes array builds one object per element through ctypes' getters
(measured in ``benchmarks/bench_export.py``).
"""

from __future__ import annotations

import ctypes
from array import array
from typing import Any

_lib: Any = None

#: cuGraphGetEdges_v2 returns CUDA_ERROR_LOSSY_QUERY when edge data exists and no buffer is given.
_EDGE_DATA_BYTES = 8  # sizeof(CUgraphEdgeData): from_port, to_port, type, reserved[5]


class KernelParamsV2(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12.0+)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


_BATCH: Any = None


def _batch() -> Any:
    """The compiled graph reader (``capture/_graphread.c``), or None where it is not built."""
    global _BATCH
    if _BATCH is None:
        try:
            from cgtool.capture import _graphread

            _BATCH = _graphread
        except ImportError:
            _BATCH = False
    return _BATCH or None


def _address(buf: array) -> int:  # type: ignore[type-arg]
    return int(buf.buffer_info()[0])


class Driver:
    def __init__(self, lib: Any) -> None:
        self.get_nodes = lib.cuGraphGetNodes
        self.get_nodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        self.get_type = lib.cuGraphNodeGetType
        # Out-parameters typed c_void_p: callers pass an address (int) or a byref(); an int
        # converts faster than byref() to a POINTER argument does (benchmarks/bench_export.py).
        self.get_type.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.kparams = lib.cuGraphKernelNodeGetParams_v2
        self.kparams.argtypes = [ctypes.c_void_p, ctypes.c_void_p]  # CUDA_KERNEL_NODE_PARAMS_v2*
        self.func_name = lib.cuFuncGetName
        self.func_name.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p]
        for f in (self.get_nodes, self.get_type, self.kparams, self.func_name):
            f.restype = ctypes.c_int
        self.driver_version_fn = lib.cuDriverGetVersion
        self.driver_version_fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
        self.driver_version_fn.restype = ctypes.c_int
        self.get_edges: Any = getattr(lib, "cuGraphGetEdges_v2", None)  # CUDA 12.3+
        if self.get_edges is not None:
            self.get_edges.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 3 + [ctypes.POINTER(ctypes.c_size_t)]
            self.get_edges.restype = ctypes.c_int

    def entry_points(self) -> tuple[int, int, int, int]:
        """Addresses of cuGraphGetNodes, cuGraphGetEdges_v2 (0 when missing),
        cuGraphKernelNodeGetParams_v2 and cuFuncGetName, for the compiled ``read_graph``."""
        eps: tuple[int, int, int, int] | None = self.__dict__.get("_entry_points")
        if eps is None:
            def addr(fn: Any) -> int:
                return int(ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn is not None else 0

            eps = self.__dict__["_entry_points"] = (addr(self.get_nodes), addr(self.get_edges), addr(self.kparams),
                                                    addr(self.func_name))
        return eps

    def each(self, fn: Any, handles: list[int], base: int, stride: int) -> list[int]:
        """``fn(handle, base + i * stride)`` for every handle (``fn``: one of this driver's
        two-argument entry points, or another library's); the indices whose call failed. One C loop
        where the compiled helper is built (``capture/_graphread.c``: no call through ctypes per node;
        docs/performance.md#hand-written-code), else a C-level ``map()`` over the ctypes function."""
        batch = _batch()
        if batch is not None:
            addr = ctypes.cast(fn, ctypes.c_void_p).value
            if addr:
                return list(batch.call_each(addr, handles, base, stride))
        n = len(handles)
        return [i for i, rc in enumerate(map(fn, handles, range(base, base + n * stride, stride))) if rc]

    def nodes(self, graph: int) -> list[int]:
        """The graph's node handles, in cuGraphGetNodes order."""
        n = ctypes.c_size_t(0)
        if self.get_nodes(graph, None, ctypes.byref(n)) != 0:
            raise OSError("cuGraphGetNodes failed")
        if not n.value:
            return []
        buf = array("Q", bytes(8 * n.value))
        if self.get_nodes(graph, _address(buf), ctypes.byref(n)) != 0:
            raise OSError("cuGraphGetNodes failed")
        return buf[: n.value].tolist()

    def edges(self, graph: int) -> tuple[array, array] | None:  # type: ignore[type-arg]
        """(from handles, to handles) as ``array("Q")`` in cuGraphGetEdges order; None without
        cuGraphGetEdges_v2 or when it fails (the caller then asks cuda.bindings, whose error names
        the CUDA error)."""
        if self.get_edges is None:
            return None
        n = ctypes.c_size_t(0)
        if self.get_edges(graph, None, None, None, ctypes.byref(n)) != 0:
            return None
        frm, to = array("Q", bytes(8 * n.value)), array("Q", bytes(8 * n.value))
        if not n.value:
            return frm, to
        data = bytearray(_EDGE_DATA_BYTES * n.value)
        data_buf = (ctypes.c_char * len(data)).from_buffer(data)
        if self.get_edges(graph, _address(frm), _address(to), ctypes.addressof(data_buf), ctypes.byref(n)) != 0:
            return None
        return frm[: n.value], to[: n.value]

    def driver_version(self) -> int | None:
        """``cuDriverGetVersion`` (13000 for CUDA 13.0): needs no context and loads no runtime."""
        v = ctypes.c_int(0)
        return int(v.value) if self.driver_version_fn(ctypes.byref(v)) == 0 else None

    def name(self, func: int) -> str | None:
        p = ctypes.c_char_p()
        if not func or self.func_name(ctypes.byref(p), func) != 0 or not p.value:
            return None
        return p.value.decode(errors="replace")


def load() -> Driver | None:
    """The ctypes driver, or None when libcuda or an entry point is missing."""
    global _lib
    if _lib is None:
        try:
            _lib = Driver(ctypes.CDLL("libcuda.so.1"))
        except (OSError, AttributeError):
            _lib = False
    return _lib or None
