"""The recorder's callbacks: what happens to each graph between its capture and the writer.

:class:`GraphTracker` is the handler CUPTI's callbacks reach (through the compiled callback, or a
Python one): node creations keep the creating code's raw frames; capture begin and end are timed
with the user's stack at capture begin; ``GRAPHEXEC_CREATED`` reads the graph while its template is
alive (``capture/graphread.py``: one C call, else the column-by-column read), the pool of the
``torch.cuda.CUDAGraph`` being ended and the memory the capture took, and hands a
:class:`GraphJob` to the writer; launches are counted per graph exec (in C when the compiled
callback counts them), and with ``--trace-replays`` the replays to trace are picked, with the
Python line that launched each.

Pool identity is a torch allocator notion, invisible to CUDA: at ``GRAPHEXEC_CREATED`` the
``torch.cuda.CUDAGraph`` being ended is found among the locals of the frames on the stack
(``torch.cuda.graph.__exit__`` holds it), and its ``pool()`` is recorded. A capture made by
torch.compile's CUDA graph trees also records the shapes of the inputs it was recorded for (the
``inputs`` of cudagraph trees' ``CUDAGraphNode._record`` on the stack at capture begin, less the
static ones: :func:`capture_shapes`).

Nothing here writes a file; the tracker is driven by the fake CUPTI in the CPU tests
(``tests/test_record_recorder_fake.py``).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cgtool.artifacts.recording import CaptureInputs
from cgtool.capture.record import _subscriber, attribution
from cgtool.capture.record.attribution import RawFrame
from cgtool.capture.record.subscription import Subscription

_LOW32 = 0xFFFFFFFF
#: What the node callback keeps per node: attribution.grab_node_info's tuple, and the capturing
#: thread's frames when another thread made the node (autograd's, for backward); or the compiled
#: callback's packed bytes.
NodeInfo = tuple[attribution.NodeInfo, Optional[list[RawFrame]]]


@dataclass
class Capture:
    """One stream capture in progress on a thread."""

    thread: int
    frames: list[RawFrame]
    t_begin: float
    reserved_begin: int | None
    t_end: float | None = None
    shapes: CaptureInputs | None = None  # cudagraph trees: the inputs it was recorded for


@dataclass
class TracedLaunch:
    """One traced replay: its correlation id, its place among the process's launches, who launched it."""

    correlation: int
    launch_seq: int  # 1 for the process's first graph launch (any graph)
    frames: list[RawFrame]
    thread: int


@dataclass
class GraphRecord:
    """What index.json says about one instantiated graph."""

    seq: int
    exec_handle: int
    exec_graph_id: int
    template_graph_id: int | None
    file: str
    nodes: int
    capture_s: float | None
    instantiate_s: float | None
    export_s: float
    reserved_during_capture: int | None
    pool: list[int] | None
    thread: int
    since_start_s: float
    label: str = ""
    captured_at: str | None = None
    compiled: str | None = None  # Inductor output code that ran inside the capture, if any
    written: bool = False  # its file is on disk (the writer thread got to it)
    replays: int = 0
    traced: list[TracedLaunch] = field(default_factory=list)
    write_s: float | None = None  # the writer thread's time on it (sources, encoding, file)
    shapes: CaptureInputs | None = None
    destroyed: bool = False  # its exec was destroyed (its replays are final)
    suspended_replays: bool = False  # the recorder was suspended while it lived: replays are a lower bound
    #: seconds the recorder spent on this graph inside the program's capture+instantiate: the
    #: graph-exec callback's parts, and the node callbacks since the previous graph (compiled
    #: callback: sampled one in 16 and scaled)
    recorder_s: dict[str, float] = field(default_factory=dict)

    @property
    def traced_correlations(self) -> list[int]:
        return [t.correlation for t in self.traced]


#: The parts of the graph-exec callback timed per graph (GraphRecord.recorder_s).
EXEC_PARTS = ("reserved", "export", "pool_and_stack", "environment_and_record")


@dataclass
class GraphJob:
    """What the writer needs to write one graph (read in the callback, built in the writer)."""

    rec: GraphRecord
    raw: Any  # graphread.QuickRead or RawGraph
    handles: list[int]
    infos: dict[int, Any]  # node handle -> NodeInfo or packed bytes
    begin_frames: list[RawFrame]
    device: int | None
    queued_at: float


