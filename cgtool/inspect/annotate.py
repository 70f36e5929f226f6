"""An annotated copy of a trace: graph edges as flow arrows, fake serializations marked.

Perfetto draws ``ph: s``/``f`` pairs as arrows. Each true graph edge between two traced nodes of a
replay becomes a ``graph_edge`` flow; each fake serialization becomes a ``fake_dependency`` flow
from A to B plus an ``args.cgtool_fake_after`` note on B. The original file is never modified.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from cgtool.errors import UsageError
from cgtool.inspect.deps import DepKind, DepsResult
from cgtool.artifacts.graph import LOW32, GraphData



def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _tools_id(args: dict[str, Any]) -> int | None:
    v = args.get("graph node id")
    if not isinstance(v, int):
        return None
    if v > LOW32:
        return v
    g = args.get("graph id")
    return (g << 32) | v if isinstance(g, int) and g else None


def annotate_trace(doc: dict[str, Any], res: DepsResult, graphs: Sequence[GraphData]) -> dict[str, Any]:
    if res.match != "exact":
        raise UsageError("--annotate needs a trace with graph node ids (the match here is inferred).")
    out = copy.copy(doc)
    events = list(doc["traceEvents"])
    by_key: dict[tuple[int, int], dict[str, Any]] = {}  # (correlation, tools id) -> event
    for e in events:
        a = e.get("args")
        if e.get("ph") == "X" and isinstance(a, dict):
            t = _tools_id(a)
            if t is not None and "correlation" in a and _num(e.get("ts")):
                by_key[(a["correlation"], t)] = e
    fake = {(f.before, f.after) for f in res.findings if f.kind is DepKind.FAKE}
    new: list[dict[str, Any]] = []
    flow_id = 1 << 40  # above any correlation id used by ac2g flows

    def flow(a: dict[str, Any], b: dict[str, Any], cat: str, name: str) -> None:
        nonlocal flow_id
        flow_id += 1
        dur = a.get("dur", 0)
        new.append({"ph": "s", "id": flow_id, "cat": cat, "name": name, "pid": a.get("pid", 0), "tid": a.get("tid", 0),
                    "ts": a["ts"] + (dur if _num(dur) else 0)})
        new.append({"ph": "f", "bp": "e", "id": flow_id, "cat": cat, "name": name, "pid": b.get("pid", 0),
                    "tid": b.get("tid", 0), "ts": b["ts"]})

    corrs = sorted({c for c, _ in by_key})
    for g in graphs:
        tids = [n.tools_id for n in g.nodes]
        for corr in corrs:
            for a, b in g.edges():
                ea, eb = by_key.get((corr, tids[a])), by_key.get((corr, tids[b]))
                if ea is not None and eb is not None:
                    flow(ea, eb, "graph_edge", "graph edge")
            for ta, tb in fake:
                ea, eb = by_key.get((corr, ta)), by_key.get((corr, tb))
                if ea is not None and eb is not None:
                    flow(ea, eb, "fake_dependency", "fake dependency")
                    eb["args"] = {**eb["args"], "cgtool_fake_after": ea.get("name", "")}
    out["traceEvents"] = events + new
    return out
