"""The in-process recorder of ``cgtool record``: CUPTI callbacks on every graph the program makes.

One CUPTI subscriber, with only these callbacks enabled (everything else stays off, so eager
work pays nothing):

* resource ``GRAPHNODE_CREATED`` / ``GRAPHNODE_CLONED``: the Python frames of the creating
  code as ``(code, lasti)`` pairs (live: CUPTI calls back in the thread that made the CUDA call),
  the nn.Module classes on the stack, the autograd node when a backward pass runs, the open
  ``record_function`` range;
* resource ``GRAPHEXEC_CREATED``: the graph is read at once (``capture/export.py``'s
  ``read_quick``, one C call, else ``read_graph``: every driver and CUPTI call of the export):
  torch destroys the template graph right after instantiating it. Everything else — completing and
  building the export (``export.build``,
  ``get_graph_data()``'s schema, tools ids ``(exec_id << 32) | local id``), turning frames into
  source lines, the environment block, JSON encoding, the file and the new ``index.json`` — is
  handed to a writer thread, which has the graph on disk once the program has not captured for a
  quarter second (at most 2 s after the graph). Every way out of the
  program that runs Python (the end, an exception, ``sys.exit``, Ctrl-C, SIGTERM, ``os._exit``)
  drains the writer first, so a crash later loses nothing recorded so far;
* resource ``GRAPHEXEC_DESTROY_STARTING`` / ``GRAPH_DESTROY_STARTING``: handles are reused by
  the driver, so per-handle state is dropped (a graph's nodes by the compiled callback itself);
* runtime API ``cudaStreamBeginCapture*`` (the user stack at capture begin, reserved memory),
  ``cudaStreamEndCapture*``, ``cudaGraphInstantiate*`` (timings); driver ``cuGraphLaunch*``
  (replay counts: every runtime launch goes through it). With ``--trace-replays`` the runtime
  ``cudaGraphLaunch*`` too, whose correlation ids the traced kernels carry.

Pool identity is a torch allocator notion, invisible to CUDA: at ``GRAPHEXEC_CREATED`` the
``torch.cuda.CUDAGraph`` being ended is found among the locals of the frames on the stack
(``torch.cuda.graph.__exit__`` holds it), and its ``pool()`` is recorded.

With kernel activity on (``--coverage``, or ``--trace-replays``), CUPTI's kernel records give the
share of the run's kernel time spent inside graph replays (records of graph kernels carry the
exec graph id).
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from cgtool.capture.record import _subscriber, attribution
from cgtool.capture.record.attribution import RawFrame
from cgtool.errors import CaptureError, MissingExtraError

RECORD_SCHEMA_VERSION = 1
#: The writer holds a graph back until the program has not captured for this long (``_wait_quiet``);
#: CGTOOL_RECORD_WRITER_QUIET_S overrides it, 0 writes at once.
_QUIET_S = 0.25
_MAX_DEFER_S = 2.0
_LOW32 = 0xFFFFFFFF

#: What the node callback keeps per node: the frames' code objects and ``f_lasti`` (innermost
#: first), the innermost nn.Module class and its frame's index, the autograd node's name, the capturing thread's frames
#: (when another thread made the node), the open record_function range.
# What the node callback keeps (attribution.grab_node_info), and the capturing thread's frames when
# the node was made in another thread (autograd's, for backward).
_NodeInfo = tuple[attribution.NodeInfo, Optional[list[RawFrame]]]


class RecordSetupError(CaptureError):
    """Recording cannot start (CUPTI missing or held by another profiler); raised before the program runs."""


@dataclass
class _Capture:
    """One stream capture in progress on a thread."""

    thread: int
    frames: list[RawFrame]
    t_begin: float
    reserved_begin: int | None
    t_end: float | None = None


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
    traced_correlations: list[int] = field(default_factory=list)
    write_s: float | None = None  # the writer thread's time on it (sources, encoding, file)
    #: seconds the recorder spent on this graph inside the program's capture+instantiate: the
    #: graph-exec callback's parts, and the node callbacks since the previous graph (compiled
    #: callback: sampled one in 16 and scaled)
    recorder_s: dict[str, float] = field(default_factory=dict)


#: The parts of the graph-exec callback timed per graph (GraphRecord.recorder_s).
_EXEC_PARTS = ("reserved", "export", "pool_and_stack", "environment_and_record")


class Recorder:
    """Subscribes to CUPTI and writes every instantiated graph into ``out_dir``."""

    def __init__(self, out_dir: str, *, trace_replays: int = 0, trace_skip: int = 1, coverage: bool = False,
                 program: list[str]) -> None:
        self.out_dir = out_dir
        self.trace_replays = trace_replays
        self.trace_skip = trace_skip
        self.coverage = coverage or trace_replays > 0  # kernel activity is on anyway when tracing
        self.program = program
        self.graphs: list[GraphRecord] = []
        self.pid = os.getpid()
        self._by_exec: dict[int, GraphRecord] = {}
        # template graph handle -> node handle -> info (packed into bytes by the compiled callback)
        self._nodes: dict[int, dict[int, _NodeInfo | bytes]] = {}
        self._node_graph: dict[int, int] = {}
        self._captures: dict[int, _Capture] = {}  # thread -> capture in progress
        self._last_capture: dict[int, _Capture] = {}  # thread -> last ended capture, until instantiated
        self._inst_start: dict[int, float] = {}
        self._in_rt_launch: set[int] = set()
        self._launch_counts: dict[int, int] = {}
        self._traced: set[int] = set()
        self._lock = threading.RLock()
        self._main = threading.main_thread().ident or 0
        self.skips: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.records: list[dict[str, Any]] = []
        self.dropped = 0
        self._sub: Any = None
        self._nodecb: Any = None  # the compiled callback module, when it is the subscriber
        self._cb_stats: dict[tuple[int, int], list[int]] = {}  # (domain, cbid) -> [calls, ns inside]
        self._launch_callbacks = 0
        # Overhead experiments (benchmarks/bench_record.py): LITE keeps frames but no module / autograd
        # op; NOFRAMES keeps nothing per node (the cost floor of a node callback).
        self._lite = bool(os.environ.get("CGTOOL_RECORD_LITE"))
        self._noframes = bool(os.environ.get("CGTOOL_RECORD_NOFRAMES"))
        self._cupti: Any = None
        self._started = time.time()
        self._t0 = time.perf_counter()
        self.timings: dict[str, float] = {}  # setup and finish phases, seconds
        self._node_calls_seen = self._node_ns_seen = 0  # the compiled node callbacks' totals at the last graph
        self.timeline: dict[str, float] = {}  # wall-clock stamps (time.time()) of the run's phases
        self._docs: dict[int, dict[str, Any]] = {}
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._hurry = threading.Event()  # set: the writer writes at once (a flush, the end of the run)
        self._last_capture_at = 0.0  # perf_counter of the last capture's end or instantiation
        q = os.environ.get("CGTOOL_RECORD_WRITER_QUIET_S")
        self._quiet_s = float(q) if q else _QUIET_S
        self._env: dict[str, Any] | None = None
        self._cuda_env: dict[int, dict[str, Any]] = {}
        self._site_cache: dict[Any, tuple[_NodeInfo, dict[str, Any]]] = {}
        self._cov_graph_ns: dict[int, int] = {}
        self._cov_graph_kernels: dict[int, int] = {}
        self._cov_eager_ns = 0
        self._cov_eager_kernels = 0
        self._cov_eager_after_ns = 0  # outside graphs, started after the first graph was instantiated
        self._cov_eager_after_kernels = 0
        self._t_first_graph: int | None = None  # CUPTI timestamp (ns) of the first instantiation
        self._torch: Any = None
        self._finished = False

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        """Subscribe to CUPTI; :class:`RecordSetupError` when it cannot (before the program runs).

        cupti-python is not imported unless kernel activity is wanted (``--coverage``,
        ``--trace-replays``) or libcupti cannot be found without it: libcupti is loaded from the
        nvidia wheel on ``sys.path`` or through cuda.pathfinder (``_subscriber.load_libcupti``) and
        subscribed to through ctypes, with the callback ids of ``_subscriber``; CUPTI's ids come
        through ctypes too (``_subscriber.Ids``). The export's modules are imported right after the
        program imports torch, outside any graph's capture.
        """
        t0 = time.perf_counter()
        how = os.environ.get("CGTOOL_RECORD_SUBSCRIBER") or (
            "c" if _subscriber.compiled_callback() is not None and not (self._lite or self._noframes) else "ctypes")
        if not _cupti_installed():
            raise MissingExtraError(
                "`cgtool record`",
                detail="cupti-python, which is not installed; take the version that matches your CUDA's "
                "CUPTI, e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0",
            )
        lib = None
        if how in ("ctypes", "c"):
            try:
                lib = _subscriber.load_libcupti()
            except OSError as e:  # not in a wheel, and no cuda.pathfinder that finds it: cupti-python's copy
                self.errors.append(f"libcupti not found without cupti-python ({e}); found through cupti-python")
        if lib is None or self.coverage or how not in ("ctypes", "c"):
            self._load_cupti()
        t1 = time.perf_counter()
        self.timings["import_cupti_s"] = t1 - t0
        cupti = self._cupti
        self._L = _subscriber.Layout(cupti)
        try:
            try:
                self._sub = _subscriber.Subscriber(cupti, self._callback, how, lib=lib)
            except OSError as e:  # libcupti not reachable through ctypes: cupti-python's own subscribe
                self.errors.append(f"ctypes subscriber unavailable ({e}); using cupti-python's subscribe")
                how = "cupti-python"
                self._sub = _subscriber.Subscriber(self._load_cupti(), self._callback, how)
            self.subscriber = how
        except _subscriber.SubscribeError as e:
            raise RecordSetupError(
                f"`cgtool record` could not subscribe to CUPTI ({e.name}, status {e.status}). CUPTI allows "
                "one subscriber per process, so another profiler holds it: Nsight Systems or Nsight Compute, "
                "a tool named by CUDA_INJECTION64_PATH, or torch.profiler started from a sitecustomize. Run "
                "the program under `cgtool record` without the other profiler. The program was not started."
            ) from None
        except OSError as e:
            raise RecordSetupError(
                f"`cgtool record` could not reach libcupti's callback API ({e}). Set "
                "CGTOOL_RECORD_SUBSCRIBER=cupti-python to use cupti-python's own subscribe (slower "
                "capture). The program was not started."
            ) from None
        self._ids: Any = _subscriber.Ids(self._sub._lib) if how in ("ctypes", "c") else cupti
        if how == "c":
            # The compiled callback also takes instantiations (node callbacks ignored while one
            # runs; its start kept) and drops the API sites ignored below, without calling Python.
            S = _subscriber
            self._nodecb = S.compiled_callback()
            self._nodecb.configure(
                handler=self._callback, nodes=self._nodes, node_graph=self._node_graph,
                ranges=attribution.ranges.names, stop=attribution._STOP_KEEP, main_thread=self._main,
                resource_domain=S.DOMAIN_RESOURCE, node_cbid=S.RESOURCE["GRAPHNODE_CREATED"],
                off_desc=self._L.desc, off_graph=self._L.graph, off_node=self._L.node,
                clone_cbid=S.RESOURCE["GRAPHNODE_CLONED"], runtime_domain=S.DOMAIN_RUNTIME, off_site=self._L.site,
                instantiate=tuple(sorted(S.runtime_ids("cudaGraphInstantiate"))),
                enter_only=tuple(sorted(S.runtime_ids("cudaStreamBeginCapture"))),
                exit_only=tuple(sorted(S.runtime_ids("cudaStreamEndCapture"))),
                graph_destroy_cbid=S.RESOURCE["GRAPH_DESTROY_STARTING"],
                # memory taken from CUDA, and (when not tracing: no correlation ids needed) replays
                driver_domain=S.DOMAIN_DRIVER, off_params=self._L.params, off_ret=self._L.ret,
                alloc_ids=(S.ALLOC_RUNTIME["cudaMalloc_v3020"], S.ALLOC_RUNTIME["cudaFree_v3020"],
                           S.ALLOC_DRIVER["cuMemCreate"], S.ALLOC_DRIVER["cuMemRelease"]),
                launch_ids=tuple(sorted(S.DRIVER.values())) if self.trace_replays == 0 else ())
        t2 = time.perf_counter()
        self.timings["subscribe_s"] = t2 - t1
        S = _subscriber
        self._D_RES, self._D_RT, self._D_DRV = S.DOMAIN_RESOURCE, S.DOMAIN_RUNTIME, S.DOMAIN_DRIVER
        self._R_NODE, self._R_CLONE = S.RESOURCE["GRAPHNODE_CREATED"], S.RESOURCE["GRAPHNODE_CLONED"]
        self._R_EXEC, self._R_EXEC_DEL = S.RESOURCE["GRAPHEXEC_CREATED"], S.RESOURCE["GRAPHEXEC_DESTROY_STARTING"]
        self._R_GRAPH_DEL = S.RESOURCE["GRAPH_DESTROY_STARTING"]
        self._ENTER = S.API_ENTER
        for cbid in (self._R_NODE, self._R_CLONE, self._R_EXEC, self._R_EXEC_DEL, self._R_GRAPH_DEL):
            self._sub.enable(self._D_RES, cbid)
        self._rt_begin = S.runtime_ids("cudaStreamBeginCapture")
        self._rt_end = S.runtime_ids("cudaStreamEndCapture")
        self._rt_inst = S.runtime_ids("cudaGraphInstantiate")
        # Replays are counted on the driver's cuGraphLaunch, which every runtime launch calls: one
        # callback pair per replay instead of two. The runtime launch callbacks are on only when
        # tracing, for the correlation ids the traced kernels carry.
        self._rt_launch = S.runtime_ids("cudaGraphLaunch") if self.trace_replays > 0 else set()
        for cbid in sorted(self._rt_begin | self._rt_end | self._rt_inst | self._rt_launch):
            self._sub.enable(self._D_RT, cbid)
        self._drv_launch = set(S.DRIVER.values())
        for cbid in sorted(self._drv_launch):
            self._sub.enable(self._D_DRV, cbid)
        if self._nodecb is not None:  # allocations, accounted for by the compiled callback
            for cbid in S.ALLOC_RUNTIME.values():
                self._sub.enable(self._D_RT, cbid)
            for cbid in S.ALLOC_DRIVER.values():
                self._sub.enable(self._D_DRV, cbid)
        self._site_off, self._params_off, self._corr_off = self._L.site, self._L.params, self._L.corr
        t3 = time.perf_counter()
        self.timings["enable_callbacks_s"] = t3 - t2
        if self.coverage:
            self._start_activity()
        self.timings["activity_s"] = time.perf_counter() - t3
        self._install_skip_handler()
        attribution.track_ranges()
        if "torch" in sys.modules:
            self._after_torch(sys.modules["torch"])
        else:
            attribution.after_import("torch", self._after_torch)
        self._writer = threading.Thread(target=self._write_loop, name="cgtool-record-writer", daemon=True)
        self._writer.start()
        self._queue.put(("index",))
        self.timings["start_s"] = time.perf_counter() - t0

    def _load_cupti(self) -> Any:
        """cupti-python's ``cupti`` module, imported once; its enums and layouts checked against ours."""
        if self._cupti is not None:
            return self._cupti
        try:
            from cupti import cupti
        except Exception as e:  # ImportError, or a libcupti mismatch raised at load time
            raise MissingExtraError(
                "`cgtool record`",
                detail=f"cupti-python, which could not be loaded ({type(e).__name__}: {e}); take the version "
                "that matches your CUDA's CUPTI, e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0",
            ) from None
        self._cupti = cupti
        for m in _subscriber.mismatches(cupti):
            self.errors.append(f"CUPTI ABI: {m}")
        return cupti

    def _after_torch(self, torch: Any) -> None:
        """Once the program has imported torch: the modules the first graph's export needs, now."""
        t0 = time.perf_counter()
        try:
            from cgtool.capture import export

            self.timings["after_torch_export_import_s"] = time.perf_counter() - t0
            # What the first export would load inside the first capture: cuda.bindings (no CUDA
            # call that needs a context), libcuda's entry points, the demangler.
            from cgtool.artifacts.names import demangle
            from cgtool.capture import _deps, _fastcuda

            rt, drv = _deps.require_bindings("Graph export")
            export._node_type_names(rt, drv)
            _fastcuda.load()
            export.driver_may_have_tools_ids()  # the ids' source, known before the first graph
            # cuda.bindings loads the runtime's entry points at their first use: the first graph's
            # environment block asks for two versions, so they are asked here (no context needed)
            rt.cudaRuntimeGetVersion()
            rt.cudaDriverGetVersion()
            demangle("_Z1fv")
            nodecb = _subscriber.compiled_callback() if self.subscriber == "c" else None
            if nodecb is not None:
                nodecb.set_autograd(getattr(torch._C, "_current_autograd_node", None))
            # The export's node ids on drivers before 13.1: through the ctypes Ids, else cupti-python.
            if not isinstance(self._ids, _subscriber.Ids) and export.id_source_available() != "driver":
                self._load_cupti()
        except Exception:  # only early: the first graph's export imports them again and reports why not
            pass
        self.timings["after_torch_imports_s"] = time.perf_counter() - t0

    def _start_activity(self) -> None:
        from cgtool.capture import cupti_trace

        cupti = self._cupti
        cupti_trace.cupti_was_used = True
        K = self._K = cupti.ActivityKind
        self._kinds = [K.CONCURRENT_KERNEL]
        if self.trace_replays > 0:
            self._kinds += [K.MEMCPY, K.MEMSET, K.RUNTIME]
        cupti.activity_register_callbacks(lambda: (8 * 1024 * 1024, 0), self._buffer_completed)
        for k in self._kinds:
            cupti.activity_enable(k)

    def _buffer_completed(self, activities: list[Any]) -> None:
        """Sum kernel time in and out of graphs; keep the records of the traced replays only (a
        whole run's kernels would not fit)."""
        from cgtool.capture.cupti_trace import _gpu_record

        K = self._K
        traced = self._traced
        tracing = self.trace_replays > 0
        kern, kern2 = int(K.CONCURRENT_KERNEL), int(K.KERNEL)
        in_graph, in_graph_n = self._cov_graph_ns, self._cov_graph_kernels
        eager_ns = eager_n = after_ns = after_n = 0
        t_first = self._t_first_graph
        for a in activities:
            kind = int(a.kind)
            if kind == kern or kind == kern2:
                gid = a.graph_id
                d = a.end - a.start
                if gid:
                    in_graph[gid] = in_graph.get(gid, 0) + d
                    in_graph_n[gid] = in_graph_n.get(gid, 0) + 1
                else:
                    eager_ns += d
                    eager_n += 1
                    if t_first is not None and a.start >= t_first:
                        after_ns += d
                        after_n += 1
                if tracing and a.correlation_id in traced:
                    rec = _gpu_record(a, "kernel", a.name)
                    rec["grid"] = [a.grid_x, a.grid_y, a.grid_z]
                    rec["block"] = [a.block_x, a.block_y, a.block_z]
                    self.records.append(rec)
            elif not tracing:
                continue
            elif kind == K.MEMCPY or kind == K.MEMSET:
                if a.correlation_id not in traced:
                    continue
                is_copy = kind == K.MEMCPY
                rec = _gpu_record(a, "memcpy" if is_copy else "memset", "Memcpy" if is_copy else "Memset")
                rec["bytes"] = a.bytes
                self.records.append(rec)
            elif kind == K.RUNTIME and a.correlation_id in traced:
                self.records.append({"kind": "launch", "name": "cudaGraphLaunch", "start": a.start, "end": a.end,
                                     "correlation": a.correlation_id, "process": a.process_id,
                                     "thread": a.thread_id})
        self._cov_eager_ns += eager_ns
        self._cov_eager_kernels += eager_n
        self._cov_eager_after_ns += after_ns
        self._cov_eager_after_kernels += after_n

    def _install_skip_handler(self) -> None:
        """Collect torch.compile's "skipping cudagraphs due to ..." messages (its log keeps printing them)."""
        import logging

        rec = self

        class _Skips(logging.Handler):
            def emit(self, r: logging.LogRecord) -> None:
                try:
                    msg = r.getMessage()
                except Exception:
                    return
                if "skipping cudagraphs" not in msg:
                    return
                site = attribution.resolve(attribution.grab(sys._getframe(1)))
                rec.skips.append({"reason": msg, "site": site.to_json()})

        logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").addHandler(_Skips(logging.WARNING))

    # -------------------------------------------------------------- callbacks
    def _callback(self, domain: int, cbid: int, ptr: int) -> None:
        if domain == self._D_DRV:  # graph launches, the hot path: count and leave
            self._launch_callbacks += 1
            try:
                if (cbid in self._drv_launch and _i32(ptr + self._site_off) == self._ENTER
                        and threading.get_ident() not in self._in_rt_launch):
                    self._launch(ptr)
            except Exception as e:
                if len(self.errors) < 20:
                    self.errors.append(f"{type(e).__name__}: {e}")
            return
        t0 = time.perf_counter_ns()
        try:
            if domain == self._D_RES:
                self._resource(cbid, ptr)
            elif domain == self._D_RT:
                self._runtime(cbid, ptr)
        except Exception as e:  # never let a recorder bug kill the user's program
            if len(self.errors) < 20:
                self.errors.append(f"{type(e).__name__}: {e}")
        key = (domain, cbid)
        st = self._cb_stats.get(key)
        if st is None:
            st = self._cb_stats[key] = [0, 0]
        st[0] += 1
        st[1] += time.perf_counter_ns() - t0

    def _resource(self, cbid: int, ptr: int) -> None:
        L = self._L
        desc = _ptr(ptr + L.desc)
        if cbid == self._R_NODE:
            graph, node = _ptr(desc + L.graph), _ptr(desc + L.node)
            nodes = self._nodes.get(graph)
            if nodes is None:
                nodes = self._nodes[graph] = {}
            nodes[node] = self._node_info()
            self._node_graph[node] = graph
        elif cbid == self._R_CLONE:
            graph, node, orig = _ptr(desc + L.graph), _ptr(desc + L.node), _ptr(desc + L.orig_node)
            src = self._node_graph.get(orig)
            info = self._nodes.get(src, {}).get(orig) if src is not None else None
            if info is not None:
                self._nodes.setdefault(graph, {})[node] = info
                self._node_graph[node] = graph
        elif cbid == self._R_EXEC:
            self._exec_created(_ptr(desc + L.graph), _ptr(desc + L.exec))
        elif cbid == self._R_EXEC_DEL:
            h = _ptr(desc + L.exec)
            rec = self._by_exec.pop(h, None)
            if rec is not None:
                rec.replays = self._take_launches(h)
        elif cbid == self._R_GRAPH_DEL:
            for n in self._nodes.pop(_ptr(desc + L.graph), {}):
                self._node_graph.pop(n, None)

    def _node_info(self) -> _NodeInfo:
        """The minimum, on the thread making the node: raw frames and objects, named later."""
        if self._noframes:
            return ([], [], None, -1, None, None), None
        f = _caller_frame()
        fallback = None
        tid = threading.get_ident()
        if tid != self._main and self._captures:
            # backward may run in autograd's own thread: the user line is in the thread capturing
            cap = next(iter(self._captures.values()))
            if cap.thread != tid:
                fallback = attribution.grab(sys._current_frames().get(cap.thread))
        if self._lite:
            codes, lastis, _, _ = attribution.grab_node(f)
            return (codes, lastis, None, -1, None, attribution.current_range()), fallback
        return attribution.grab_node_info(f), fallback

    def _runtime(self, cbid: int, ptr: int) -> None:
        enter = _i32(ptr + self._site_off) == self._ENTER
        tid = threading.get_ident()
        if cbid in self._rt_launch:
            if enter:
                self._in_rt_launch.add(tid)
                self._launch(ptr)
            else:
                self._in_rt_launch.discard(tid)
        elif cbid in self._rt_begin:
            if enter:
                self._captures[tid] = _Capture(tid, attribution.grab(_caller_frame()), time.perf_counter(),
                                               self._reserved())
        elif cbid in self._rt_end:
            if not enter:
                cap = self._captures.pop(tid, None)
                if cap is not None:
                    cap.t_end = self._last_capture_at = time.perf_counter()
                    self._last_capture[tid] = cap
        elif cbid in self._rt_inst:  # (the compiled callback handles these itself)
            # Instantiation clones every node (GRAPHNODE_CREATED + _CLONED for each): those are not
            # the program's nodes, so node callbacks are off while it runs (halves the cost).
            if enter:
                self._inst_start[tid] = time.perf_counter()
                self._sub.enable(self._D_RES, self._R_NODE, False)
                self._sub.enable(self._D_RES, self._R_CLONE, False)
            else:
                self._sub.enable(self._D_RES, self._R_NODE, True)
                self._sub.enable(self._D_RES, self._R_CLONE, True)

    def _launch(self, ptr: int) -> None:
        params = _ptr(ptr + self._params_off)
        if not params:
            return
        h = _ptr(params)  # first parameter of cudaGraphLaunch / cuGraphLaunch: the graph exec
        n = self._launch_counts.get(h, 0) + 1
        self._launch_counts[h] = n
        if self.trace_replays > 0 and self.trace_skip < n <= self.trace_skip + self.trace_replays:
            rec = self._by_exec.get(h)
            if rec is not None:
                corr = ctypes.c_uint32.from_address(ptr + self._corr_off).value
                self._traced.add(corr)
                rec.traced_correlations.append(corr)

    def _counts_in_c(self) -> bool:
        return self._nodecb is not None and self.trace_replays == 0

    def _take_launches(self, exec_: int) -> int:
        """The replays counted for a graph exec, forgotten (its handle may be reused)."""
        if self._counts_in_c():
            return int(self._nodecb.take_launches(exec_))
        return self._launch_counts.pop(exec_, 0)

    def _all_launches(self) -> dict[int, int]:
        if self._counts_in_c():
            return dict(self._nodecb.launch_counts())
        return dict(self._launch_counts)

    def _reserved(self) -> int | None:
        """The memory the process holds from CUDA, as a running figure: only its growth across a
        capture is used. With the compiled callback: bytes taken by cudaMalloc / cuMemCreate and
        not given back (counted in its callback, no Python); else torch's allocator's
        ``reserved_bytes`` (the same growth for torch's allocator, read from its statistics)."""
        if self._nodecb is not None:
            return int(self._nodecb.alloc_bytes())
        return self._reserved_by_torch()

    def _reserved_by_torch(self) -> int | None:
        """torch's allocator's ``reserved_bytes`` on the current device."""
        torch = self._torch or sys.modules.get("torch")
        if torch is None:
            return None
        self._torch = torch
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
        from cgtool.capture.export import read_graph, read_quick

        t_inst_end = time.perf_counter()
        tid = threading.get_ident()
        cap = self._last_capture.pop(tid, None)
        t_inst0 = self._inst_start.pop(tid, None) if self._nodecb is None else self._nodecb.instantiate_began(tid)
        reserved_now = self._reserved()
        t1 = time.perf_counter()
        if self.coverage and self._t_first_graph is None:
            try:  # the clock of CUPTI's activity records: splits the run at its first graph
                self._t_first_graph = int(self._ids.get_timestamp())
            except Exception:
                pass
        ids = self._ids if isinstance(self._ids, _subscriber.Ids) else None
        # Only the driver's answers here (the template dies when this returns): the compiled read
        # and the exec id where it applies; the rest, and the document, in the writer (export.build
        # makes no CUDA call).
        raw = read_quick(graph, exec_, cupti=ids) or read_graph(graph, exec_, cupti=ids)
        handles = raw.handles
        t2 = time.perf_counter()
        infos = dict(self._nodes.get(graph, {}))
        caller = _caller_frame()
        pool = _pool_on_stack(caller)
        begin_frames = cap.frames if cap is not None else attribution.grab(caller)
        t3 = time.perf_counter()
        device = None
        torch = self._torch
        if torch is not None:
            try:
                device = int(torch._C._cuda_getDevice())
            except Exception:
                pass
        if device is not None and device not in self._cuda_env:
            # CUDA calls stay on this thread: the writer makes none (one there could wait on a driver
            # lock this thread holds while this thread waits for the writer's GIL), and a call from
            # another thread can invalidate a capture running here in "global" mode.
            try:
                from cgtool.capture.export import cuda_environment

                self._cuda_env[device] = cuda_environment(device)
            except Exception as e:
                self._cuda_env[device] = {"error": f"{type(e).__name__}: {e}"}
        with self._lock:
            seq = len(self.graphs)
            rec = GraphRecord(
                seq=seq,
                exec_handle=exec_,
                exec_graph_id=int(raw.exec_id),
                template_graph_id=_safe(lambda: int(self._ids.get_graph_id(graph))),
                file=f"graph_{seq:03d}.json",
                nodes=len(handles),
                capture_s=(cap.t_end - cap.t_begin) if cap is not None and cap.t_end is not None else None,
                instantiate_s=(t_inst_end - t_inst0) if t_inst0 is not None else None,
                export_s=t2 - t1,  # the read here; the writer adds the build
                reserved_during_capture=(reserved_now - cap.reserved_begin)
                if cap is not None and cap.reserved_begin is not None and reserved_now is not None else None,
                pool=pool,
                thread=tid,
                since_start_s=time.perf_counter() - self._t0,
            )
            self.graphs.append(rec)
            self._by_exec[exec_] = rec
            self._take_launches(exec_)  # a reused handle starts again from 0
        self._last_capture_at = t4 = time.perf_counter()
        # where the exec-created callback's time goes (benchmarks/bench_record.py)
        rec.recorder_s.update(reserved=t1 - t_inst_end, export=t2 - t1, pool_and_stack=t3 - t2,
                              environment_and_record=t4 - t3)
        if self._nodecb is not None:
            calls, ns, _ = self._nodecb.stats()
            rec.recorder_s["node_callbacks"] = (ns - self._node_ns_seen) / 1e9
            rec.recorder_s["node_callback_calls"] = calls - self._node_calls_seen
            self._node_calls_seen, self._node_ns_seen = calls, ns
        self._queue.put(("graph", rec, raw, handles, infos, begin_frames, device, self._last_capture_at))

    # ------------------------------------------------------------------ writer
    def _wait_quiet(self, queued_at: float) -> None:
        """Hold a graph back while the program is capturing graphs back to back.

        Writing a graph holds the GIL for about a millisecond (sources, encoding, index); the
        program's next capture, running meanwhile, would wait for it (measured with
        ``benchmarks/probe_record_capture.py``). So the writer starts once no capture is in
        progress and none has ended for ``_QUIET_S`` — or ``_MAX_DEFER_S`` after the graph came,
        so that a program capturing without pause still gets its files — and waits again between
        its steps when a capture has begun meanwhile. The quiet time is longer than the full
        collection ``torch.cuda.graph`` runs before each capture (``gc.collect()``, tens of ms in a
        torch process): with 50 ms, the writer sometimes started during it, and the second graph
        of a fresh recorded process took ~1.4 ms longer (``benchmarks/bench_record.py``, per
        graph). A flush, the end of the run and every exit path the guards catch
        (``install_exit_guards``) end the wait at once.
        """
        quiet, most = self._quiet_s, queued_at + _MAX_DEFER_S
        while quiet > 0 and not self._hurry.is_set():
            now = time.perf_counter()
            if now >= most:
                return
            if not self._captures:
                idle = now - self._last_capture_at
                if idle >= quiet:
                    return
                wait = quiet - idle
            else:
                wait = quiet
            self._hurry.wait(min(wait, most - now))

    def _write_loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if job[0] == "graph":
                    self._wait_quiet(job[-1])
                    self._write_graph(*job[1:])
                elif job[0] == "index":
                    self.write_index(finished=False)
                elif job[0] == "flush":
                    if not self._finished:
                        self._hurry.clear()  # the graphs asked for are written: hold the next ones again
                    job[1].set()
            except Exception as e:  # a failed write is reported in the index, the program goes on
                if len(self.errors) < 20:
                    self.errors.append(f"writer: {type(e).__name__}: {e}")

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every graph handed to the writer is on disk (False on timeout or no writer)."""
        w = self._writer
        if w is None or not w.is_alive() or os.getpid() != self.pid or threading.current_thread() is w:
            return False
        done = threading.Event()
        self._hurry.set()
        self._queue.put(("flush", done))
        return done.wait(timeout)

    def _environment(self, device: int | None) -> dict[str, Any]:
        """The export's environment block: the CUDA part read in the callback, the host part here."""
        if self._env is None:
            try:
                from cgtool.capture.export import host_environment

                self._env = dict(host_environment())
            except Exception as e:
                self._env = {"host_error": f"{type(e).__name__}: {e}"}
        cuda = self._cuda_env.get(device, {}) if device is not None else {}
        return {**cuda, **self._env}

    def _site(self, info: _NodeInfo | bytes) -> dict[str, Any]:
        # Nodes made from the same lines (a layer loop) share frames: resolve each stack once. A node
        # info packed by the compiled callback is its own key (the frames' code objects, offsets,
        # module, op and range, which the callback keeps alive); a tuple's key is built from the same.
        key: Any = None
        if isinstance(info, bytes):
            key = info
            hit = self._site_cache.get(key)
            if hit is not None:
                return hit[1]
            unpacked: _NodeInfo = self._nodecb.unpack(info)
        else:
            unpacked = info
            node, fallback = info
            if fallback is None:
                codes, lastis, module, module_index, op, rf = node
                key = (tuple(map(id, codes)), tuple(lastis), id(module), module_index, op, rf)
                hit = self._site_cache.get(key)
                if hit is not None:
                    return hit[1]
        site = attribution.resolve_node(unpacked[0], unpacked[1]).to_json()
        if key is not None:
            if len(self._site_cache) > 50_000:
                self._site_cache.clear()
            self._site_cache[key] = (unpacked, site)  # the info keeps the code objects, so their ids stay theirs
        return site

    def _write_graph(self, rec: GraphRecord, raw: Any, handles: list[int], infos: dict[int, _NodeInfo | bytes],
                     begin_frames: list[RawFrame], device: int | None, queued_at: float) -> None:
        from cgtool.capture.export import build

        def pause() -> None:  # between steps: a capture that began meanwhile goes first
            if self._captures:
                self._wait_quiet(queued_at)

        t0 = time.perf_counter()
        data = build(raw, with_environment=False).data
        rec.export_s += time.perf_counter() - t0
        pause()
        meta = data["cgtool"]
        meta["timings"]["export_s"] = rec.export_s
        meta["environment"] = self._environment(device)
        extras: list[dict[str, Any]] = meta["nodes"]
        compiled = None
        for i, h in enumerate(handles):
            info = infos.get(h)
            if info is None or i >= len(extras):
                continue
            src = self._site(info)
            extras[i]["source"] = src
            if compiled is None and src.get("generated"):
                compiled = str(src["generated"]).rsplit(":", 1)[0]
        pause()
        begin = attribution.resolve(begin_frames)
        where = f"{os.path.basename(begin.file)}:{begin.line}" if begin.file else "?"
        rec.label = f"#{rec.seq} {where}"
        rec.captured_at = f"{begin.file}:{begin.line}" if begin.file else None
        rec.compiled = compiled
        meta["record"] = {
            "label": rec.label,
            "seq": rec.seq,
            "captured_at": begin.to_json(),
            "template_graph_id": rec.template_graph_id,
            "pool": rec.pool,
            "reserved_during_capture": rec.reserved_during_capture,
            "replays": rec.replays,
            "compiled_code": rec.compiled,
            "thread": "main" if rec.thread == self._main else rec.thread,
            "time_since_start_s": rec.since_start_s,
        }
        timings = meta["timings"]
        timings["capture_s"] = rec.capture_s
        timings["instantiate_s"] = rec.instantiate_s
        pause()
        _write_json(os.path.join(self.out_dir, rec.file), data)
        self._docs[rec.seq] = data
        rec.write_s = time.perf_counter() - t0
        rec.written = True
        pause()
        self.write_index(finished=False)

    # ------------------------------------------------------------------ finish
    def finish(self, exit_code: int | None) -> None:
        """Unsubscribe, drain the writer, write final replay counts, the ledger, the trace and index.json."""
        if self._finished or os.getpid() != self.pid:
            return
        self._finished = True
        t0 = time.perf_counter()
        self.timeline["program_end"] = time.time()
        cupti = self._cupti
        if cupti is not None and self.coverage:
            try:
                cupti.activity_flush_all(1)
                for k in self._kinds:
                    cupti.activity_disable(k)
                cupti.activity_flush_all(1)
            except Exception as e:
                self.errors.append(f"activity flush: {e}")
        if self._sub is not None:
            try:
                self._sub.unsubscribe()
            except Exception:
                pass
        self._cupti = None
        t1 = time.perf_counter()
        w = self._writer
        if w is not None and w.is_alive() and threading.current_thread() is not w:
            self._hurry.set()
            self._queue.put(None)
            w.join(60)
        t2 = time.perf_counter()
        with self._lock:
            counts = self._all_launches()
            for h, rec in list(self._by_exec.items()):
                rec.replays = counts.get(h, 0)
        ledger = self.ledger()
        t3 = time.perf_counter()
        for rec in list(self.graphs):
            doc = self._docs.get(rec.seq)
            if doc is None:
                continue
            if self.coverage:
                doc["cgtool"]["record"]["kernel_ns"] = self._cov_graph_ns.get(rec.exec_graph_id, 0)
            if doc["cgtool"]["record"]["replays"] != rec.replays or self.coverage:
                doc["cgtool"]["record"]["replays"] = rec.replays
                _write_json(os.path.join(self.out_dir, rec.file), doc)
        trace_file = None
        if self.trace_replays > 0:
            trace_file = self._write_trace([self._docs[r.seq] for r in self.graphs if r.seq in self._docs])
        t4 = time.perf_counter()
        self.timings.update(finish_unsubscribe_s=t1 - t0, finish_drain_writer_s=t2 - t1, finish_ledger_s=t3 - t2,
                            finish_rewrite_s=t4 - t3)
        self.timeline["finish_end"] = time.time()
        self.write_index(finished=True, exit_code=exit_code, ledger=ledger, trace=trace_file)
        self.timings["finish_s"] = time.perf_counter() - t0

    def coverage_summary(self) -> dict[str, Any] | None:
        """Kernel time inside graph replays against all kernel time (summed durations, ns)."""
        if not self.coverage:
            return None
        graph_ns = sum(self._cov_graph_ns.values())
        total = graph_ns + self._cov_eager_ns
        since = graph_ns + self._cov_eager_after_ns
        known = {r.exec_graph_id for r in self.graphs}
        return {
            "kernel_ns_in_graphs": graph_ns,
            "kernel_ns_outside_graphs": self._cov_eager_ns,
            "kernels_in_graphs": sum(self._cov_graph_kernels.values()),
            "kernels_outside_graphs": self._cov_eager_kernels,
            "share_in_graphs": graph_ns / total if total else None,
            # warm-up, compilation and autotuning run before the first graph: the steady state after it
            "kernel_ns_outside_graphs_since_first_graph": self._cov_eager_after_ns,
            "kernels_outside_graphs_since_first_graph": self._cov_eager_after_kernels,
            "share_in_graphs_since_first_graph": graph_ns / since if since and self._t_first_graph is not None
            else None,
            "kernel_ns_of_unrecorded_graphs": sum(v for k, v in self._cov_graph_ns.items() if k not in known),
            "note": "summed durations of CUPTI kernel records over the whole run (kernels on concurrent streams "
                    "are counted in full each); memcpy and memset work is not included",
        }

    def ledger(self) -> dict[str, Any]:
        """Bytes reserved per pool (torch's allocator segments) and per graph, against the peak."""
        torch = sys.modules.get("torch")  # a program that never imported torch has no pools to report
        try:
            if torch is None or not torch.cuda.is_initialized():
                return {}
            segs = torch.cuda.memory_snapshot()
            peak = int(torch.cuda.max_memory_reserved())
            reserved = int(torch.cuda.memory_reserved())
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        pools: dict[str, int] = {}
        for s in segs:
            pid = s.get("segment_pool_id")
            if pid is None or tuple(pid) == (0, 0):
                continue
            key = f"{pid[0]},{pid[1]}"
            pools[key] = pools.get(key, 0) + int(s.get("total_size", 0))
        graphs_of: dict[str, list[int]] = {}
        for r in self.graphs:
            if r.pool is not None:
                graphs_of.setdefault(f"{r.pool[0]},{r.pool[1]}", []).append(r.seq)
        held = sum(pools.values())
        return {
            "pools": [{"pool": k, "bytes_reserved": v, "graphs": graphs_of.get(k, [])} for k, v in sorted(pools.items())],
            "graphs": [{"seq": r.seq, "pool": None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
                        "reserved_during_capture": r.reserved_during_capture} for r in self.graphs],
            "bytes_held_by_graph_pools": held,
            "bytes_reserved_at_exit": reserved,
            "peak_bytes_reserved": peak,
            "note": "pool bytes are torch's allocator segments tagged with the pool at exit; "
            "reserved_during_capture is the memory the process took from CUDA while the graph was captured "
            "(cudaMalloc and cuMemCreate, less what was freed; for torch's allocator, the growth of its "
            "reserved memory)",
        }

    def _write_trace(self, docs: list[dict[str, Any]]) -> str | None:
        from cgtool.artifacts.chrome import build_trace

        if not self.records:
            return None
        meta = {"workload": " ".join(self.program), "replays": self.trace_replays, "skipped_replays": self.trace_skip,
                "dropped_records": self.dropped, "collector": "cupti", "recorder": "cgtool record",
                "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
                "environment": docs[0]["cgtool"]["environment"] if docs else {}}
        trace = build_trace(self.records, graphs=docs, meta=meta)
        _write_json(os.path.join(self.out_dir, "trace.json"), trace)
        return "trace.json"

    def _exec_totals(self) -> dict[str, float]:
        """The graph-exec callback's parts summed over every graph so far (``exec_created_<part>_s``)."""
        with self._lock:
            recs = list(self.graphs)
        out: dict[str, float] = {}
        for r in recs:
            for k in _EXEC_PARTS:
                if k in r.recorder_s:
                    out[f"exec_created_{k}_s"] = out.get(f"exec_created_{k}_s", 0.0) + r.recorder_s[k]
        return out

    def write_index(self, *, finished: bool, exit_code: int | None = None, ledger: dict[str, Any] | None = None,
                    trace: str | None = None) -> None:
        with self._lock:
            recs = [r for r in self.graphs if r.written]
            live = {h: r for h, r in self._by_exec.items()}
            counts = self._all_launches()
        cov = self.coverage_summary() if finished else None
        graphs = []
        for r in recs:
            g = {
                "label": r.label, "file": r.file, "exec_graph_id": r.exec_graph_id,
                "template_graph_id": r.template_graph_id, "nodes": r.nodes, "captured_at": r.captured_at,
                "capture_s": r.capture_s, "instantiate_s": r.instantiate_s, "export_s": r.export_s,
                "write_s": r.write_s, "recorder_s": dict(r.recorder_s),
                "reserved_during_capture": r.reserved_during_capture,
                "pool": None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
                "replays": counts.get(r.exec_handle, 0) if live.get(r.exec_handle) is r else r.replays,
                "traced_replays": len(r.traced_correlations), "compiled_code": r.compiled,
            }
            if cov is not None:
                g["kernel_ns"] = self._cov_graph_ns.get(r.exec_graph_id, 0)
                g["kernels"] = self._cov_graph_kernels.get(r.exec_graph_id, 0)
            graphs.append(g)
        stats = dict(self._cb_stats)
        if getattr(self, "subscriber", None) == "c":  # node callbacks counted by the compiled callback
            calls, ns, errs = _subscriber.compiled_callback().stats()
            prev = stats.get((self._D_RES, self._R_NODE), [0, 0])  # other threads' nodes, in Python
            stats[(self._D_RES, self._R_NODE)] = [prev[0] + calls, prev[1] + ns]
            for key, (c_calls, c_ns) in _subscriber.compiled_callback().handled_stats().items():
                prev = stats.get(key, [0, 0])
                stats[key] = [prev[0] + c_calls, prev[1] + c_ns]
            if errs and not any(e.startswith("compiled node callback") for e in self.errors):
                self.errors.append(f"compiled node callback: {errs} callback(s) failed")
        doc: dict[str, Any] = {
            "cgtool_record": RECORD_SCHEMA_VERSION,
            "program": self.program,
            "started": self._started,
            "finished": finished,
            "exit_code": exit_code,
            "rank": _env_int("RANK"),
            "world_size": _env_int("WORLD_SIZE"),
            "graphs": graphs,
            "compile": {"cudagraph_skips": list(self.skips),
                        "graphs_from_compiled_code": [g["label"] for g in graphs if g["compiled_code"]]},
            "coverage": cov,
            "ledger": ledger,
            "trace": trace,
            "recorder_errors": list(self.errors),
            "subscriber": getattr(self, "subscriber", None),
            "callback_stats": {f"{d}/{c}": {"calls": v[0], "s_inside": v[1] / 1e9}
                               for (d, c), v in sorted(stats.items())},
            "launch_callbacks": self._launch_callbacks + (
                stats.get((self._D_DRV, min(self._drv_launch)), [0])[0] if self._counts_in_c() else 0),
            "recorder_timings": {**self.timings, **self._exec_totals()},
            "timeline": dict(self.timeline),
            "layout": getattr(getattr(self, "_L", None), "offsets", None),
        }
        _write_json(os.path.join(self.out_dir, "index.json"), doc)


