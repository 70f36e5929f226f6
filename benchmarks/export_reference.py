"""The pure-Python graph export of commit 6243867, kept verbatim as an oracle:
``benchmarks/bench_export.py --check`` and ``tests/gpu/test_engine_gpu.py`` compare the optimised
``cgtool.capture.export.graph_data`` with it on real graphs (same JSON apart from the measured
``export_s``), and the benchmark prints its time beside the new one. Not used by cgtool itself.
Verbatim apart from the ctypes CUPTI helper it used, copied in at the end (cgtool does not have it);
the helpers that are the same in cgtool (node and edge lists, function names, child graphs, the
tools-id probe, the environment) are imported from cgtool.capture.export.

Differences to expect, by design: the old export named batch memory-op nodes ``unknown_<n>`` (``Graph``
renamed them afterwards); the new one names them ``batch_mem_op`` itself.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from cgtool.capture import _fastcuda
from cgtool.capture import graphread as _export
# The same in cgtool: taken from the live module rather than copied.
from cgtool.capture.export import (_child_summary, _func_name, _get_edges, _get_nodes, driver_has_tools_ids,
                                   environment)
from cgtool.capture._deps import check, optional_cupti, require_bindings
from cgtool.errors import CaptureError, MissingExtraError
from cgtool.artifacts.graph import LOW32, SCHEMA_VERSION
from cgtool.artifacts.names import demangle

_NODE_TYPE_NAMES: dict[int, str] | None = None


def _node_type_names(rt: Any) -> dict[int, str]:
    global _NODE_TYPE_NAMES
    if _NODE_TYPE_NAMES is None:
        T = rt.cudaGraphNodeType
        pairs = [
            ("cudaGraphNodeTypeKernel", "kernel"),
            ("cudaGraphNodeTypeMemcpy", "memcpy"),
            ("cudaGraphNodeTypeMemset", "memset"),
            ("cudaGraphNodeTypeHost", "host"),
            ("cudaGraphNodeTypeGraph", "child_graph"),
            ("cudaGraphNodeTypeEmpty", "empty"),
            ("cudaGraphNodeTypeWaitEvent", "wait_event"),
            ("cudaGraphNodeTypeEventRecord", "event_record"),
            ("cudaGraphNodeTypeMemAlloc", "mem_alloc"),
            ("cudaGraphNodeTypeMemFree", "mem_free"),
            ("cudaGraphNodeTypeExtSemaphoreSignal", "ext_semaphore_signal"),
            ("cudaGraphNodeTypeExtSemaphoreWait", "ext_semaphore_wait"),
            ("cudaGraphNodeTypeConditional", "conditional"),
        ]
        _NODE_TYPE_NAMES = {int(getattr(T, a)): b for a, b in pairs if hasattr(T, a)}
    return _NODE_TYPE_NAMES


def graph_data(
    raw_graph: int, raw_exec: int, *, with_meta: bool = True, id_source: str = "auto", impl: str = "auto"
) -> dict[str, Any]:
    """The export of the template ``raw_graph`` as instantiated into ``raw_exec``.

    The result has exactly get_graph_data()'s keys, plus ``"cgtool"`` when ``with_meta``.
    ``id_source`` forces "driver" or "cupti" (for tests); "auto" prefers the driver.
    ``impl`` picks the per-node calls: "ctypes" (fast), "bindings" (cuda.bindings), "auto".
    """
    rt, drv = require_bindings("Graph export")
    graph = rt.cudaGraph_t(init_value=int(raw_graph))
    exec_ = rt.cudaGraphExec_t(init_value=int(raw_exec))
    t0 = time.perf_counter()
    types = _node_type_names(rt)
    fast0 = _fastcuda.load() if impl != "bindings" else None
    # cuda.bindings node objects are only needed without the ctypes path, or for driver tools ids.
    nodes = _get_nodes(rt, graph) if (fast0 is None or id_source == "driver" or _export._tools_id_probe is not False) else []

    source = id_source
    if source == "auto":
        source = "driver" if nodes and driver_has_tools_ids(rt, nodes[0]) else "cupti"
    if source == "driver" and not nodes:
        nodes = _get_nodes(rt, graph)
    cupti = None
    if source == "driver":
        exec_id = check(rt.cudaGraphExecGetId(exec_), "cudaGraphExecGetId")
        tools_id_of = rt.cudaGraphNodeGetToolsId
    else:
        cupti = optional_cupti()
        if cupti is None:
            raise MissingExtraError(
                "Graph export on a CUDA driver older than 13.1",
                detail="cupti-python, which gives the node ids there (the driver's "
                "cudaGraphNodeGetToolsId needs 13.1); take `cupti-python` matching your CUDA",
            )
        exec_id = int(cupti.get_graph_exec_id(int(raw_exec)))

    # CUPTI's per-node id through ctypes when impl allows (the cupti-python wrapper costs more).
    cupti_node_id = cupti.get_graph_node_id if cupti is not None else None
    if cupti is not None and impl != "bindings":
        fc = load_cupti()
        if fc is not None:
            cupti_node_id = fc.node_id
    handle_to_idx: dict[int, int] = {}
    infos: list[dict[str, Any]] = []
    extras: list[dict[str, Any]] = []
    func_names: dict[int, str | None] = {}
    fast = _fastcuda.load() if impl != "bindings" else None
    if impl == "ctypes" and fast is None:
        raise CaptureError("The ctypes export path needs libcuda.so.1 with CUDA 12+ entry points.")
    handles = fast.nodes(int(raw_graph)) if fast is not None else [int(n) for n in nodes]
    kernel_t = next((k for k, t in types.items() if t == "kernel"), -1)
    child_t = next((k for k, t in types.items() if t == "child_graph"), -2)
    ctype = ctypes.c_int()
    kp = _fastcuda.KernelParamsV2()
    ctype_ref, kp_ref = ctypes.byref(ctype), ctypes.byref(kp)
    get_type_fast = fast.get_type if fast is not None else None
    kparams_fast = fast.kparams if fast is not None else None
    get_type = rt.cudaGraphNodeGetType
    CUgraphNode = drv.CUgraphNode
    type_name = types.get
    high = exec_id << 32
    for i, h in enumerate(handles):
        handle_to_idx[h] = i
        if get_type_fast is not None:
            get_type_fast(h, ctype_ref)
            ntype = ctype.value
        else:
            ntype = int(get_type(nodes[i])[1])
        if source == "driver":
            local = int(tools_id_of(nodes[i])[1]) & LOW32
        else:
            local = cupti_node_id(h) & LOW32  # type: ignore[misc]
        kname = None
        if ntype == kernel_t:
            if kparams_fast is not None and kparams_fast(h, kp_ref) == 0:
                f = kp.func or 0
                kname = func_names.get(f, _MISSING)
                if kname is _MISSING:
                    kname = func_names[f] = fast.name(f)  # type: ignore[union-attr]
                if with_meta:
                    extras.append(_kernel_extra(kname, [kp.gridDimX, kp.gridDimY, kp.gridDimZ],
                                                [kp.blockDimX, kp.blockDimY, kp.blockDimZ], kp.sharedMemBytes))
            else:
                err, p = drv.cuGraphKernelNodeGetParams(CUgraphNode(init_value=h))
                p = p if int(err) == 0 else None
                f = int(p.func) if p is not None else 0
                if f not in func_names:
                    func_names[f] = _func_name(drv, f)
                kname = func_names[f]
                if with_meta:
                    extras.append(_kernel_extra(
                        kname, [p.gridDimX, p.gridDimY, p.gridDimZ] if p is not None else None,
                        [p.blockDimX, p.blockDimY, p.blockDimZ] if p is not None else None,
                        p.sharedMemBytes if p is not None else None))
        elif with_meta:
            extras.append(_child_summary(rt, rt.cudaGraphNode_t(init_value=h)) if ntype == child_t else {})
        infos.append(
            {
                "index": i,
                "node_type": type_name(ntype) or f"unknown_{ntype}",
                "tools_id": high | local,
                "graph_id": exec_id,
                "node_id": local,
                "kernel_name": kname,
                "dependencies": [],
                "dependents": [],
            }
        )

    frm, to = _get_edges(rt, graph)
    for a, b in zip(frm, to):
        src = handle_to_idx.get(int(a))
        dst = handle_to_idx.get(int(b))
        if src is not None and dst is not None:
            infos[src]["dependents"].append(dst)
            infos[dst]["dependencies"].append(src)
    export_s = time.perf_counter() - t0

    out: dict[str, Any] = {"exec_graph_id": exec_id, "nodes": infos}
    if with_meta:
        out["cgtool"] = {
            "schema_version": SCHEMA_VERSION,
            "id_source": source,
            "environment": environment(),
            "timings": {"export_s": export_s},
            "nodes": extras,
        }
    return out


_MISSING: Any = object()


def _kernel_extra(kname: str | None, grid: Any, block: Any, smem: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"grid": grid, "block": block, "shared_mem": smem}
    if kname:
        dm = demangle(kname)
        if dm != kname:
            extra["demangled"] = dm
    return extra




# From cgtool/capture/_fastcuda.py as it was (the export now asks cupti-python itself).
class Cupti:
    """cuptiGetGraphNodeId / cuptiGetGraphExecId through ctypes on the libcupti that cupti-python loaded."""

    def __init__(self, lib: Any) -> None:
        self.node_id_fn = lib.cuptiGetGraphNodeId
        self.node_id_fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]  # (CUgraphNode, uint64_t*)
        self.node_id_fn.restype = ctypes.c_int
        self._out = ctypes.c_uint64()
        self._ref = ctypes.addressof(self._out)

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
