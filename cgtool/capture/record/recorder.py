"""The in-process recorder of ``cgtool record``: every graph one process instantiates, on disk.

:class:`Recorder` puts the parts together and owns their order; each part is its own module,
testable alone with the fake CUPTI (``tests/test_record_recorder_fake.py``):

* ``subscription.py``: loading CUPTI, the one subscriber, which callbacks are on;
* ``tracker.py``: the callbacks' state machine (nodes, captures, instantiations, replay counts);
* ``writer.py``: the writer thread (exports, source lines, files, index refreshes);
* ``coverage.py``: CUPTI kernel activity (``--coverage``, ``--trace-replays``);
* ``ledger.py``: the process's memory ledger and the graph entries of its index.json;
* ``exits.py``: the ways out of a program, each of which finishes the recording first.

The process tree (one recorder in every process of a program) is ``process.py``'s and
``tree.py``'s; the library API ``cgtool.record()`` is ``api.py``'s.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cgtool.capture.record import attribution
from cgtool.capture.record.coverage import Coverage
from cgtool.artifacts.recording import (PROCESS_SCHEMA, CallbackStat, ChildSeen, CompileNotes, CudagraphSkip, CudaNote,
                                        ExitNote, MemoryLedger, ProcessIndex, Suspension, Timeline, write_atomic)
from cgtool.capture.record.inputs import InputWatch
from cgtool.capture.record.ledger import graph_entry, input_checks, ledger
from cgtool.capture.record.options import RecordOptions
from cgtool.capture.record.stops import Stops
from cgtool.capture.record.subscription import RecordSetupError, Subscription
from cgtool.capture.record.tracker import GraphRecord, GraphTracker
from cgtool.capture.record.writer import Writer

__all__ = ["GraphRecord", "ProcessInfo", "RecordSetupError", "Recorder"]


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v is not None and v.isdigit() else None


@dataclass
class ProcessInfo:
    """Who this process is in the program's tree."""

    pid: int
    parent: int
    argv: list[str]
    started_as: str = "python"  # root | spawn | forkserver | fork | exec | python (any other start)
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    cuda_note: CudaNote | None = None  # e.g. a fork of a process that had initialised CUDA
    children: dict[int, ChildSeen] = field(default_factory=dict)  # observed by this process

    @classmethod
    def current(cls, argv: list[str] | None = None, started_as: str = "python") -> "ProcessInfo":
        if argv is None:
            argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
        return cls(pid=os.getpid(), parent=os.getppid(), argv=list(argv), started_as=started_as,
                   rank=_env_int("RANK"), local_rank=_env_int("LOCAL_RANK"), world_size=_env_int("WORLD_SIZE"))