def install_exit_guards(rec: Recorder) -> None:
    """Drain the writer on the ways out of a program that skip the boot's ``finally``.

    ``os._exit`` (finishes the recording with the code given); SIGTERM while its handler is the
    default one (finishes, then dies of the signal as it would have). Fatal signals (SIGKILL,
    SIGSEGV) cannot be caught: the graphs of the last quarter second (or of a burst of captures)
    can be lost then.
    """
    real_exit = os._exit

    def _exit(code: int) -> None:
        if os.getpid() == rec.pid:
            try:
                rec.finish(code)
            except BaseException:
                pass
        real_exit(code)

    os._exit = _exit  # type: ignore[assignment]
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def _term(signum: int, frame: Any) -> None:
            try:
                rec.finish(128 + signum)
            finally:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, _term)


def _write_json(path: str, doc: Any) -> None:
    # msgspec's encoder: a graph's export is written while the program runs, and json.dump (which
    # encodes in Python, chunk by chunk, when writing to a file) took milliseconds per graph.
    import msgspec

    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.json.encode(doc))
    os.replace(tmp, path)


def _ptr(addr: int) -> int:
    return ctypes.c_void_p.from_address(addr).value or 0


def _i32(addr: int) -> int:
    return ctypes.c_int.from_address(addr).value


_OWN = (__file__, _subscriber.__file__)


def _caller_frame() -> Any:
    """The innermost frame that is not the recorder's (or the subscriber's) own."""
    f: Any = sys._getframe(1)
    own = _OWN
    while f is not None and f.f_code.co_filename in own:
        f = f.f_back
    return f


def _cupti_installed() -> bool:
    """cupti-python can be imported (looked up, not imported: that costs 0.4 s before torch)."""
    if "cupti" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError):
        return False


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v is not None and v.isdigit() else None


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _pool_of(g: Any) -> list[int] | None:
    try:
        return [int(x) for x in g.pool()]
    except Exception:
        return None


def _pool_on_stack(frame: Any, depth: int = 12) -> list[int] | None:
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
                return _pool_of(g)
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
                return _pool_of(g)
        f = f.f_back
    return None
