"""Reading a live CUDA graph: every driver and CUPTI call a graph export makes, and nothing else.

:func:`read_graph` (and its one-call form :func:`read_quick`) read a template graph and its exec;
``capture/export.py`` builds the export document from what they read without a CUDA call, so that
``cgtool record`` reads in its CUDA callback, while the template is alive, and builds in its writer
thread. Both the export and the recorder import this module; it imports neither.

Where the tools ids come from (recorded in the export as ``cgtool.id_source``):

* ``"driver"``: ``cudaGraphNodeGetToolsId`` / ``cudaGraphExecGetId`` (CUDA driver 13.1+), exactly
  as torch's own ``get_graph_data`` does.
* ``"cupti"``: on older drivers these calls return ``cudaErrorCallRequiresNewerDriver``;
  CUPTI's ``cuptiGetGraphNodeId`` gives ``(template_graph_id << 32) | local_id`` and
  ``cuptiGetGraphExecId`` the exec graph id, which CUPTI's activity records of a replay use. The
  same packing, ``(exec_id << 32) | local_id``, then joins an export to a CUPTI trace exactly.
  :class:`CuptiIds` makes these calls through ctypes on libcupti (:func:`load_libcupti`), else
  cupti-python's module does.

How it is fast (``benchmarks/bench_export.py`` measures it against the bare cudaGraphGetNodes +
cudaGraphGetEdges calls, at 1k, 10k and 100k nodes): where the compiled helper
(``capture/_graphread.c``, any supported Python) is built, one C call reads the nodes, the edges,
every node's kernel parameters (straight into one array of structs, read by numpy), each distinct
function's name and CUPTI's node ids; else each per-node call is made for every node by a C-level
``map()`` (``tests/test_export_cpu.py`` runs both reads over a stand-in driver). Only nodes that
are not kernels are asked their type; names are demangled once per function.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from cgtool.capture import _fastcuda
from cgtool.capture._deps import check, optional_cupti, require_bindings
from cgtool.errors import CaptureError, MissingExtraError
from cgtool.artifacts.names import demangle

_NODE_TYPE_NAMES: dict[int, str] | None = None
_tools_id_probe: bool | None = None  # driver supports cudaGraphNodeGetToolsId


def _node_type_names(rt: Any, drv: Any) -> dict[int, str]:
    """Node-type enum value -> get_graph_data()'s ``node_type`` name."""
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
        names = {int(getattr(T, a)): b for a, b in pairs if hasattr(T, a)}
        # The runtime's enum has no batch memory-op member; the driver's has. PyTorch's name.
        batch = getattr(getattr(drv, "CUgraphNodeType", None), "CU_GRAPH_NODE_TYPE_BATCH_MEM_OP", None)
        if batch is not None:
            names.setdefault(int(batch), "batch_mem_op")
        _NODE_TYPE_NAMES = names
    return _NODE_TYPE_NAMES


def driver_has_tools_ids(rt: Any, node: Any) -> bool:
    """Whether ``cudaGraphNodeGetToolsId`` works on this driver (probed once per process)."""
    global _tools_id_probe
    if _tools_id_probe is None and not driver_may_have_tools_ids():
        _tools_id_probe = False
    if _tools_id_probe is None:
        fn = getattr(rt, "cudaGraphNodeGetToolsId", None)
        if fn is None:
            _tools_id_probe = False
        else:
            err = fn(node)[0]
            _tools_id_probe = int(err) == 0
    return _tools_id_probe


def driver_may_have_tools_ids() -> bool:
    """False when libcuda's version says the driver predates the tools ids (CUDA 13.1): then the
    probe above needs no call through cuda.bindings' runtime, whose first use in a process (its
    own runtime initialisation) would slow the first recorded graph's instantiation
    (docs/performance.md#hand-written-code). The recorder asks this before the program
    captures anything (``Recorder._after_torch``)."""
    global _tools_id_probe
    fast = _fastcuda.load()
    v = fast.driver_version() if fast is not None else None
    if v is not None and v < 13010:
        _tools_id_probe = False
        return False
    return True


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



_IDS: Any = None


def _compiled_ids() -> Any:
    """CUPTI's ids through ctypes with the compiled loop (:class:`CuptiIds`), or None where the
    compiled helper is not built or libcupti is not found (cupti-python then)."""
    global _IDS
    if _IDS is None:
        _IDS = False
        if _fastcuda._batch() is not None:
            try:
                _IDS = CuptiIds(load_libcupti())
            except (OSError, AttributeError):
                pass
    return _IDS or None


