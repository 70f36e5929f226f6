"""The in-process recorder of ``cgtool record``: CUPTI callbacks on every graph the program makes.

One CUPTI subscriber, with only these callbacks enabled (everything else stays off, so eager
work pays nothing):

* resource ``GRAPHNODE_CREATED`` / ``GRAPHNODE_CLONED``: the Python frames of the creating
  code (live: CUPTI calls back in the thread that made the CUDA call), the nn.Module classes on
  the stack, the autograd node when a backward pass runs;
* resource ``GRAPHEXEC_CREATED``: the graph is exported at once (``capture/export.py``'s
  ``graph_data``, ``get_graph_data()``'s schema, tools ids ``(exec_id << 32) | local id``) with
  the attribution of every node, and written to the output folder with a new ``index.json``:
  a crash later loses nothing recorded so far;
* resource ``GRAPHEXEC_DESTROY_STARTING`` / ``GRAPH_DESTROY_STARTING``: handles are reused by
  the driver, so per-handle state is dropped;
* runtime API ``cudaStreamBeginCapture*`` (the user stack at capture begin, reserved memory),
  ``cudaStreamEndCapture*``, ``cudaGraphInstantiate*`` (timings) and ``cudaGraphLaunch*``
  (replay counts; driver ``cuGraphLaunch*`` too, for programs that call the driver directly).

Pool identity is a torch allocator notion, invisible to CUDA: at ``GRAPHEXEC_CREATED`` the
``torch.cuda.CUDAGraph`` being ended is found among the locals of the frames on the stack
(``torch.cuda.graph.__exit__`` holds it), and its ``pool()`` is recorded.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cgtool.capture.record import _subscriber, attribution
from cgtool.capture.record.attribution import RawFrame
from cgtool.errors import CaptureError, MissingExtraError

RECORD_SCHEMA_VERSION = 1
_LOW32 = 0xFFFFFFFF


class RecordSetupError(CaptureError):
    """Recording cannot start (CUPTI missing or held by another profiler); raised before the program runs."""


@dataclass
class _NodeInfo:
    frames: list[RawFrame]
    modules: list[str]
    autograd_op: str | None
    fallback: list[RawFrame] | None


@dataclass
class _Capture:
    """One stream capture in progress on a thread."""

    thread: int
    frames: list[RawFrame]
    t_begin: float
    reserved_begin: int | None
    t_end: float | None = None
    t_inst: float | None = None


@dataclass
class GraphRecord:
    """What index.json says about one instantiated graph."""

    seq: int
    exec_handle: int
    exec_graph_id: int
    template_graph_id: int | None
    file: str
    nodes: int
    label: str
    captured_at: str | None
    capture_s: float | None
    instantiate_s: float | None
    export_s: float
    reserved_during_capture: int | None
    pool: list[int] | None
    replays: int = 0
    traced_correlations: list[int] = field(default_factory=list)
    thread: int = 0
    compiled: str | None = None  # Inductor output code that ran inside the capture, if any


class Recorder:
    """Subscribes to CUPTI and writes every instantiated graph into ``out_dir``."""

    def __init__(self, out_dir: str, *, trace_replays: int = 0, trace_skip: int = 1, program: list[str]) -> None:
        self.out_dir = out_dir
        self.trace_replays = trace_replays
        self.trace_skip = trace_skip
        self.program = program
        self.graphs: list[GraphRecord] = []
        self._by_exec: dict[int, GraphRecord] = {}
        self._nodes: dict[int, dict[int, _NodeInfo]] = {}  # template graph handle -> node handle -> info
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
        self._cb_stats: dict[tuple[int, int], list[int]] = {}  # (domain, cbid) -> [calls, ns inside]
        self._lite = bool(os.environ.get("CGTOOL_RECORD_LITE"))  # no module names / autograd op (overhead tests)
        self._cupti: Any = None
        self._started = time.time()
        self._t0 = time.perf_counter()

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        """Subscribe to CUPTI; :class:`RecordSetupError` when it cannot (before the program runs)."""
        try:
            from cupti import cupti
        except Exception as e:  # ImportError, or a libcupti mismatch raised at load time
            raise MissingExtraError(
                "`cgtool record`",
                detail=f"cupti-python, which could not be loaded ({type(e).__name__}: {e}); take the version "
                "that matches your CUDA's CUPTI, e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0",
            ) from None
        self._cupti = cupti
        self._L = _subscriber.Layout(cupti)
        from cgtool.capture import _fastcuda, export  # noqa: F401  (loaded now, not in the first callback)

        how = os.environ.get("CGTOOL_RECORD_SUBSCRIBER", "ctypes")
        try:
            try:
                self._sub = _subscriber.Subscriber(cupti, self._callback, how)
            except OSError as e:  # libcupti not reachable through ctypes: cupti-python's own subscribe
                self.errors.append(f"ctypes subscriber unavailable ({e}); using cupti-python's subscribe")
                how = "cupti-python"
                self._sub = _subscriber.Subscriber(cupti, self._callback, how)
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
        R = cupti.CallbackIdResource
        D = cupti.CallbackDomain
        self._D_RES, self._D_RT, self._D_DRV = int(D.RESOURCE), int(D.RUNTIME_API), int(D.DRIVER_API)
        self._R_NODE, self._R_CLONE = int(R.GRAPHNODE_CREATED), int(R.GRAPHNODE_CLONED)
        self._R_EXEC, self._R_EXEC_DEL = int(R.GRAPHEXEC_CREATED), int(R.GRAPHEXEC_DESTROY_STARTING)
        self._R_GRAPH_DEL = int(R.GRAPH_DESTROY_STARTING)
        self._ENTER = int(cupti.ApiCallbackSite.API_ENTER)
        for cbid in (self._R_NODE, self._R_CLONE, self._R_EXEC, self._R_EXEC_DEL, self._R_GRAPH_DEL):
            self._sub.enable(self._D_RES, cbid)
        self._rt_launch: set[int] = set()
        self._rt_begin: set[int] = set()
        self._rt_end: set[int] = set()
        self._rt_inst: set[int] = set()
        for name, v in cupti.runtime_api_trace_cbid.__members__.items():
            for prefix, bucket in (("cudaGraphLaunch", self._rt_launch), ("cudaStreamBeginCapture", self._rt_begin),
                                   ("cudaStreamEndCapture", self._rt_end), ("cudaGraphInstantiate", self._rt_inst)):
                if name.startswith(prefix):
                    bucket.add(int(v))
                    self._sub.enable(self._D_RT, int(v))
        self._drv_launch: set[int] = set()
        for name, v in cupti.driver_api_trace_cbid.__members__.items():
            if name.startswith("cuGraphLaunch"):
                self._drv_launch.add(int(v))
                self._sub.enable(self._D_DRV, int(v))
        if self.trace_replays > 0:
            self._start_activity()
        self._install_skip_handler()
        self.write_index(finished=False)

    def _start_activity(self) -> None:
        from cgtool.capture import cupti_trace

        cupti = self._cupti
        cupti_trace.cupti_was_used = True
        K = self._K = cupti.ActivityKind
        self._kinds = [K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET, K.RUNTIME]
        cupti.activity_register_callbacks(lambda: (8 * 1024 * 1024, 0), self._buffer_completed)
        for k in self._kinds:
            cupti.activity_enable(k)

    def _buffer_completed(self, activities: list[Any]) -> None:
        """Keep the records of the chosen replays only: a whole run's kernels would not fit."""
        from cgtool.capture.cupti_trace import _gpu_record

        K = self._K
        traced = self._traced
        for a in activities:
            kind = int(a.kind)
            if kind in (K.CONCURRENT_KERNEL, K.KERNEL, K.MEMCPY, K.MEMSET):
                if a.correlation_id not in traced:
                    continue
                if kind == K.MEMCPY or kind == K.MEMSET:
                    is_copy = kind == K.MEMCPY
                    rec = _gpu_record(a, "memcpy" if is_copy else "memset", "Memcpy" if is_copy else "Memset")
                    rec["bytes"] = a.bytes
                else:
                    rec = _gpu_record(a, "kernel", a.name)
                    rec["grid"] = [a.grid_x, a.grid_y, a.grid_z]
                    rec["block"] = [a.block_x, a.block_y, a.block_z]
                self.records.append(rec)
            elif kind == K.RUNTIME and a.correlation_id in traced:
                self.records.append({"kind": "launch", "name": "cudaGraphLaunch", "start": a.start, "end": a.end,
                                     "correlation": a.correlation_id, "process": a.process_id,
                                     "thread": a.thread_id})

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
        t0 = time.perf_counter_ns()
        try:
            if domain == self._D_RES:
                self._resource(cbid, ptr)
            elif domain == self._D_RT:
                self._runtime(cbid, ptr)
            elif domain == self._D_DRV:
                if cbid in self._drv_launch and threading.get_ident() not in self._in_rt_launch:
                    if _i32(ptr + self._L.site) == self._ENTER:
                        self._launch(ptr)
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
            self._nodes.setdefault(graph, {})[node] = self._node_info()
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
                rec.replays = self._launch_counts.pop(h, 0)
        elif cbid == self._R_GRAPH_DEL:
            for n in self._nodes.pop(_ptr(desc + L.graph), {}):
                self._node_graph.pop(n, None)

    def _node_info(self) -> _NodeInfo:
        f = _caller_frame()
        tid = threading.get_ident()
        fallback = None
        autograd_op = None
        if tid != self._main:
            # backward may run in autograd's own thread: the user line is in the thread capturing
            cap = self._last_capture_any()
            if cap is not None and cap.thread != tid:
                fallback = attribution.grab(sys._current_frames().get(cap.thread))
        if self._lite:
            return _NodeInfo(attribution.grab(f), [], None, fallback)
        if "torch" in sys.modules:
            autograd_op = _autograd_node_name()
        return _NodeInfo(attribution.grab(f), attribution.module_names(f), autograd_op, fallback)

    def _last_capture_any(self) -> _Capture | None:
        if self._captures:
            return next(iter(self._captures.values()))
        return None

    def _runtime(self, cbid: int, ptr: int) -> None:
        enter = _i32(ptr + self._L.site) == self._ENTER
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
                                               _reserved())
        elif cbid in self._rt_end:
            if not enter:
                cap = self._captures.pop(tid, None)
                if cap is not None:
                    cap.t_end = time.perf_counter()
                    self._last_capture[tid] = cap
        elif cbid in self._rt_inst:
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
        params = _ptr(ptr + self._L.params)
        if not params:
            return
        h = _ptr(params)  # first parameter of cudaGraphLaunch / cuGraphLaunch: the graph exec
        n = self._launch_counts.get(h, 0) + 1
        self._launch_counts[h] = n
        if self.trace_replays > 0 and self.trace_skip < n <= self.trace_skip + self.trace_replays:
            rec = self._by_exec.get(h)
            if rec is not None:
                corr = ctypes.c_uint32.from_address(ptr + self._L.corr).value
                self._traced.add(corr)
                rec.traced_correlations.append(corr)

    # ------------------------------------------------------------ exec created
    def _exec_created(self, graph: int, exec_: int) -> None:
        from cgtool.capture import _fastcuda
        from cgtool.capture.export import graph_data

        t_inst_end = time.perf_counter()
        tid = threading.get_ident()
        cap = self._last_capture.pop(tid, None)
        t_inst0 = self._inst_start.pop(tid, None)
        reserved_now = _reserved()
        data = graph_data(graph, exec_)
        exec_id = int(data["exec_graph_id"])
        fast = _fastcuda.load()
        handles = fast.nodes(graph) if fast is not None else []
        infos = self._nodes.get(graph, {})
        extras: list[dict[str, Any]] = data["cgtool"]["nodes"]
        sources: list[dict[str, Any] | None] = []
        for i, node in enumerate(data["nodes"]):
            info = infos.get(handles[i]) if i < len(handles) else None
            site = (attribution.resolve(info.frames, modules=info.modules, autograd_op=info.autograd_op,
                                        fallback=info.fallback) if info is not None else None)
            src = site.to_json() if site is not None else None
            sources.append(src)
            if i < len(extras) and src is not None:
                extras[i]["source"] = src
        begin_frames = cap.frames if cap is not None else attribution.grab(_caller_frame())
        begin = attribution.resolve(begin_frames)
        pool = _pool_on_stack(_caller_frame())
        compiled = next((s["generated"] for s in sources if s and s.get("generated")), None)
        seq = len(self.graphs)
        where = f"{os.path.basename(begin.file)}:{begin.line}" if begin.file else "?"
        rec = GraphRecord(
            seq=seq,
            exec_handle=exec_,
            exec_graph_id=exec_id,
            template_graph_id=_safe(lambda: int(self._cupti.get_graph_id(graph))),
            file=f"graph_{seq:03d}.json",
            nodes=len(data["nodes"]),
            label=f"#{seq} {where}",
            captured_at=f"{begin.file}:{begin.line}" if begin.file else None,
            capture_s=(cap.t_end - cap.t_begin) if cap is not None and cap.t_end is not None else None,
            instantiate_s=(t_inst_end - t_inst0) if t_inst0 is not None else None,
            export_s=float(data["cgtool"]["timings"]["export_s"]),
            reserved_during_capture=(reserved_now - cap.reserved_begin)
            if cap is not None and cap.reserved_begin is not None and reserved_now is not None else None,
            pool=pool,
            thread=tid,
            compiled=compiled.rsplit(":", 1)[0] if compiled else None,
        )
        data["cgtool"]["record"] = self._graph_meta(rec, begin)
        timings = data["cgtool"]["timings"]
        timings["capture_s"] = rec.capture_s
        timings["instantiate_s"] = rec.instantiate_s
        self._docs = getattr(self, "_docs", {})
        self._docs[seq] = data
        with self._lock:
            self.graphs.append(rec)
            self._by_exec[exec_] = rec
            self._launch_counts[exec_] = 0
            _write_json(os.path.join(self.out_dir, rec.file), data)
            self.write_index(finished=False)

    def _graph_meta(self, rec: GraphRecord, begin: attribution.Site) -> dict[str, Any]:
        return {
            "label": rec.label,
            "seq": rec.seq,
            "captured_at": begin.to_json(),
            "template_graph_id": rec.template_graph_id,
            "pool": rec.pool,
            "reserved_during_capture": rec.reserved_during_capture,
            "replays": rec.replays,
            "compiled_code": rec.compiled,
            "thread": "main" if rec.thread == self._main else rec.thread,
            "time_since_start_s": time.perf_counter() - self._t0,
        }

    # ------------------------------------------------------------------ finish
    def finish(self, exit_code: int | None) -> None:
        """Unsubscribe, write final replay counts, the memory ledger, the trace and index.json."""
        cupti = self._cupti
        if cupti is None:
            return
        if self.trace_replays > 0:
            try:
                cupti.activity_flush_all(1)
                for k in self._kinds:
                    cupti.activity_disable(k)
                cupti.activity_flush_all(1)
            except Exception as e:
                self.errors.append(f"activity flush: {e}")
        try:
            self._sub.unsubscribe()
        except Exception:
            pass
        self._cupti = None
        for h, rec in self._by_exec.items():
            rec.replays = self._launch_counts.get(h, 0)
        ledger = self.ledger()
        docs = getattr(self, "_docs", {})
        for rec in self.graphs:
            doc = docs.get(rec.seq)
            if doc is not None:
                doc["cgtool"]["record"]["replays"] = rec.replays
                _write_json(os.path.join(self.out_dir, rec.file), doc)
        trace_file = None
        if self.trace_replays > 0:
            trace_file = self._write_trace([docs[r.seq] for r in self.graphs if r.seq in docs])
        self.write_index(finished=True, exit_code=exit_code, ledger=ledger, trace=trace_file)

    def ledger(self) -> dict[str, Any]:
        """Bytes reserved per pool (torch's allocator segments) and per graph, against the peak."""
        try:
            import torch

            if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                return {}
            segs = torch.cuda.memory_snapshot()  # type: ignore[no-untyped-call]
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
            "reserved_during_capture is the growth of torch's reserved memory while the graph was captured",
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

    def write_index(self, *, finished: bool, exit_code: int | None = None, ledger: dict[str, Any] | None = None,
                    trace: str | None = None) -> None:
        counts = self._launch_counts
        graphs = []
        for r in self.graphs:
            live = self._by_exec.get(r.exec_handle) is r
            graphs.append({
                "label": r.label, "file": r.file, "exec_graph_id": r.exec_graph_id,
                "template_graph_id": r.template_graph_id, "nodes": r.nodes, "captured_at": r.captured_at,
                "capture_s": r.capture_s, "instantiate_s": r.instantiate_s, "export_s": r.export_s,
                "reserved_during_capture": r.reserved_during_capture,
                "pool": None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
                "replays": counts.get(r.exec_handle, 0) if live else r.replays,
                "traced_replays": len(r.traced_correlations), "compiled_code": r.compiled,
            })
        doc: dict[str, Any] = {
            "cgtool_record": RECORD_SCHEMA_VERSION,
            "program": self.program,
            "started": self._started,
            "finished": finished,
            "exit_code": exit_code,
            "rank": _env_int("RANK"),
            "world_size": _env_int("WORLD_SIZE"),
            "graphs": graphs,
            "compile": {"cudagraph_skips": self.skips,
                        "graphs_from_compiled_code": [g["label"] for g in graphs if g["compiled_code"]]},
            "ledger": ledger,
            "trace": trace,
            "recorder_errors": self.errors,
            "subscriber": getattr(self, "subscriber", None),
            "callback_stats": {f"{d}/{c}": {"calls": v[0], "s_inside": v[1] / 1e9}
                               for (d, c), v in sorted(self._cb_stats.items())},
            "layout": getattr(getattr(self, "_L", None), "offsets", None),
        }
        _write_json(os.path.join(self.out_dir, "index.json"), doc)


def _write_json(path: str, doc: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


def _ptr(addr: int) -> int:
    return ctypes.c_void_p.from_address(addr).value or 0


def _i32(addr: int) -> int:
    return ctypes.c_int.from_address(addr).value


def _caller_frame() -> Any:
    """The innermost frame that is not the recorder's (or the subscriber's) own."""
    f: Any = sys._getframe(1)
    own = (__file__, _subscriber.__file__)
    while f is not None and f.f_code.co_filename in own:
        f = f.f_back
    return f


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v is not None and v.isdigit() else None


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _reserved() -> int | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return int(torch.cuda.memory_reserved())
    except Exception:
        return None


def _autograd_node_name() -> str | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        n = torch._C._current_autograd_node()
        return None if n is None else str(n.name())
    except Exception:
        return None


def _pool_on_stack(frame: Any, depth: int = 12) -> list[int] | None:
    """The pool of the torch.cuda.CUDAGraph being ended, from the locals of the frames on the stack."""
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
        for v in list(f.f_locals.values()):
            g = v if isinstance(v, CG) else getattr(v, "cuda_graph", None)
            if isinstance(g, CG):
                try:
                    return [int(x) for x in g.pool()]
                except Exception:
                    return None
        f = f.f_back
    return None