class GraphTracker:
    """The state machine of CUPTI's graph callbacks for one process."""

    def __init__(self, sub: Subscription, *, trace_replays: int = 0, trace_skip: int = 1,
                 sink: Callable[[GraphJob], None] | None = None, inputs: Any = None) -> None:
        self.sub = sub
        self.inputs = inputs  # inputs.InputWatch, or None: the graphs' external blocks
        self.trace_replays = trace_replays
        self.trace_skip = trace_skip
        self.sink = sink or (lambda job: None)
        self.graphs: list[GraphRecord] = []
        self.by_exec: dict[int, GraphRecord] = {}
        # template graph handle -> node handle -> info (packed into bytes by the compiled callback)
        self.nodes: dict[int, dict[int, NodeInfo | bytes]] = {}
        self.node_graph: dict[int, int] = {}
        self.captures: dict[int, Capture] = {}  # thread -> capture in progress
        self._last_capture: dict[int, Capture] = {}  # thread -> last ended capture, until instantiated
        self._inst_start: dict[int, float] = {}
        self._in_rt_launch: set[int] = set()
        self._launch_counts: dict[int, int] = {}
        self._carried: dict[int, int] = {}  # counts the compiled callback kept before a suspension
        self.launch_seq = 0  # launches seen in Python (tracing)
        self.traced: set[int] = set()  # correlation ids of the traced replays
        self.lock = threading.RLock()
        self.main = threading.main_thread().ident or 0
        self.errors: list[str] = []
        self.cb_stats: dict[tuple[int, int], list[int]] = {}  # (domain, cbid) -> [calls, ns inside]
        self.launch_callbacks = 0
        self.last_capture_at = 0.0  # perf_counter of the last capture's end or instantiation
        self.cuda_env: dict[int, dict[str, Any]] = {}
        self.t_first_graph: int | None = None  # CUPTI timestamp (ns) of the first instantiation (coverage)
        self.want_first_timestamp = False
        self.torch: Any = None
        self.t0 = time.perf_counter()
        self._node_calls_seen = self._node_ns_seen = 0
        S = _subscriber
        self._D_RES, self._D_RT, self._D_DRV = S.DOMAIN_RESOURCE, S.DOMAIN_RUNTIME, S.DOMAIN_DRIVER
        self._R_NODE, self._R_CLONE = S.RESOURCE["GRAPHNODE_CREATED"], S.RESOURCE["GRAPHNODE_CLONED"]
        self._R_EXEC, self._R_EXEC_DEL = S.RESOURCE["GRAPHEXEC_CREATED"], S.RESOURCE["GRAPHEXEC_DESTROY_STARTING"]
        self._R_GRAPH_DEL = S.RESOURCE["GRAPH_DESTROY_STARTING"]
        self._ENTER = S.API_ENTER
        self._drv_launch = sub.drv_launch
        self._rt_begin, self._rt_end, self._rt_inst, self._rt_launch = (sub.rt_begin, sub.rt_end, sub.rt_inst,
                                                                        sub.rt_launch)

    def bind_layout(self) -> None:
        """Take the struct offsets once subscribed."""
        L = self.sub.layout
        self._L = L
        self._site_off, self._params_off, self._corr_off = L.site, L.params, L.corr

    # -------------------------------------------------------------- callbacks
    def callback(self, domain: int, cbid: int, ptr: int) -> None:
        if domain == self._D_DRV:  # graph launches, the hot path: count and leave
            self.launch_callbacks += 1
            try:
                if (cbid in self._drv_launch and _i32(ptr + self._site_off) == self._ENTER
                        and threading.get_ident() not in self._in_rt_launch):
                    self._launch(ptr)
            except Exception as e:
                self._error(e)
            return
        t0 = time.perf_counter_ns()
        try:
            if domain == self._D_RES:
                self._resource(cbid, ptr)
            elif domain == self._D_RT:
                self._runtime(cbid, ptr)
        except Exception as e:  # never let a recorder bug kill the user's program
            self._error(e)
        key = (domain, cbid)
        st = self.cb_stats.get(key)
        if st is None:
            st = self.cb_stats[key] = [0, 0]
        st[0] += 1
        st[1] += time.perf_counter_ns() - t0

    def _error(self, e: BaseException) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{type(e).__name__}: {e}")

    def _resource(self, cbid: int, ptr: int) -> None:
        L = self._L
        desc = _ptr(ptr + L.desc)
        if cbid == self._R_NODE:
            graph, node = _ptr(desc + L.graph), _ptr(desc + L.node)
            nodes = self.nodes.get(graph)
            if nodes is None:
                nodes = self.nodes[graph] = {}
            nodes[node] = self._node_info()
            self.node_graph[node] = graph
        elif cbid == self._R_CLONE:
            graph, node, orig = _ptr(desc + L.graph), _ptr(desc + L.node), _ptr(desc + L.orig_node)
            src = self.node_graph.get(orig)
            info = self.nodes.get(src, {}).get(orig) if src is not None else None
            if info is not None:
                self.nodes.setdefault(graph, {})[node] = info
                self.node_graph[node] = graph
        elif cbid == self._R_EXEC:
            self._exec_created(_ptr(desc + L.graph), _ptr(desc + L.exec))
        elif cbid == self._R_EXEC_DEL:
            h = _ptr(desc + L.exec)
            rec = self.by_exec.pop(h, None)
            if rec is not None:
                rec.replays = self.take_launches(h)
                rec.destroyed = True
            if self.inputs is not None:
                self.inputs.on_exec_destroyed(h)
        elif cbid == self._R_GRAPH_DEL:
            for n in self.nodes.pop(_ptr(desc + L.graph), {}):
                self.node_graph.pop(n, None)

    def _node_info(self) -> NodeInfo:
        """The minimum, on the thread making the node: raw frames and objects, named later."""
        f = _caller_frame()
        fallback = None
        tid = threading.get_ident()
        if tid != self.main and self.captures:
            # backward may run in autograd's own thread: the user line is in the thread capturing
            cap = next(iter(self.captures.values()))
            if cap.thread != tid:
                fallback = attribution.grab(sys._current_frames().get(cap.thread))
        return attribution.grab_node_info(f), fallback

    def _runtime(self, cbid: int, ptr: int) -> None:
        enter = _i32(ptr + self._site_off) == self._ENTER
        tid = threading.get_ident()
        if cbid in self._rt_launch:
            if enter:
                self._in_rt_launch.add(tid)
                self._launch(ptr, runtime=True)
            else:
                self._in_rt_launch.discard(tid)
        elif cbid in self._rt_begin:
            if enter:
                caller = _caller_frame()
                frames = attribution.grab(caller)
                shapes = capture_shapes(caller, frames) if attribution.tree_codes() else None
                self.captures[tid] = Capture(tid, frames, time.perf_counter(), self.reserved(), shapes=shapes)
        elif cbid in self._rt_end:
            if not enter:
                cap = self.captures.pop(tid, None)
                if cap is not None:
                    cap.t_end = self.last_capture_at = time.perf_counter()
                    self._last_capture[tid] = cap
        elif cbid in self._rt_inst:  # (the compiled callback handles these itself)
            # Instantiation clones every node (GRAPHNODE_CREATED + _CLONED for each): those are not
            # the program's nodes, so node callbacks are off while it runs (halves the cost).
            if enter:
                self._inst_start[tid] = time.perf_counter()
                self.sub.enable_node_callbacks(False)
            else:
                self.sub.enable_node_callbacks(True)

    def _launch(self, ptr: int, runtime: bool = False) -> None:
        params = _ptr(ptr + self._params_off)
        if not params:
            return
        h = _ptr(params)  # first parameter of cudaGraphLaunch / cuGraphLaunch: the graph exec
        n = self._launch_counts.get(h, 0) + 1
        self._launch_counts[h] = n
        self.launch_seq += 1
        if self.trace_replays > 0 and self.trace_skip < n <= self.trace_skip + self.trace_replays:
            rec = self.by_exec.get(h)
            if rec is not None:
                corr = ctypes.c_uint32.from_address(ptr + self._corr_off).value
                self.traced.add(corr)
                # who launched it: the frames are grabbed for the traced replays only (K per graph)
                rec.traced.append(TracedLaunch(corr, self.launch_seq, attribution.grab(_caller_frame()),
                                               threading.get_ident()))

    # ---------------------------------------------------------------- counts
    def take_launches(self, exec_: int) -> int:
        """The replays counted for a graph exec, forgotten (its handle may be reused)."""
        carried = self._carried.pop(exec_, 0)
        if self.sub.counts_in_c:
            return carried + int(self.sub.nodecb.take_launches(exec_))
        return carried + self._launch_counts.pop(exec_, 0)

    def all_launches(self) -> dict[int, int]:
        counts = dict(self.sub.nodecb.launch_counts()) if self.sub.counts_in_c else dict(self._launch_counts)
        for h, c in self._carried.items():
            counts[h] = counts.get(h, 0) + c
        return counts

    def carry_counts(self) -> None:
        """Move the compiled callback's counts into Python, taking them out of the callback: it
        keeps them while CUPTI is given up and forgets them when configured again, so each replay
        is counted once whether or not the recording resumes."""
        if self.sub.counts_in_c:
            counts = self.all_launches()
            nodecb = self.sub.nodecb
            for h in list(nodecb.launch_counts()):
                nodecb.take_launches(h)
            self._carried = counts

    def replays_of(self, rec: GraphRecord, counts: dict[int, int]) -> int:
        return counts.get(rec.exec_handle, 0) if self.by_exec.get(rec.exec_handle) is rec else rec.replays

    def reserved(self) -> int | None:
        """The memory the process holds from CUDA, as a running figure: only its growth across a
        capture is used. With the compiled callback: bytes taken by cudaMalloc / cuMemCreate and
        not given back (counted in its callback, no Python); else torch's allocator's
        ``reserved_bytes`` (the same growth for torch's allocator, read from its statistics)."""
        if self.sub.nodecb is not None:
            return int(self.sub.nodecb.alloc_bytes())
        return self.reserved_by_torch()

    def reserved_by_torch(self) -> int | None:
        """torch's allocator's ``reserved_bytes`` on the current device."""
        torch = self.torch or sys.modules.get("torch")
        if torch is None:
            return None
        self.torch = torch
        try:
            # torch.cuda.memory_reserved() flattens every allocator statistic into a new dict in
            # Python first; this reads the one number from torch's nested stats.
            return int(torch._C._cuda_memoryStats(torch._C._cuda_getDevice())["reserved_bytes"]["all"]["current"])
        except Exception:
            try:
                return int(torch.cuda.memory_reserved())
            except Exception:
                return None

    # ------------------------------------------------------------ exec created
    def _exec_created(self, graph: int, exec_: int) -> None:
        """On the instantiating thread: what must be read while the template and the stack are alive."""
        from cgtool.capture.graphread import read_graph, read_quick

        t_inst_end = time.perf_counter()
        tid = threading.get_ident()
        cap = self._last_capture.pop(tid, None)
        nodecb = self.sub.nodecb
        t_inst0 = self._inst_start.pop(tid, None) if nodecb is None else nodecb.instantiate_began(tid)
        reserved_now = self.reserved()
        t1 = time.perf_counter()
        if self.want_first_timestamp and self.t_first_graph is None:
            try:  # the clock of CUPTI's activity records: splits the run at its first graph
                self.t_first_graph = int(self.sub.ids.get_timestamp())
            except Exception:
                pass
        ids = self.sub.ids if isinstance(self.sub.ids, _subscriber.Ids) else None
        # Only the driver's answers here (the template dies when this returns): the compiled read
        # and the exec id where it applies; the rest, and the document, in the writer (export.build
        # makes no CUDA call).
        raw = read_quick(graph, exec_, cupti=ids) or read_graph(graph, exec_, cupti=ids)
        handles = raw.handles
        t2 = time.perf_counter()
        infos = dict(self.nodes.get(graph, {}))
        caller = _caller_frame()
        pool = pool_on_stack(caller)
        begin_frames = cap.frames if cap is not None else attribution.grab(caller)
        t3 = time.perf_counter()
        device = None
        torch = self.torch
        if torch is not None:
            try:
                device = int(torch._C._cuda_getDevice())
            except Exception:
                pass
        if device is not None and device not in self.cuda_env:
            # CUDA calls stay on this thread: the writer makes none (one there could wait on a driver
            # lock this thread holds while this thread waits for the writer's GIL), and a call from
            # another thread can invalidate a capture running here in "global" mode.
            try:
                from cgtool.capture.export import cuda_environment

                self.cuda_env[device] = cuda_environment(device)
            except Exception as e:
                self.cuda_env[device] = {"error": f"{type(e).__name__}: {e}"}
        with self.lock:
            seq = len(self.graphs)
            rec = GraphRecord(
                seq=seq,
                exec_handle=exec_,
                exec_graph_id=int(raw.exec_id),
                template_graph_id=_safe(lambda: int(self.sub.ids.get_graph_id(graph))),
                file=f"graph_{seq:03d}.json",
                nodes=len(handles),
                capture_s=(cap.t_end - cap.t_begin) if cap is not None and cap.t_end is not None else None,
                instantiate_s=(t_inst_end - t_inst0) if t_inst0 is not None else None,
                export_s=t2 - t1,  # the read here; the writer adds the build
                reserved_during_capture=(reserved_now - cap.reserved_begin)
                if cap is not None and cap.reserved_begin is not None and reserved_now is not None else None,
                pool=pool,
                thread=tid,
                since_start_s=time.perf_counter() - self.t0,
                shapes=cap.shapes if cap is not None else None,
            )
            self.graphs.append(rec)
            self.by_exec[exec_] = rec
            self.take_launches(exec_)  # a reused handle starts again from 0
        self.last_capture_at = t4 = time.perf_counter()
        # where the exec-created callback's time goes (benchmarks/bench_record.py)
        rec.recorder_s.update(reserved=t1 - t_inst_end, export=t2 - t1, pool_and_stack=t3 - t2,
                              environment_and_record=t4 - t3)
        if self.inputs is not None:  # the kernel parameters are read while the template lives
            t5 = time.perf_counter()
            self.inputs.on_graph(seq, exec_, raw, pool, device, caller)
            rec.recorder_s["inputs"] = time.perf_counter() - t5
        if nodecb is not None:
            calls, ns, _ = nodecb.stats()
            rec.recorder_s["node_callbacks"] = (ns - self._node_ns_seen) / 1e9
            rec.recorder_s["node_callback_calls"] = calls - self._node_calls_seen
            self._node_calls_seen, self._node_ns_seen = calls, ns
        self.sink(GraphJob(rec, raw, handles, infos, begin_frames, device, self.last_capture_at))

    def exec_totals(self) -> dict[str, float]:
        """The graph-exec callback's parts summed over every graph so far (``exec_created_<part>_s``)."""
        with self.lock:
            recs = list(self.graphs)
        out: dict[str, float] = {}
        for r in recs:
            for k in EXEC_PARTS:
                if k in r.recorder_s:
                    out[f"exec_created_{k}_s"] = out.get(f"exec_created_{k}_s", 0.0) + r.recorder_s[k]
        return out

    def reset_after_fork(self) -> None:
        """In a forked child: nothing of the parent's graphs is the child's (their execs are not)."""
        self.graphs, self.by_exec = [], {}
        self.nodes.clear()
        self.node_graph.clear()
        self.captures, self._last_capture, self._inst_start = {}, {}, {}
        self._in_rt_launch, self._launch_counts, self._carried = set(), {}, {}
        self.launch_seq, self.traced = 0, set()
        self.lock = threading.RLock()
        self.main = threading.get_ident()
        self.errors, self.cb_stats, self.launch_callbacks = [], {}, 0
        self._node_calls_seen = self._node_ns_seen = 0
        self.t0 = time.perf_counter()
        self.t_first_graph = None