def _installed(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False



@dataclass
class RawGraph:
    """What an export reads from the driver (and CUPTI), before anything is built from it.

    :func:`read_graph` makes every CUDA call an export needs; :func:`build` makes none, so the
    recorder reads a graph in its CUDA callback, while the template graph is alive, and builds
    the document in its writer thread (a CUDA call there could deadlock with the program's).
    """

    exec_id: int
    source: str  # "driver" or "cupti": where the tools ids come from
    handles: list[int]
    frm: np.ndarray  # edges as node handles (uint64)
    to: np.ndarray
    params: Any  # _fastcuda.KernelParamsV2 * n
    refused: list[int]  # nodes that are not kernels read by ctypes
    other_types: dict[int, int]  # node index -> type, for nodes other than kernels
    by_bindings: dict[int, tuple[str | None, dict[str, Any]]]  # kernels read through cuda.bindings
    funcs_known: dict[int, tuple[str | None, str | None]]  # function -> (kernel name, demangled)
    func_names: dict[int, str | None]  # function -> its name, for the other functions
    ids: np.ndarray  # tools-id local parts (uint64), per node
    names: dict[int, str]  # node type enum -> node_type name
    kernel_t: int
    children: dict[int, dict[str, Any]]  # child-graph summaries (with_meta)
    t0: float  # perf_counter at the start of the read


@dataclass(frozen=True, slots=True)
class QuickRead:
    """What the compiled read takes from a live graph: ``_graphread.read_graph``'s result (handles,
    edges, kernel parameters, function names, CUPTI's node ids), the exec graph id and the types
    of the nodes that are not kernels. :func:`complete` makes the :class:`RawGraph` of it without a
    CUDA call, so the recorder reads in its CUDA callback and completes in its writer thread."""

    c: tuple[Any, ...]
    exec_id: int
    types: dict[int, int]  # node index -> type, for the nodes refusing the kernel-parameters call
    t0: float

    @property
    def handles(self) -> list[int]:
        handles: list[int] = self.c[0]
        return handles


_KP_SIZE = ctypes.sizeof(_fastcuda.KernelParamsV2)


def read_quick(raw_graph: int, raw_exec: int, *, cupti: Any = None) -> QuickRead | None:
    """The compiled read: one C call and the exec graph id, nothing else in Python. None where it
    does not apply, and :func:`read_graph`'s general path reads instead: no compiled helper or
    libcuda entry points, a driver that gives tools ids itself (13.1+), edges ctypes cannot read, or
    a node that needs cuda.bindings (a kernel refusing the ctypes call, a child graph)."""
    t0 = time.perf_counter()
    batch, fast = _fastcuda._batch(), _fastcuda.load()
    if batch is None or fast is None:
        return None
    if _tools_id_probe is None:
        driver_may_have_tools_ids()
    if _tools_id_probe is not False:  # the driver's ids (13.1+), or not known yet: the general path
        return None
    ids = cupti if cupti is not None else _compiled_ids()
    addr = int(getattr(ids, "_node_addr", 0) or 0)
    if not addr:
        return None
    c = batch.read_graph(fast.entry_points() + (addr,), raw_graph, _KP_SIZE)
    if c[1] is None:
        return None
    types: dict[int, int] = {}
    if c[4]:
        names = _NODE_TYPE_NAMES or _node_type_names(*require_bindings("Graph export"))
        ctype = ctypes.c_int()
        at = ctypes.addressof(ctype)
        handles = c[0]
        for i in c[4]:
            fast.get_type(handles[i], at)
            t = ctype.value
            if names.get(t) in ("kernel", "child_graph"):
                return None
            types[i] = t
    return QuickRead(c, int(ids.get_graph_exec_id(raw_exec)), types, t0)


def complete(q: QuickRead) -> RawGraph:
    """The :class:`RawGraph` of a :func:`read_quick`: no CUDA call."""
    handles, frm_b, to_b, params, refused, func_names, c_ids = q.c
    names = dict(_node_type_names(*require_bindings("Graph export")))
    n = len(handles)
    frm, to = (np.frombuffer(e, dtype=np.uint64) if len(e) else np.zeros(0, np.uint64) for e in (frm_b, to_b))
    return RawGraph(exec_id=q.exec_id, source="cupti", handles=handles, frm=frm, to=to, params=params,
                    refused=refused, other_types=dict(q.types), by_bindings={}, funcs_known={},
                    func_names=func_names, ids=np.frombuffer(c_ids, dtype=np.uint64) if n else np.zeros(0, np.uint64),
                    names=names, kernel_t=next((k for k, t in names.items() if t == "kernel"), -1), children={},
                    t0=q.t0)


def read_graph(raw_graph: int, raw_exec: int, *, with_meta: bool = True, id_source: str = "auto",
               impl: str = "auto", cupti: Any = None) -> RawGraph:
    """Every driver and CUPTI call of an export of ``raw_graph`` (instantiated as ``raw_exec``).

    Where the compiled helper is built and CUPTI gives the ids, the nodes, edges, kernel parameters,
    function names and CUPTI's node ids are read by one C call (:func:`read_quick`, completed by
    :func:`complete`); else column by column from Python, each per-node call made for every node
    by a C-level ``map()`` (``impl="map"``). Both give the same :class:`RawGraph`
    (``tests/test_export_cpu.py`` runs both over one stand-in driver)."""
    raw_graph, raw_exec = int(raw_graph), int(raw_exec)
    if impl in ("auto", "ctypes") and id_source != "driver":
        quick = read_quick(raw_graph, raw_exec, cupti=cupti)
        if quick is not None:
            return complete(quick)
    cupti_ids = cupti
    rt, drv = require_bindings("Graph export")
    t0 = time.perf_counter()
    fast = _fastcuda.load() if impl != "bindings" else None
    if impl == "ctypes" and fast is None:
        raise CaptureError("The ctypes export path needs libcuda.so.1 with CUDA 12+ entry points.")
    size = ctypes.sizeof(_fastcuda.KernelParamsV2)
    # cuda.bindings objects, on the cuda.bindings path only
    nodes: list[Any] = [] if fast is not None else _get_nodes(rt, rt.cudaGraph_t(init_value=raw_graph))
    handles = fast.nodes(raw_graph) if fast is not None else [int(n) for n in nodes]
    edges = fast.edges(raw_graph) if fast is not None else None
    # Kernel parameters straight into one array of structs, each driver call made for every
    # node by a C-level map() (the loop's own bytecode cost as much as the calls): a kernel node
    # answers cuGraphKernelNodeGetParams, any other node type refuses it
    # (CUDA_ERROR_INVALID_VALUE), and only those nodes are asked their type.
    params: Any = (_fastcuda.KernelParamsV2 * len(handles))()
    if fast is not None and handles:
        refused = fast.each(fast.kparams, handles, ctypes.addressof(params), size)
    else:
        refused = list(range(len(handles)))

    def node_obj(i: int) -> Any:
        return nodes[i] if nodes else rt.cudaGraphNode_t(init_value=handles[i])

    source = id_source
    if source == "auto":
        if _tools_id_probe is not None:  # probed once per process: no cuda.bindings node object needed
            source = "driver" if handles and _tools_id_probe else "cupti"
        else:
            source = "driver" if handles and driver_has_tools_ids(rt, node_obj(0)) else "cupti"
    node_id: Any = None  # CUPTI's id of a node handle
    if source == "driver":
        exec_id = check(rt.cudaGraphExecGetId(rt.cudaGraphExec_t(init_value=raw_exec)), "cudaGraphExecGetId")
        tools_id_of = rt.cudaGraphNodeGetToolsId

        def tools_local(i: int) -> int:
            return int(tools_id_of(node_obj(i))[1])
    else:
        if cupti_ids is None:
            cupti_ids = _compiled_ids()
        cupti = cupti_ids if cupti_ids is not None else optional_cupti()
        if cupti is None:
            raise MissingExtraError(
                "Graph export on a CUDA driver older than 13.1",
                detail="cupti-python, which gives the node ids there (the driver's "
                "cudaGraphNodeGetToolsId needs 13.1); take `cupti-python` matching your CUDA",
            )
        exec_id = int(cupti.get_graph_exec_id(raw_exec))
        # One C loop over cuptiGetGraphNodeId where the compiled helper is built (``_compiled_ids``);
        # else cupti-python's own (Cython) call, faster than cuptiGetGraphNodeId through ctypes
        # (bench_export.py prints both; docs/performance.md#hand-written-code).
        node_id = cupti.get_graph_node_id

    names = dict(_node_type_names(rt, drv))  # type enum -> node_type, completed below for unknowns
    kernel_t = next((k for k, t in names.items() if t == "kernel"), -1)
    child_t = next((k for k, t in names.items() if t == "child_graph"), -2)
    n = len(handles)
    if edges is not None:
        frm, to = (np.frombuffer(e, dtype=np.uint64) if len(e) else np.zeros(0, np.uint64) for e in edges)
    else:
        frm_o, to_o = _get_edges(rt, rt.cudaGraph_t(init_value=raw_graph))
        frm = np.array([int(a) for a in frm_o], dtype=np.uint64)
        to = np.array([int(b) for b in to_o], dtype=np.uint64)

    other_types: dict[int, int] = {}  # node index -> type, for nodes other than kernels
    by_bindings: dict[int, tuple[str | None, dict[str, Any]]] = {}  # kernels read through cuda.bindings
    funcs_known: dict[int, tuple[str | None, str | None]] = {}  # function -> (kernel name, demangled)
    ctype = ctypes.c_int()
    for i in refused:
        if fast is not None:
            fast.get_type(handles[i], ctypes.addressof(ctype))
            ntype = ctype.value
        else:
            ntype = int(rt.cudaGraphNodeGetType(node_obj(i))[1])
        if ntype == kernel_t:  # a kernel node whose parameters ctypes could not read
            extra: list[dict[str, Any]] = []
            by_bindings[i] = (_bindings_kernel(drv, handles[i], funcs_known, extra), extra[0])
        else:
            other_types[i] = ntype

    # names: once per function (demangled in build)
    col = np.frombuffer(memoryview(params), dtype=_KPARAMS_DTYPE) if n else np.zeros(0, _KPARAMS_DTYPE)
    funcs = col["func"].tolist()
    for i in refused:
        funcs[i] = 0  # whatever a refusing call left in its slot is not a function
    func_names = {f: (fast.name(f) if fast is not None else _func_name(drv, f))
                  for f in set(funcs) if f not in funcs_known}

    if node_id is not None:
        batch_ids = getattr(cupti_ids, "graph_node_ids", None)
        if batch_ids is not None:
            ids = np.array(batch_ids(handles), dtype=np.uint64).reshape(n)
        else:
            ids = np.fromiter(map(node_id, handles), dtype=np.uint64, count=n)
    else:
        ids = np.array([tools_local(i) for i in range(n)], dtype=np.uint64)
    children = {i: _child_summary(rt, rt.cudaGraphNode_t(init_value=handles[i]))
                for i, t in other_types.items() if t == child_t} if with_meta else {}
    return RawGraph(exec_id=int(exec_id), source=source, handles=handles, frm=frm, to=to, params=params,
                    refused=refused, other_types=other_types, by_bindings=by_bindings, funcs_known=funcs_known,
                    func_names=func_names, ids=ids, names=names, kernel_t=kernel_t, children=children, t0=t0)



#: CUDA_KERNEL_NODE_PARAMS_v2 (``_fastcuda.KernelParamsV2``) as numpy reads an array of them.
_KPARAMS_DTYPE = np.dtype({"names": ["func", "grid", "block", "smem"],
                           "formats": ["<u8", ("<u4", (3,)), ("<u4", (3,)), "<u4"],
                           "offsets": [0, 8, 20, 32], "itemsize": 72})



def _function(name: str | None) -> tuple[str | None, str | None]:
    """(kernel name, demangled name or None when it demangles to itself): once per function."""
    if not name:
        return name, None
    dm = _demangled(name)
    return name, (dm if dm != name else None)


def _bindings_kernel(drv: Any, h: int, funcs: dict[int, tuple[str | None, str | None]],
                     extras: list[dict[str, Any]] | None) -> str | None:
    """A kernel node's name (and, into ``extras``, its launch shape) through cuda.bindings."""
    err, p = drv.cuGraphKernelNodeGetParams(drv.CUgraphNode(init_value=h))
    p = p if int(err) == 0 else None
    f = int(p.func) if p is not None else 0
    fn = funcs.get(f)
    if fn is None:
        fn = funcs[f] = _function(_func_name(drv, f))
    if extras is not None:
        extra: dict[str, Any] = {
            "grid": [p.gridDimX, p.gridDimY, p.gridDimZ] if p is not None else None,
            "block": [p.blockDimX, p.blockDimY, p.blockDimZ] if p is not None else None,
            "shared_mem": p.sharedMemBytes if p is not None else None}
        if fn[1] is not None:
            extra["demangled"] = fn[1]
        extras.append(extra)
    return fn[0]


@functools.lru_cache(maxsize=4096)
def _demangled(kname: str) -> str:
    # The graphs of one process launch the same kernels again and again; demangling is a C++
    # library call through ctypes each time, and a name demangles the same way for the whole process.
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


# libcupti and CUPTI's ids through ctypes: in their own module (no numpy), for the recorder's start-up.
from cgtool.capture._libcupti import CuptiIds, load_libcupti  # noqa: E402

__all__ = ["CuptiIds", "load_libcupti"]
