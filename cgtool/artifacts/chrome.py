"""Writing chrome traces (object form, ``traceEvents``) that Perfetto opens.

GPU events follow the PyTorch profiler's conventions: ``cat`` in ``kernel | gpu_memcpy |
gpu_memset``, ``ts``/``dur`` in µs, ``pid`` = device, ``tid`` = stream, and ``args`` with
``device, stream, correlation, "graph id", "graph node id" (the full 64-bit tools id),
"channel", "channel_type"``. Events on one stream that overlap in time (graph kernels of one
stream may) are moved to extra lanes named ``stream N (overlap k)`` so Perfetto shows them all;
``args.stream`` always keeps the real stream. The graph exports of the traced instantiations are
embedded under the top-level key ``"cgtool"``.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from cgtool.artifacts.names import demangle

TRACE_SCHEMA_VERSION = 1
_GPU_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
#: Offset between the tid of a stream's overflow lanes.
LANE_STRIDE = 1 << 24


@dataclass(frozen=True)
class TraceSummary:
    """What ``cgtool trace`` wrote (``capture.tracing.record_trace``): counts for the command's one-line
    report."""

    path: str
    collector: str
    gpu_events: int
    graphs: int
    exec_graph_ids: list[int]
    channels: list[int]
    dropped: int
    has_node_ids: bool
    rank: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TraceSummary":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def _assign_lanes(events: list[dict[str, Any]]) -> None:
    """Give each GPU event a tid: its stream, or an overflow lane where it overlaps another."""
    by_stream: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in events:
        by_stream.setdefault((e["pid"], e["args"]["stream"]), []).append(e)
    for (_, stream), evs in by_stream.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        lane_ends: list[tuple[float, int]] = []  # (end, lane) min-heap of busy lanes
        free: list[int] = []
        for e in evs:
            while lane_ends and lane_ends[0][0] <= e["ts"]:
                heapq.heappush(free, heapq.heappop(lane_ends)[1])
            lane = heapq.heappop(free) if free else len(lane_ends) + len(free)
            e["tid"] = stream + lane * LANE_STRIDE
            heapq.heappush(lane_ends, (e["ts"] + e["dur"], lane))


def build_trace(
    records: Iterable[Mapping[str, Any]],
    *,
    graphs: list[dict[str, Any]],
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """A chrome trace from raw activity records (see ``cgtool.capture.cupti_trace``).

    Records carry ``start``/``end`` in ns. ``ts`` is written relative to the first record,
    whose absolute time is kept in ``baseTimeNanoseconds`` (as Kineto does).
    """
    recs = list(records)
    base = min((r["start"] for r in recs), default=0)
    launches = sorted((r for r in recs if r["kind"] == "launch"), key=lambda r: r["start"])
    replay_of = {r["correlation"]: k for k, r in enumerate(launches)}
    gpu: list[dict[str, Any]] = []
    host: list[dict[str, Any]] = []
    for r in recs:
        ts = (r["start"] - base) / 1000.0
        dur = max(0.0, (r["end"] - r["start"]) / 1000.0)
        if r["kind"] == "launch":
            host.append(
                {
                    "ph": "X", "cat": "cuda_runtime", "name": r["name"],
                    "pid": r["process"], "tid": r["thread"], "ts": ts, "dur": dur,
                    "args": {"correlation": r["correlation"], "replay": replay_of[r["correlation"]]},
                }
            )
            continue
        args: dict[str, Any] = {
            "device": r["device"],
            "stream": r["stream"],
            "correlation": r["correlation"],
        }
        if r.get("graph_id"):
            args["graph id"] = r["graph_id"]
            args["graph node id"] = r["graph_node_id"]
        args["channel"] = r["channel"]
        args["channel_type"] = r["channel_type"]
        if "grid" in r:
            args["grid"] = r["grid"]
            args["block"] = r["block"]
        if "bytes" in r:
            args["bytes"] = r["bytes"]
        if r["correlation"] in replay_of:
            args["replay"] = replay_of[r["correlation"]]
        gpu.append(
            {
                "ph": "X", "cat": _GPU_CAT[r["kind"]],
                "name": demangle(r["name"]) if r["kind"] == "kernel" else r["name"],
                "pid": r["device"], "tid": r["stream"], "ts": ts, "dur": dur, "args": args,
            }
        )
    _assign_lanes(gpu)
    events: list[dict[str, Any]] = []
    # Lane names, sorted so each stream's overflow lanes sit under it.
    lanes = sorted({(e["pid"], e["tid"]) for e in gpu})
    for pid in sorted({p for p, _ in lanes}):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"GPU {pid}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 1000 + pid}})
    for pid, tid in lanes:
        stream, lane = tid % LANE_STRIDE, tid // LANE_STRIDE
        name = f"stream {stream}" + (f" (overlap {lane})" if lane else "")
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for pid, tid in sorted({(e["pid"], e["tid"]) for e in host}):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"host process {pid}"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
    events.extend(host)
    events.extend(sorted(gpu, key=lambda e: e["ts"]))
    # Flow arrows launch -> first GPU event of that replay (Kineto's "ac2g" convention).
    first: dict[int, dict[str, Any]] = {}
    for e in gpu:
        c = e["args"]["correlation"]
        if c in replay_of and (c not in first or e["ts"] < first[c]["ts"]):
            first[c] = e
    for h in host:
        c = h["args"]["correlation"]
        if c in first:
            f = first[c]
            events.append({"ph": "s", "id": c, "cat": "ac2g", "name": "ac2g", "pid": h["pid"], "tid": h["tid"], "ts": h["ts"]})
            events.append({"ph": "f", "id": c, "cat": "ac2g", "name": "ac2g", "pid": f["pid"], "tid": f["tid"], "ts": f["ts"], "bp": "e"})
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base,
        "traceEvents": events,
        "cgtool": {
            "schema_version": TRACE_SCHEMA_VERSION,
            "kind": "trace",
            **dict(meta),
            "graphs": graphs,
        },
    }
