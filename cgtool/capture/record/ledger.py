"""What a recorded process's ``index.json`` says, and its memory ledger and trace.

:func:`index_document` turns the recorder's state into the index (its graphs with replays, pools,
capture times and traced launches; the run's coverage, memory ledger and recorder statistics);
:func:`ledger` reads torch's allocator segments at exit; :func:`write_trace` writes the traced
replays as a chrome trace with the exports embedded. No CUDA call is made here except
:func:`ledger`'s reads of torch's allocator (at the end of the run, on the exiting thread).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from cgtool.capture.record import attribution

if TYPE_CHECKING:
    from cgtool.capture.record.recorder import Recorder
    from cgtool.capture.record.tracker import GraphRecord, TracedLaunch

#: The schema of a process's index.json (the tree's is ``tree.TREE_SCHEMA``).
RECORD_SCHEMA_VERSION = 1


def ledger(graphs: list[GraphRecord]) -> dict[str, Any]:
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
    for r in graphs:
        if r.pool is not None:
            graphs_of.setdefault(f"{r.pool[0]},{r.pool[1]}", []).append(r.seq)
    return {
        "pools": [{"pool": k, "bytes_reserved": v, "graphs": graphs_of.get(k, [])} for k, v in sorted(pools.items())],
        "graphs": [{"seq": r.seq, "pool": None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
                    "reserved_during_capture": r.reserved_during_capture} for r in graphs],
        "bytes_held_by_graph_pools": sum(pools.values()),
        "bytes_reserved_at_exit": reserved,
        "peak_bytes_reserved": peak,
        "note": "pool bytes are torch's allocator segments tagged with the pool at exit; "
        "reserved_during_capture is the memory the process took from CUDA while the graph was captured "
        "(cudaMalloc and cuMemCreate, less what was freed; for torch's allocator, the growth of its "
        "reserved memory)",
    }


def _launch_site(t: TracedLaunch) -> str | None:
    site = getattr(t, "_site", False)
    if site is False:
        s = attribution.resolve(t.frames)
        site = f"{s.file}:{s.line}" if s.file else None
        t._site = site  # type: ignore[attr-defined]  # resolved once, kept with the launch
    return site  # type: ignore[return-value]


def graph_entry(r: GraphRecord, replays: int, coverage: Any = None, inputs: Any = None) -> dict[str, Any]:
    g: dict[str, Any] = {
        "label": r.label, "file": r.file, "exec_graph_id": r.exec_graph_id,
        "template_graph_id": r.template_graph_id, "nodes": r.nodes, "captured_at": r.captured_at,
        "capture_s": r.capture_s, "instantiate_s": r.instantiate_s, "export_s": r.export_s,
        "write_s": r.write_s, "recorder_s": dict(r.recorder_s),
        "reserved_during_capture": r.reserved_during_capture,
        "pool": None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
        "replays": replays, "replays_complete": not r.suspended_replays,
        "traced_replays": len(r.traced), "compiled_code": r.compiled,
        "capture_inputs": r.shapes,
        "time_since_start_s": r.since_start_s,
        "traced_launches": [{"correlation": t.correlation, "launch_seq": t.launch_seq, "site": _launch_site(t)}
                            for t in r.traced],
    }
    if coverage is not None:
        g["kernel_ns"] = coverage.graph_ns.get(r.exec_graph_id, 0)
        g["kernels"] = coverage.graph_kernels.get(r.exec_graph_id, 0)
    if inputs is not None:
        try:
            g["inputs"] = inputs.entry(r.seq)
        except Exception as e:  # never lose the index over the checks
            g["inputs"] = {"checked": False, "why_not": f"recorder error: {type(e).__name__}: {e}"}
    return g


def index_document(rec: Recorder, *, finished: bool, exit_code: int | None = None,
                   ledger_doc: dict[str, Any] | None = None, trace: str | None = None) -> dict[str, Any]:
    """The process's index.json from the recorder's state."""
    tracker = rec.tracker
    with tracker.lock:
        recs = [r for r in tracker.graphs if r.written]
        counts = tracker.all_launches()
    cov = rec.coverage if rec.coverage is not None and finished else None
    graphs = [graph_entry(r, tracker.replays_of(r, counts), cov, rec.inputs) for r in recs]
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
    return {
        "cgtool_record": RECORD_SCHEMA_VERSION,
        "program": list(info.argv),
        "pid": info.pid,
        "parent": info.parent,
        "started_as": info.started_as,
        "started": rec.started,
        "finished": finished,
        "exit_code": exit_code,
        "exit": rec.exit_note,
        "rank": info.rank,
        "local_rank": info.local_rank,
        "world_size": info.world_size,
        "cuda": info.cuda_note,
        "graphs": graphs,
        "compile": {"cudagraph_skips": list(rec.skips),
                    "graphs_from_compiled_code": [g["label"] for g in graphs if g["compiled_code"]]},
        "coverage": cov.summary({r.exec_graph_id for r in tracker.graphs}) if cov is not None else None,
        "input_checks": rec.inputs.process_entry() if rec.inputs is not None else None,
        "ledger": ledger_doc,
        "trace": trace,
        "suspended": list(rec.suspensions),
        "children": list(info.children.values()),
        "recorder_errors": errors,
        "subscriber": rec.sub.how or None,
        "callback_stats": {f"{d}/{c}": {"calls": v[0], "s_inside": v[1] / 1e9} for (d, c), v in sorted(stats.items())},
        "launch_callbacks": launches,
        "launches_in_python": tracker.launch_seq,
        "recorder_timings": {**rec.timings, **rec.sub.timings, **tracker.exec_totals()},
        "timeline": dict(rec.timeline),
        "layout": getattr(rec.sub.layout, "offsets", None),
    }


def write_trace(rec: Recorder, docs: list[dict[str, Any]]) -> str | None:
    """The traced replays' records as ``trace.json`` (chrome trace, the exports embedded)."""
    from cgtool.artifacts.chrome import build_trace
    from cgtool.capture.record.writer import write_json

    cov = rec.coverage
    if cov is None or not cov.records:
        return None
    meta = {"workload": " ".join(rec.info.argv), "replays": rec.options.trace_replays,
            "skipped_replays": rec.options.trace_skip, "dropped_records": 0, "collector": "cupti",
            "recorder": "cgtool record", "pid": rec.info.pid,
            "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "environment": docs[0]["cgtool"]["environment"] if docs else {}}
    trace = build_trace(cov.records, graphs=docs, meta=meta)
    write_json(os.path.join(rec.out_dir, "trace.json"), trace)
    return "trace.json"
