"""Graph export: ``get_graph_data()``'s schema from a live cudaGraph_t and its cudaGraphExec_t.

Where the tools ids come from (recorded in the export as ``cgtool.id_source``):

* ``"driver"``: ``cudaGraphNodeGetToolsId`` / ``cudaGraphExecGetId`` (CUDA driver 13.1+), exactly
  as torch's own ``get_graph_data`` does.
* ``"cupti"``: on older drivers these calls return ``cudaErrorCallRequiresNewerDriver``;
  cupti-python's ``get_graph_node_id`` gives ``(template_graph_id << 32) | local_id`` and
  ``get_graph_exec_id`` the exec graph id, which CUPTI's activity records of a replay use. The
  same packing, ``(exec_id << 32) | local_id``, then joins an export to a CUPTI trace exactly.

Kernel names are looked up once per distinct function, not once per node.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
from typing import Any

from cgtool import __version__
from cgtool.capture import _fastcuda
from cgtool.capture._deps import check, optional_cupti, require_bindings
from cgtool.errors import CaptureError, MissingExtraError
from cgtool.artifacts.graph import LOW32, SCHEMA_VERSION
from cgtool.artifacts.names import demangle

_NODE_TYPE_NAMES: dict[int, str] | None = None
_tools_id_probe: bool | None = None  # driver supports cudaGraphNodeGetToolsId


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


def driver_has_tools_ids(rt: Any, node: Any) -> bool:
    """Whether ``cudaGraphNodeGetToolsId`` works on this driver (probed once per process)."""
    global _tools_id_probe
    if _tools_id_probe is None:
        fn = getattr(rt, "cudaGraphNodeGetToolsId", None)
        if fn is None:
            _tools_id_probe = False
        else:
            err = fn(node)[0]
            _tools_id_probe = int(err) == 0
    return _tools_id_probe


def id_source_available() -> str:
    """"driver", "cupti" or "none": what this process can use for tools ids (without a graph)."""
    rt, _ = require_bindings("Graph export")
    ver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    if ver >= 13010 and hasattr(rt, "cudaGraphNodeGetToolsId"):
        return "driver"
    return "cupti" if optional_cupti() is not None else "none"


def _get_nodes(rt: Any, graph: Any) -> list[Any]:
    _, num = check(rt.cudaGraphGetNodes(graph, numNodes=0), "cudaGraphGetNodes")
    if num == 0:
        return []
    nodes, num = check(rt.cudaGraphGetNodes(graph, numNodes=num), "cudaGraphGetNodes")
    return list(nodes[:num])


def _get_edges(rt: Any, graph: Any) -> tuple[list[Any], list[Any]]:
    res = check(rt.cudaGraphGetEdges(graph, numEdges=0), "cudaGraphGetEdges")
    num = res[-1]
    if num == 0:
        return [], []
    res = check(rt.cudaGraphGetEdges(graph, numEdges=num), "cudaGraphGetEdges")
    frm, to, num = res[0], res[1], res[-1]
    return list(frm[:num]), list(to[:num])


def graph_data(
    raw_graph: int, raw_exec: int, *, with_meta: bool = True, id_source: str = "auto", impl: str = "auto",
    with_environment: bool = True, handles_out: list[int] | None = None,
) -> dict[str, Any]:
    """The export of the template ``raw_graph`` as instantiated into ``raw_exec``.

    The result has exactly get_graph_data()'s keys, plus ``"cgtool"`` when ``with_meta``.
    ``id_source`` forces "driver" or "cupti" (for tests); "auto" prefers the driver.
    ``impl`` picks the per-node calls: "ctypes" (fast), "bindings" (cuda.bindings), "auto".
    ``with_environment=False`` leaves ``cgtool.environment`` out (the recorder adds it off the
    CUDA callback); ``handles_out`` receives the node handles, in the order of ``nodes``.
    """
    rt, drv = require_bindings("Graph export")
    graph = rt.cudaGraph_t(init_value=int(raw_graph))
    exec_ = rt.cudaGraphExec_t(init_value=int(raw_exec))
    t0 = time.perf_counter()
    types = _node_type_names(rt)
    fast0 = _fastcuda.load() if impl != "bindings" else None
    # cuda.bindings node objects are only needed without the ctypes path, or for driver tools ids.
    nodes = _get_nodes(rt, graph) if (fast0 is None or id_source == "driver" or _tools_id_probe is not False) else []

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
        fc = _fastcuda.load_cupti()
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
    if handles_out is not None:
        handles_out.extend(handles)
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

    edges = fast.edges(int(raw_graph)) if fast is not None else None
    if edges is None:  # cuda.bindings builds an object per edge end: only without the ctypes path
        frm, to = _get_edges(rt, graph)
        edges = [(int(a), int(b)) for a, b in zip(frm, to)]
    for a, b in edges:
        src = handle_to_idx.get(a)
        dst = handle_to_idx.get(b)
        if src is not None and dst is not None:
            infos[src]["dependents"].append(dst)
            infos[dst]["dependencies"].append(src)
    export_s = time.perf_counter() - t0

    out: dict[str, Any] = {"exec_graph_id": exec_id, "nodes": infos}
    if with_meta:
        out["cgtool"] = {
            "schema_version": SCHEMA_VERSION,
            "id_source": source,
            "environment": environment() if with_environment else {},
            "timings": {"export_s": export_s},
            "nodes": extras,
        }
    return out


_MISSING: Any = object()


def _kernel_extra(kname: str | None, grid: Any, block: Any, smem: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"grid": grid, "block": block, "shared_mem": smem}
    if kname:
        dm = _demangled(kname)
        if dm != kname:
            extra["demangled"] = dm
    return extra


@functools.lru_cache(maxsize=4096)
def _demangled(kname: str) -> str:
    # A graph launches the same few kernels many times; demangling is a C++ library call each.
    return demangle(kname)


def _func_name(drv: Any, f: int) -> str | None:
    if not f:
        return None
    err, name = drv.cuFuncGetName(drv.CUfunction(init_value=f))
    if int(err) != 0:
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def _child_summary(rt: Any, node: Any) -> dict[str, Any]:
    """Child graphs are not recursed into (their nodes have their own ids); say what they hold."""
    err, child = rt.cudaGraphChildGraphNodeGetGraph(node)
    if int(err) != 0:
        return {"child_graph": "unreadable"}
    inner = _get_nodes(rt, child)
    return {"child_graph": {"nodes": len(inner), "note": "not expanded: child graph nodes are listed as one node"}}


def environment(device: int | None = None) -> dict[str, Any]:
    """The environment fingerprint recorded in every artifact (a copy of the process's one):
    :func:`cuda_environment` and :func:`host_environment` together.

    ``device``: the CUDA device index; the calling thread's current device when None.
    """
    import torch

    dev = torch.cuda.current_device() if device is None else int(device)
    return {**cuda_environment(dev), **host_environment()}


@functools.lru_cache(maxsize=8)
def cuda_environment(dev: int) -> dict[str, Any]:
    """What torch and the CUDA runtime say about device ``dev`` (CUDA calls: make them on the
    thread that works on the device; ``cgtool record`` does, in its callback). Cached."""
    import torch

    rt, _ = require_bindings("Graph export")
    props = torch.cuda.get_device_properties(dev)
    drv_ver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    rt_ver = check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion")
    return {
        "cgtool": __version__,
        "torch": str(torch.__version__),
        "torch_cuda": None if torch.version.cuda is None else str(torch.version.cuda),
        "cuda_runtime": rt_ver,
        "cuda_driver": drv_ver,
        "device": str(props.name),
        "device_index": dev,
        "capability": list(torch.cuda.get_device_capability(dev)),
        "sm_count": int(props.multi_processor_count),
        "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
    }


@functools.lru_cache(maxsize=1)
def host_environment() -> dict[str, Any]:
    """The driver's version string (NVML) and the installed package versions: no CUDA call, so any
    thread may ask. Cached: NVML initialisation alone costs tens of milliseconds."""
    return {
        "driver_version": _nvml_driver(),
        "cupti_python": _pkg_version("cupti-python") if optional_cupti() is not None else None,
        "cuda_bindings": _pkg_version("cuda-bindings"),
    }


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _nvml_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return None
