"""``cgtool trace``: replay a captured workload under CUPTI and build a chrome trace.

The graph exports are taken *before* tracing, from the same instantiations that are then
replayed, so every ``graph node id`` of the trace joins a node of the embedded exports.
"""

from __future__ import annotations

import os
from typing import Any

from cgtool.capture._deps import optional_cupti, require_cuda
from cgtool.capture.cupti_trace import CuptiCollector
from cgtool.capture.entrypoint import Target
from cgtool.capture.runner import Captured, capture_workload
from cgtool.errors import CaptureError
from cgtool.inspect.chrome import build_trace


def trace_captured(cap: Captured, *, replays: int = 5, warmup: int = 3) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(chrome trace, raw records) of ``replays`` replays of ``cap``, after ``warmup`` untraced ones."""
    torch = require_cuda("Tracing")
    exports = cap.exports()
    for _ in range(warmup):
        cap.replay()
    torch.cuda.synchronize()
    with CuptiCollector() as col:
        for _ in range(replays):
            cap.replay()
        torch.cuda.synchronize()
    recs = col.records
    graph_ids = {d["exec_graph_id"] for _, d in exports}
    seen = {r["graph_id"] for r in recs if r.get("graph_id")}
    if not seen:
        raise CaptureError(
            f"CUPTI recorded {len(recs)} records but none from a graph replay; "
            "the workload's replay launched no graph work."
        )
    meta = {
        "workload": cap.target.spec,
        "replays": replays,
        "dropped_records": col.dropped,
        "collector": "cupti",
        "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "environment": exports[0][1]["cgtool"]["environment"] if exports else {},
        "unknown_graph_ids": sorted(seen - graph_ids),
    }
    from cgtool.capture import dist

    if dist.distributed():
        meta["rank"], meta["world_size"] = dist.rank(), dist.world_size()
    graphs = [d for _, d in exports]
    return build_trace(recs, graphs=graphs, meta=meta), recs


def trace_workload(
    target: Target, args: list[str] | None = None, *, replays: int = 5, warmup: int = 3, check: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if optional_cupti() is None:
        from cgtool.errors import MissingExtraError

        raise MissingExtraError(
            "`cgtool trace`", detail="cupti-python (e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0); "
            "without it use `--profiler torch` (no channels, and no node ids on older PyTorch)"
        )
    cap = capture_workload(target, args, check=check)
    return trace_captured(cap, replays=replays, warmup=warmup)


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
