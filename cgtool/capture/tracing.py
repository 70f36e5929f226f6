"""``cgtool trace``: replay a captured workload under CUPTI and build a chrome trace.

The graph exports are taken *before* tracing, from the same instantiations that are then
replayed, so every ``graph node id`` of the trace joins a node of the embedded exports.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

from cgtool.artifacts.chrome import TRACE_SCHEMA_VERSION, TraceSummary, build_trace
from cgtool.artifacts.jsonio import is_stdout, load_json, write_json
from cgtool.capture._deps import optional_cupti, require_cuda
from cgtool.capture.child import child_main, raise_error, run_child
from cgtool.capture.cupti_trace import CuptiCollector, CuptiOptions
from cgtool.capture.entrypoint import Target, parse_target
from cgtool.capture.runner import Captured, capture_workload
from cgtool.errors import CaptureError, MissingExtraError


class Profiler(str, Enum):
    """Which collector records a trace."""

    CUPTI = "cupti"  # cupti-python: node ids and hardware channels
    TORCH = "torch"  # torch.profiler (Kineto): no channels; no node ids before PyTorch 2.13


#: Untraced replays timed before tracing, to measure what the tracer adds (at least this many).
UNTRACED_TIMED = 10


def replay_times_us(cap: Captured, n: int) -> list[float]:
    """GPU time of each of ``n`` back-to-back replays (µs), one CUDA event pair around each."""
    torch = require_cuda("Tracing")
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in pairs:
        s.record()
        cap.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in pairs]


def tracer_overhead(untraced_us: Sequence[float], traced_us: Sequence[float], items: int,
                    replays: int) -> dict[str, Any]:
    """The ``tracer_overhead`` block of a trace (read back by ``cgtool.artifacts.trace``): medians of
    the replays timed without and with tracing, and the difference per GPU item of a replay."""
    off, on = statistics.median(untraced_us), statistics.median(traced_us)
    per_replay = items / replays if replays else 0.0
    return {
        "untraced_replay_us": round(off, 3),
        "traced_replay_us": round(on, 3),
        "items_per_replay": round(per_replay, 3),
        "per_item_us": round((on - off) / per_replay, 4) if per_replay else 0.0,
        "replays_timed": [len(untraced_us), len(traced_us)],
        "method": "CUDA events around each replay; medians; the untraced replays just before the traced ones",
    }


def trace_captured(cap: Captured, *, replays: int = 5, warmup: int = 3,
                   options: CuptiOptions | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(chrome trace, raw records) of ``replays`` replays of ``cap``, after ``warmup`` untraced ones.

    The untraced replays that follow the warm-up are timed too, as the traced ones are, and the
    difference goes into the trace (``cgtool.tracer_overhead``): ``deps`` sets it beside the gaps
    it classifies."""
    torch = require_cuda("Tracing")
    exports = cap.exports()
    for _ in range(warmup):
        cap.replay()
    torch.cuda.synchronize()
    untraced = replay_times_us(cap, max(replays, UNTRACED_TIMED))
    with CuptiCollector(options) as col:
        traced = replay_times_us(cap, replays)
    recs = col.records
    graph_ids = {d["exec_graph_id"] for _, d in exports}
    seen = {r["graph_id"] for r in recs if r.get("graph_id")}
    if not seen:
        raise CaptureError(
            f"CUPTI recorded {len(recs)} records but none from a graph replay; "
            "the workload's replay launched no graph work."
        )
    gpu_items = sum(1 for r in recs if r["kind"] != "launch" and r.get("graph_id"))
    meta = {
        "workload": cap.target.spec,
        "replays": replays,
        "dropped_records": col.dropped,
        "collector": "cupti",
        "tracer_overhead": tracer_overhead(untraced, traced, gpu_items, replays),
        "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "environment": exports[0][1]["cgtool"]["environment"] if exports else {},
        "unknown_graph_ids": sorted(seen - graph_ids),
    }
    from cgtool.capture import dist

    if dist.distributed():
        meta["rank"], meta["world_size"] = dist.rank(), dist.world_size()
    graphs = [d for _, d in exports]
    return build_trace(recs, graphs=graphs, meta=meta), recs


def require_cupti_python() -> None:
    """Refuse early, naming the package, when cupti-python is missing."""
    if optional_cupti() is None:
        raise MissingExtraError(
            "`cgtool trace`", detail="cupti-python (take the version matching your CUDA's CUPTI, e.g. "
            "`pip install 'cupti-python==13.0.*'`); or use --profiler torch, which records no channels "
            "and, on PyTorch before 2.13, no graph node ids")


