"""The per-node driver calls of a graph export through ctypes on libcuda.

cuda.bindings builds a Python object per handle and per parameter struct, which costs about
10 µs a node; these direct calls cost under 1 µs each. Only stable, versioned entry points are
used (``cuGraphGetNodes``, ``cuGraphNodeGetType``, ``cuGraphKernelNodeGetParams_v2``,
``cuFuncGetName``, ``cuGraphGetEdges_v2``); when one is missing, :func:`load` returns None (or
``edges`` returns None) and the export falls back to cuda.bindings.
"""

from __future__ import annotations

import ctypes
from typing import Any

_lib: Any = None


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


class Driver:
    def __init__(self, lib: Any) -> None:
        self.get_nodes = lib.cuGraphGetNodes
        self.get_nodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        self.get_type = lib.cuGraphNodeGetType
        self.get_type.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        self.kparams = lib.cuGraphKernelNodeGetParams_v2
        self.kparams.argtypes = [ctypes.c_void_p, ctypes.POINTER(KernelParamsV2)]
        self.func_name = lib.cuFuncGetName
        self.func_name.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p]
        for f in (self.get_nodes, self.get_type, self.kparams, self.func_name):
            f.restype = ctypes.c_int
        # cuGraphGetEdges_v2 (CUDA 12.3+) hands edge data (ports, type) beside the ends; the
        # unversioned symbol refuses graphs whose edges carry data (CUDA_ERROR_LOSSY_QUERY).
        self.get_edges = getattr(lib, "cuGraphGetEdges_v2", None)
        if self.get_edges is not None:
            self.get_edges.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_size_t)]
            self.get_edges.restype = ctypes.c_int

    def nodes(self, graph: int) -> list[int]:
        n = ctypes.c_size_t(0)
        if self.get_nodes(graph, None, ctypes.byref(n)) != 0:
            raise OSError("cuGraphGetNodes failed")
        arr = (ctypes.c_void_p * n.value)()
        if n.value and self.get_nodes(graph, arr, ctypes.byref(n)) != 0:
            raise OSError("cuGraphGetNodes failed")
        return [v or 0 for v in arr[: n.value]]

    def edges(self, graph: int) -> list[tuple[int, int]] | None:
        """The graph's edges as (from, to) node handles; None when the entry point is missing or fails."""
        if self.get_edges is None:
            return None
        n = ctypes.c_size_t(0)
        if self.get_edges(graph, None, None, None, ctypes.byref(n)) != 0:
            return None
        if n.value == 0:
            return []
        m = n.value
        frm, to = (ctypes.c_void_p * m)(), (ctypes.c_void_p * m)()
        data = (ctypes.c_uint8 * (8 * m))()  # CUgraphEdgeData: 8 bytes each
        if self.get_edges(graph, frm, to, data, ctypes.byref(n)) != 0:
            return None
        k = min(m, n.value)
        return [(a or 0, b or 0) for a, b in zip(frm[:k], to[:k])]

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


class Cupti:
    """cuptiGetGraphNodeId / cuptiGetGraphExecId through ctypes on the libcupti that cupti-python loaded."""

    def __init__(self, lib: Any) -> None:
        self.node_id_fn = lib.cuptiGetGraphNodeId
        self.node_id_fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
        self.node_id_fn.restype = ctypes.c_int
        self._out = ctypes.c_uint64()
        self._ref = ctypes.byref(self._out)

    def node_id(self, node: int) -> int:
        if self.node_id_fn(node, self._ref) != 0:
            raise OSError("cuptiGetGraphNodeId failed")
        return self._out.value


_cupti: Any = None


def load_cupti() -> Cupti | None:
    """The ctypes CUPTI entry points, from the libcupti already mapped into this process."""
    global _cupti
    if _cupti is None:
        _cupti = False
        try:
            with open("/proc/self/maps") as f:
                paths = {line.split()[-1] for line in f if "libcupti.so" in line}
            for p in sorted(paths):
                try:
                    _cupti = Cupti(ctypes.CDLL(p))
                    break
                except (OSError, AttributeError):
                    continue
        except OSError:
            pass
    return _cupti or None
