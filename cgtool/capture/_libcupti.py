"""libcupti located once for the whole of cgtool (:func:`load_libcupti`), without cupti-python, and
CUPTI's graph, exec and node ids through ctypes.

The graph reader (``graphread.py``) and the recorder's subscriber (``record/_subscriber.py``) both
use these; this module imports only the standard library (and numpy lazily, for a batch of node
ids), so that a recorded process's start-up, which loads the subscriber before the program's first
line, stays light.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from cgtool.capture import _fastcuda


#: Where the nvidia-cuda-cupti wheel puts libcupti, under a site-packages folder (CUDA 13, 12).
_WHEEL_PATHS = (("nvidia", "cu13", "lib", "libcupti.so.13"), ("nvidia", "cuda_cupti", "lib", "libcupti.so.12"))


def mapped_libcupti() -> list[str]:
    """The libcupti files this process has mapped (``/proc/self/maps``; empty where there is none)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            data = f.read()
    except OSError:  # no /proc: nothing known to be mapped
        return []
    if b"libcupti.so" not in data:  # the usual answer at a program's start: one search, no line split
        return []
    return sorted({line.split()[-1].decode() for line in data.splitlines() if b"libcupti.so" in line})


def _open(path: str) -> Any:
    lib = ctypes.CDLL(path)  # the same handle where the path is loaded: dlopen only counts up
    lib.cuptiSubscribe  # noqa: B018  (probe the symbol)
    return lib


def load_libcupti(cupti: Any = None) -> Any:
    """The process's libcupti, the one place cgtool finds it; OSError when it cannot be found.

    CUPTI takes one subscriber per process, and each copy of libcupti its own: every part of
    cgtool (the export's ids, the recorder's subscriber) must use the copy the process already
    maps, so that copy is the answer wherever there is one (torch, cupti-python or an earlier call
    loaded it). With ``cupti`` (cupti-python) and nothing mapped yet, a first cheap call makes it
    load its copy, which is then the answer. Else it is loaded as torch and cupti-python would
    load it: the nvidia-cuda-cupti wheel's file on ``sys.path`` first (torch looks there, and
    importing cuda.pathfinder adds to the program's start: docs/performance.md#hand-written-code),
    then cuda.pathfinder, which is how cupti-python finds it (a CUDA toolkit, conda).
    ``benchmarks/probe_libcupti.py`` checks on the GPU machine that a process maps one copy.
    """
    paths = mapped_libcupti()
    if not paths and cupti is not None:
        try:
            cupti.get_timestamp()
        except Exception:
            pass
        paths = mapped_libcupti()
    for path in paths:
        try:
            return _open(path)
        except (OSError, AttributeError):
            continue
    if cupti is not None and paths:
        raise OSError(f"the libcupti this process maps ({', '.join(paths)}) has no cuptiSubscribe")
    for entry in sys.path:
        for parts in _WHEEL_PATHS:
            path = os.path.join(entry or ".", *parts)
            if os.path.isfile(path):
                try:
                    return _open(path)
                except (OSError, AttributeError):
                    continue
    from cgtool.capture._deps import no_ldconfig

    try:
        with no_ldconfig():
            from cuda import pathfinder
    except ImportError as e:
        raise OSError(f"cuda.pathfinder is not installed ({e})") from None
    try:
        found = pathfinder.load_nvidia_dynamic_lib("cupti")
    except Exception as e:  # not found, or a pathfinder that does not know libcupti
        raise OSError(f"cuda.pathfinder could not load libcupti ({type(e).__name__}: {e})") from None
    try:
        return _open(found.abs_path)
    except AttributeError:
        raise OSError(f"{found.abs_path} has no cuptiSubscribe") from None


class CuptiIds:
    """CUPTI's graph and exec ids, node ids and timestamp through ctypes, with cupti-python's method
    names (``get_graph_exec_id`` / ``get_graph_node_id``) and a batch ``graph_node_ids``: the export's
    ids on drivers before 13.1 (``read_graph(..., cupti=ids)``) and the recorder's, so that neither
    needs cupti-python."""

    def __init__(self, lib: Any) -> None:
        self._graph = lib.cuptiGetGraphId
        self._graph.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self._exec = lib.cuptiGetGraphExecId
        self._exec.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self._node = lib.cuptiGetGraphNodeId
        self._node.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
        try:
            self._node_addr = ctypes.cast(self._node, ctypes.c_void_p).value or 0
        except (TypeError, ctypes.ArgumentError):  # not a C function (a test's stand-in): one call a node
            self._node_addr = 0
        self._ts = lib.cuptiGetTimestamp
        self._ts.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        self._batch = _fastcuda._batch()

    def get_graph_exec_id(self, exec_: int) -> int:
        out = ctypes.c_uint32()
        rc = self._exec(exec_, ctypes.byref(out))
        if rc:
            raise OSError(f"cuptiGetGraphExecId returned {rc}")
        return int(out.value)

    def get_graph_node_id(self, node: int) -> int:
        out = ctypes.c_uint64()
        rc = self._node(node, ctypes.byref(out))
        if rc:
            raise OSError(f"cuptiGetGraphNodeId returned {rc}")
        return int(out.value)

    def graph_node_ids(self, handles: list[int]) -> Any:
        """The ids of many nodes (a numpy uint64 array): one C loop where the compiled module is built."""
        import numpy as np

        if self._batch is not None and self._node_addr:
            out = np.zeros(len(handles), dtype=np.uint64)
            if out.size and self._batch.call_each(self._node_addr, list(handles), out.ctypes.data, 8):
                raise OSError("cuptiGetGraphNodeId failed")
            return out
        return np.array([self.get_graph_node_id(h) for h in handles], dtype=np.uint64)

    def get_graph_id(self, graph: int) -> int:
        out = ctypes.c_uint32()
        rc = self._graph(graph, ctypes.byref(out))
        if rc:
            raise OSError(f"cuptiGetGraphId returned {rc}")
        return int(out.value)

    def get_timestamp(self) -> int:
        out = ctypes.c_uint64()
        rc = self._ts(ctypes.byref(out))
        if rc:
            raise OSError(f"cuptiGetTimestamp returned {rc}")
        return int(out.value)