def trace_workload(
    target: Target, args: list[str] | None = None, *, replays: int = 5, warmup: int = 3, check: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    require_cupti_python()
    cap = capture_workload(target, args, check=check)
    return trace_captured(cap, replays=replays, warmup=warmup)


def record_trace(target: str, args: Sequence[str], output: str, *, replays: int = 5, warmup: int = 3,
                 profiler: Profiler = Profiler.CUPTI, max_connections: int | None = None,
                 force: bool = False) -> TraceSummary:
    """Capture ``target``, trace ``replays`` replays and write the chrome trace to ``output``.

    With ``max_connections`` the work runs in a child process started with
    ``CUDA_DEVICE_MAX_CONNECTIONS`` set (it must be set before CUDA starts); under torchrun it stays
    in the rank, whose process group reports to rank 0, with the variable set before CUDA starts."""
    from cgtool.capture import dist

    if max_connections is not None and os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") != str(max_connections):
        if dist.distributed():
            # A rank reports to rank 0 over the process group its workload starts, so the work stays
            # in this process: the setting goes into its environment before CUDA starts here.
            set_connections_before_cuda(max_connections)
            return record_trace(target, args, output, replays=replays, warmup=warmup, profiler=profiler,
                                force=force)
        env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": str(max_connections)}
        res = run_child("cgtool.capture.tracing", {
            "target": target, "args": list(args), "output": output, "replays": replays, "warmup": warmup,
            "profiler": profiler.value, "force": force}, env=env, quiet=False)
        raise_error(res)
        return TraceSummary.from_json(res)
    tgt = parse_target(target)
    if profiler is Profiler.CUPTI:
        require_cupti_python()
    # Source lines come from CUPTI callbacks; torch.profiler's own CUPTI use is kept out of their way.
    cap = capture_workload(tgt, list(args), warmup=warmup, sources=profiler is Profiler.CUPTI)
    graphs = [d for _, d in cap.exports()]
    rank = dist.rank() if dist.distributed() else None
    if profiler is Profiler.TORCH:
        if is_stdout(output):  # nothing is written beside a `-` (the current folder)
            fd, name = tempfile.mkstemp(prefix="cgtool-trace-", suffix=".json")
            os.close(fd)
            tmp = Path(name)
        else:
            tmp = Path(output).with_name(Path(output).name + ".tmp.json")
        torch_profiler_trace(cap, str(tmp), replays=replays, warmup=warmup)
        try:
            doc = load_json(tmp)
        finally:
            tmp.unlink(missing_ok=True)
        doc["cgtool"] = {"schema_version": TRACE_SCHEMA_VERSION, "kind": "trace",
                         "collector": Profiler.TORCH.value, "graphs": graphs,
                         # read by `deps`: with 1, every stream shares one hardware channel
                         "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
        write_json(output, doc, force=force, indent=False)
        kernels = [e for e in doc.get("traceEvents", []) if e.get("cat") == "kernel"]
        return TraceSummary(output, Profiler.TORCH.value, len(kernels), len(graphs),
                            [g["exec_graph_id"] for g in graphs], [], 0,
                            any("graph node id" in (e.get("args") or {}) for e in kernels), rank)
    doc, recs = trace_captured(cap, replays=replays, warmup=warmup)
    write_json(output, doc, force=force, indent=False)
    gpu = [r for r in recs if r["kind"] != "launch"]
    return TraceSummary(output, Profiler.CUPTI.value, len(gpu), len(graphs), [g["exec_graph_id"] for g in graphs],
                        sorted({r["channel"] for r in gpu}), doc["cgtool"]["dropped_records"], True, rank)


def set_connections_before_cuda(n: int) -> None:
    """``CUDA_DEVICE_MAX_CONNECTIONS=n`` for this process, which has not started CUDA yet (the driver
    reads it when the context is made); a :class:`UsageError` when CUDA has already started here."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        from cgtool.errors import UsageError

        raise UsageError(f"--max-connections {n}: CUDA has already started in this rank, with "
                         f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}; set "
                         f"CUDA_DEVICE_MAX_CONNECTIONS={n} in torchrun's environment instead.")
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(n)


def _child_request(request: dict[str, Any]) -> dict[str, Any]:
    profiler = Profiler(request.pop("profiler"))
    return record_trace(request.pop("target"), request.pop("args"), request.pop("output"),
                        profiler=profiler, **request).to_json()


def torch_profiler_trace(cap: Captured, path: str, *, replays: int = 5, warmup: int = 3) -> None:
    """Fallback without cupti-python: torch.profiler's own chrome trace of the replays."""
    torch = require_cuda("Tracing")
    from cgtool.capture import cupti_trace

    if cupti_trace.cupti_was_used:
        raise CaptureError(
            "CUPTI was already used in this process, which stops torch.profiler from recording GPU "
            "activity. Run the torch.profiler trace in a fresh process."
        )
    for _ in range(warmup):
        cap.replay()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            cap.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)


if __name__ == "__main__":
    child_main(_child_request)