class Recorder:
    """Subscribes to CUPTI and writes every instantiated graph into ``out_dir``."""

    def __init__(self, out_dir: str, options: RecordOptions | None = None, *, info: ProcessInfo | None = None,
                 program: list[str] | None = None) -> None:
        self.out_dir = out_dir
        self.options = options or RecordOptions.from_environment()
        self.info = info or ProcessInfo.current(program)
        self.pid = os.getpid()
        o = self.options
        self.sub = Subscription(how=o.subscriber, kernel_activity=o.kernel_activity, tracing=o.trace_replays > 0)
        self.writer: Writer | None = None
        self.inputs = InputWatch(o.check_inputs) if o.check_inputs > 0 else None
        self.tracker = GraphTracker(self.sub, trace_replays=o.trace_replays, trace_skip=o.trace_skip,
                                    sink=self._submit, inputs=self.inputs)
        if self.inputs is not None:
            tracker = self.tracker
            self.inputs.capturing = lambda: bool(tracker.captures)
        self.coverage: Coverage | None = None
        self.skips: list[CudagraphSkip] = []
        self.suspensions: list[Suspension] = []
        self.exit_note: ExitNote | None = None
        self.started = time.time()
        self.timings: dict[str, float] = {}  # setup and finish phases, seconds
        self.timeline: dict[str, float] = {}  # wall-clock stamps (time.time()) of the run's phases
        self._env: dict[str, Any] | None = None
        self.stops: Stops | None = None  # stack dumps on signals and stalls (install_stops)
        self._finished = False
        self._started = False

    # ------------------------------------------------------------------ setup
    @property
    def graphs(self) -> list[GraphRecord]:
        return self.tracker.graphs

    @property
    def subscriber(self) -> str:
        return self.sub.how

    def start(self) -> None:
        """Subscribe to CUPTI and start the writer; :class:`RecordSetupError` (or a missing-extra
        error) when recording cannot start, before anything of the program was recorded."""
        t0 = time.perf_counter()
        self.timeline.setdefault("recorder_start", time.time())
        os.makedirs(self.out_dir, exist_ok=True)
        tr = self.tracker
        self.sub.open(tr.callback, tr.nodes, tr.node_graph)
        tr.bind_layout()
        o = self.options
        if o.kernel_activity:
            self.coverage = Coverage(tracing=o.trace_replays > 0, traced=tr.traced, first_graph=lambda: tr.t_first_graph)
            tr.want_first_timestamp = True
            t1 = time.perf_counter()
            self.coverage.start(self.sub.load_cupti())
            self.timings["activity_s"] = time.perf_counter() - t1
        self._install_skip_handler()
        attribution.track_ranges()
        attribution.track_trees()
        from cgtool.capture.record import inductor, profiler

        inductor.track_compiled_code()
        profiler.watch(self)
        if self.inputs is not None:
            self.inputs.install()
        if "torch" in sys.modules:
            self._after_torch(sys.modules["torch"])
        else:
            attribution.after_import("torch", self._after_torch)
        self.writer = Writer(self.out_dir, tr, quiet_s=o.writer_quiet_s, refresh_s=o.index_refresh_s,
                             write_index=lambda: self.write_index(finished=False), environment=self._environment)
        self.writer.start()
        self._started = True
        self.timings["start_s"] = time.perf_counter() - t0

    def install_stops(self) -> None:
        """Stack dumps on signals and stalls: after the exit guards' own SIGTERM handler (``exits.py``),
        which they chain to."""
        if self._started and self.stops is None:
            self.stops = Stops(self, self.options.hang_after)
            self.stops.install()

    def _submit(self, job: Any) -> None:
        if self.writer is not None:
            self.writer.submit(job)

    def _after_torch(self, torch: Any) -> None:
        """Once the program has imported torch: the modules the first graph's export needs, now."""
        t0 = time.perf_counter()
        self.tracker.torch = torch
        try:

            self.timings["after_torch_export_import_s"] = time.perf_counter() - t0
            # What the first export would load inside the first capture: cuda.bindings (no CUDA
            # call that needs a context), libcuda's entry points, the demangler.
            from cgtool.artifacts.names import demangle
            from cgtool.capture import _deps, _fastcuda, graphread

            rt, drv = _deps.require_bindings("Graph export")
            graphread._node_type_names(rt, drv)
            _fastcuda.load()
            graphread.driver_may_have_tools_ids()  # the ids' source, known before the first graph
            # cuda.bindings loads the runtime's entry points at their first use: the first graph's
            # environment block asks for two versions, so they are asked here (no context needed)
            rt.cudaRuntimeGetVersion()
            rt.cudaDriverGetVersion()
            demangle("_Z1fv")
            if self.sub.nodecb is not None:
                self.sub.nodecb.set_autograd(getattr(torch._C, "_current_autograd_node", None))
            # The export's node ids on drivers before 13.1: through the ctypes ids, else cupti-python.
            if not isinstance(self.sub.ids, graphread.CuptiIds) and graphread.id_source_available() != "driver":
                self.sub.load_cupti()
        except Exception:  # only early: the first graph's export imports them again and reports why not
            pass
        self.timings["after_torch_imports_s"] = time.perf_counter() - t0

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
                if "skipping cudagraph" not in msg:
                    return
                site = attribution.resolve(attribution.grab(sys._getframe(1)))
                rec.skips.append(CudagraphSkip(reason=msg, site=site.to_struct(), t=time.perf_counter() - rec.tracker.t0))

        logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").addHandler(_Skips(logging.WARNING))

    def _environment(self, device: int | None) -> dict[str, Any]:
        """The export's environment block: the CUDA part read in the callback, the host part here."""
        if self._env is None:
            try:
                from cgtool.capture.export import host_environment

                self._env = dict(host_environment())
            except Exception as e:
                self._env = {"host_error": f"{type(e).__name__}: {e}"}
        cuda = self.tracker.cuda_env.get(device, {}) if device is not None else {}
        return {**cuda, **self._env}

    def errors(self) -> list[str]:
        out = list(self.sub.errors) + list(self.tracker.errors)
        if self.writer is not None:
            out += self.writer.errors
        if self.coverage is not None:
            out += self.coverage.errors
        if self.inputs is not None:
            out += [f"input checks: {e}" for e in self.inputs.errors]
        return out

    # ------------------------------------------------------------------ suspension
    def suspend(self, reason: str, site: str | None) -> None:
        """Give CUPTI up (the program's own profiler wants it): from now on nothing is recorded, and
        the index says so; replays of the graphs alive now become lower bounds."""
        if not self._started or not self.sub.active or os.getpid() != self.pid:
            return
        tr = self.tracker
        with tr.lock:
            tr.carry_counts()
            for r in tr.by_exec.values():
                r.suspended_replays = True
        if self.coverage is not None:
            self.coverage.stop()
        self.sub.suspend()
        self.suspensions.append(Suspension(reason=reason, site=site, at_s=time.perf_counter() - tr.t0,
                                           graphs_before=len(tr.graphs)))

    def resume(self) -> None:
        """Take CUPTI back after :meth:`suspend` (the program's profiler stopped), if it is free."""
        if not self.suspensions or self.sub.active or self._finished or os.getpid() != self.pid:
            return
        why = self.sub.resume()
        if why is not None:
            self.suspensions[-1] = msgspec.structs.replace(self.suspensions[-1], not_resumed=why)
            return
        torch = sys.modules.get("torch")
        if self.sub.nodecb is not None and torch is not None:
            self.sub.nodecb.set_autograd(getattr(torch._C, "_current_autograd_node", None))
        if self.coverage is not None:
            try:
                self.coverage.start(self.sub.load_cupti())
            except Exception as e:
                self.coverage.errors.append(f"activity after the profiler: {type(e).__name__}: {e}")
        self.suspensions[-1] = msgspec.structs.replace(self.suspensions[-1],
                                                       resumed_at_s=time.perf_counter() - self.tracker.t0)

    # ------------------------------------------------------------------ fork
    def after_fork_child(self, out_dir: str, info: ProcessInfo) -> None:
        """In the child of a fork: a recording of its own, in ``out_dir``, from an empty state."""
        self.out_dir, self.info, self.pid = out_dir, info, os.getpid()
        os.makedirs(out_dir, exist_ok=True)
        if self.sub.nodecb is not None:
            self.sub.nodecb.after_fork_child(threading.get_ident())
        self.sub.forked = True
        self.tracker.reset_after_fork()
        if self.inputs is not None:
            self.inputs.reset_after_fork()
        # CUPTI's activity buffers are the parent's: the child's kernel activity is not reported
        self.coverage = None
        self.skips, self.suspensions, self.exit_note = [], [], None
        self.started = time.time()
        self.timeline = {"recorder_start": self.started}
        self._finished = False
        if self.writer is not None:
            self.writer.out_dir = out_dir
            self.writer.restart_after_fork()
        if self.stops is not None:
            self.stops.after_fork_child()

    # ------------------------------------------------------------------ finish
    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every graph handed to the writer is on disk (False on timeout or no writer)."""
        w = self.writer
        if w is None or os.getpid() != self.pid:
            return False
        return w.flush(timeout)

    def write_index(self, *, finished: bool, exit_code: int | None = None, ledger_doc: MemoryLedger | None = None,
                    trace: str | None = None) -> None:
        write_atomic(os.path.join(self.out_dir, "index.json"),
                   index_document(self, finished=finished, exit_code=exit_code, ledger_doc=ledger_doc, trace=trace))

    def finish(self, exit_code: int | None, how: str | None = None) -> None:
        """Unsubscribe, drain the writer, write final replay counts, the ledger, the trace and index.json."""
        if self._finished or os.getpid() != self.pid or not self._started:
            return
        self._finished = True
        if how is not None:
            self.exit_note = ExitNote(how=how, code=exit_code)
        t0 = time.perf_counter()
        self.timeline["program_end"] = time.time()
        if self.inputs is not None:
            self.inputs.finish()  # before CUPTI goes: the last allocator events since the last check
        if self.coverage is not None:
            self.coverage.stop()
        self.sub.close()
        t1 = time.perf_counter()
        w = self.writer
        if w is not None:
            w.finishing = True
            w.stop()
        t2 = time.perf_counter()
        tr = self.tracker
        with tr.lock:
            counts = tr.all_launches()
            for h, rec in list(tr.by_exec.items()):
                rec.replays = counts.get(h, 0)
        ledger_doc = ledger(tr.graphs)
        t3 = time.perf_counter()
        docs = w.docs if w is not None else {}
        for rec in list(tr.graphs):
            doc = docs.get(rec.seq)
            if doc is None:
                continue
            if self.coverage is not None:
                doc["cgtool"]["record"]["kernel_ns"] = self.coverage.graph_ns.get(rec.exec_graph_id, 0)
            if doc["cgtool"]["record"]["replays"] != rec.replays or self.coverage is not None:
                doc["cgtool"]["record"]["replays"] = rec.replays
                write_atomic(os.path.join(self.out_dir, rec.file), doc)
        trace_file = None
        if self.options.trace_replays > 0:
            trace_file = write_trace(self, [docs[r.seq] for r in tr.graphs if r.seq in docs])
        t4 = time.perf_counter()
        self.timings.update(finish_unsubscribe_s=t1 - t0, finish_drain_writer_s=t2 - t1, finish_ledger_s=t3 - t2,
                            finish_rewrite_s=t4 - t3)
        self.timeline["finish_end"] = time.time()
        self.write_index(finished=True, exit_code=exit_code, ledger_doc=ledger_doc, trace=trace_file)
        if self.stops is not None:
            self.stops.close()
        self.timings["finish_s"] = time.perf_counter() - t0


def index_document(rec: Recorder, *, finished: bool, exit_code: int | None = None,
                   ledger_doc: MemoryLedger | None = None, trace: str | None = None) -> ProcessIndex:
    """The process's index.json from the recorder's state."""
    tracker = rec.tracker
    with tracker.lock:
        recs = [r for r in tracker.graphs if r.written]
        counts = tracker.all_launches()
    cov = rec.coverage if rec.coverage is not None and finished else None
    # the input checks watch torch's allocator: a process that never imported torch has none to
    # watch, and its index says nothing of them (as with --check-inputs 0)
    watch = rec.inputs if rec.inputs is not None and rec.inputs.torch is not None else None
    graphs = [graph_entry(r, tracker.replays_of(r, counts), cov, watch) for r in recs]
    stats = dict(tracker.cb_stats)
    c_stats, c_errs = rec.sub.compiled_stats()
    for key, (calls, ns) in c_stats.items():  # node callbacks of other threads are in Python's
        prev = stats.get(key, [0, 0])
        stats[key] = [prev[0] + calls, prev[1] + ns]
    errors = list(rec.errors())
    if c_errs:
        errors.append(f"compiled node callback: {c_errs} callback(s) failed")
    launches = tracker.launch_callbacks
    if rec.sub.counts_in_c:
        launches += sum(stats.get((tracker._D_DRV, c), [0])[0] for c in rec.sub.drv_launch)
    info = rec.info
    return ProcessIndex(
        cgtool_record=PROCESS_SCHEMA,
        program=list(info.argv),
        pid=info.pid,
        parent=info.parent,
        started_as=info.started_as,
        started=rec.started,
        finished=finished,
        exit_code=exit_code,
        exit=rec.exit_note,
        rank=info.rank,
        local_rank=info.local_rank,
        world_size=info.world_size,
        cuda=info.cuda_note,
        graphs=graphs,
        compile=CompileNotes(cudagraph_skips=list(rec.skips),
                             graphs_from_compiled_code=[g.label for g in graphs if g.compiled_code]),
        coverage=cov.summary({r.exec_graph_id for r in tracker.graphs}) if cov is not None else None,
        ledger=ledger_doc,
        trace=trace,
        suspended=list(rec.suspensions),
        children=list(info.children.values()),
        recorder_errors=errors,
        subscriber=rec.sub.how or None,
        callback_stats={f"{d}/{c}": CallbackStat(calls=v[0], s_inside=v[1] / 1e9) for (d, c), v in sorted(stats.items())},
        launch_callbacks=launches,
        launches_in_python=tracker.launch_seq,
        recorder_timings={**rec.timings, **rec.sub.timings, **tracker.exec_totals()},
        timeline=Timeline(**rec.timeline),
        layout=getattr(rec.sub.layout, "offsets", None),
        stopping=rec.stops.block() if rec.stops is not None else None,  # stops.py
        input_checks=input_checks(watch),
    )


def write_trace(rec: Recorder, docs: list[dict[str, Any]]) -> str | None:
    """The traced replays' records as ``trace.json`` (chrome trace, the exports embedded)."""
    from cgtool.artifacts.chrome import build_trace

    cov = rec.coverage
    if cov is None or not cov.records:
        return None
    meta = {"workload": " ".join(rec.info.argv), "replays": rec.options.trace_replays,
            "skipped_replays": rec.options.trace_skip, "dropped_records": 0, "collector": "cupti",
            "recorder": "cgtool record", "pid": rec.info.pid,
            "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "environment": docs[0]["cgtool"]["environment"] if docs else {}}
    trace = build_trace(cov.records, graphs=docs, meta=meta)
    write_atomic(os.path.join(rec.out_dir, "trace.json"), trace)
    return "trace.json"