def _ptr(addr: int) -> int:
    return ctypes.c_void_p.from_address(addr).value or 0


def _i32(addr: int) -> int:
    return ctypes.c_int.from_address(addr).value


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


_OWN: tuple[str, ...] = ()


def _own_files() -> tuple[str, ...]:
    """The recorder's own files, whose frames are never the program's caller."""
    global _OWN
    if not _OWN:
        from cgtool.capture.record import subscription

        _OWN = (__file__, _subscriber.__file__, subscription.__file__)
    return _OWN


def _caller_frame() -> Any:
    """The innermost frame that is not the recorder's (or the subscriber's) own."""
    f: Any = sys._getframe(1)
    own = _OWN or _own_files()
    while f is not None and f.f_code.co_filename in own:
        f = f.f_back
    return f


def pool_of(g: Any) -> list[int] | None:
    try:
        return [int(x) for x in g.pool()]
    except Exception:
        return None


def pool_on_stack(frame: Any, depth: int = 12) -> list[int] | None:
    """The pool of the torch.cuda.CUDAGraph being ended, from the locals of the frames on the stack.

    First ``torch.cuda.graph.__exit__`` (every torch capture helper goes through it: cudagraph
    trees, make_graphed_callables, ``with torch.cuda.graph``), whose ``self.cuda_graph`` it is;
    then any local of the innermost frames that is one (``g.capture_end()`` called directly).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    CG = getattr(torch.cuda, "CUDAGraph", None)
    if CG is None:
        return None
    f = frame
    for _ in range(depth):
        if f is None:
            break
        code = f.f_code
        if code.co_name == "__exit__" and code.co_filename.endswith("graphs.py"):
            g = getattr(f.f_locals.get("self"), "cuda_graph", None)
            if isinstance(g, CG):
                return pool_of(g)
        f = f.f_back
    f = frame
    for _ in range(depth):
        if f is None:
            break
        for v in list(f.f_locals.values()):
            g = v if isinstance(v, CG) else None
            if g is None and not isinstance(v, type):
                try:
                    g = v.__dict__.get("cuda_graph") if hasattr(v, "__dict__") else None
                except Exception:
                    g = None
            if isinstance(g, CG):
                return pool_of(g)
        f = f.f_back
    return None


_MAX_SHAPES = 16


def capture_shapes(frame: Any, frames: list[RawFrame]) -> CaptureInputs | None:
    """The inputs a CUDA graph trees capture was recorded for, when its functions are on the stack
    (``attribution.tree_codes``); None for any other capture.

    ``CUDAGraphNode._record``'s ``inputs`` (the copies it records with: the caller's list,
    ``record_function``'s ``new_inputs``, is cleared before the capture begins) less the static
    ones (parameters, buffers: ``wrapped_function.static_input_idxs``), as ``inputs`` (shapes;
    an int input, a symbolic size, as itself), with ``n_inputs`` and ``static_inputs``; and the
    symbolic-size key of ``deferred_cudagraphify`` (``symint_key``)."""
    codes = attribution.tree_codes()
    at = [i for i, (code, _) in enumerate(frames) if id(code) in codes]
    if not at:
        return None
    out: dict[str, Any] = {}
    f = frame
    for i in range(at[-1] + 1):
        if f is None:
            break
        if i in at:
            try:
                loc = f.f_locals
                items: list[Any] | None = None
                static: set[int] = set()
                if f.f_code.co_name == "_record" and "inputs" in loc:
                    items = list(loc["inputs"])
                    wrapped = getattr(loc.get("self"), "wrapped_function", None)
                    static = {int(k) for k in getattr(wrapped, "static_input_idxs", None) or ()}
                elif "new_inputs" in loc:
                    items = list(loc["new_inputs"])
                if items and "inputs" not in out:
                    dynamic = [x for k, x in enumerate(items) if k not in static]
                    out["inputs"] = [_shape(x) for x in dynamic[:_MAX_SHAPES]]
                    # the compiled graph's placeholders name its inputs (``PlaceholderInfo.name``)
                    holders = getattr(getattr(loc.get("self"), "wrapped_function", None), "placeholders", None)
                    if holders is not None and len(holders) == len(items):
                        names = [str(getattr(h, "name", "") or "") for k, h in enumerate(holders) if k not in static]
                        out["names"] = names[:_MAX_SHAPES]
                    out["n_inputs"] = len(items)
                    out["static_inputs"] = len(items) - len(dynamic)
                if "int_key" in loc and loc["int_key"] is not None:
                    out["symint_key"] = [int(v) if isinstance(v, int) else str(v) for v in loc["int_key"]][:_MAX_SHAPES]
            except Exception:
                pass
        f = f.f_back
    return CaptureInputs(**out) if out else None


def _shape(x: Any) -> Any:
    if hasattr(x, "shape"):
        return [int(d) if isinstance(d, int) else str(d) for d in x.shape]
    return x if isinstance(x, int) else None
