"""JSON documents of analysis results, and the thresholds that decide what is said about them.

``deps --json`` writes ``deps_document``: per trace ``deps_doc``, the result (``DepsResult.to_json``)
with the figures of each graph and, when the tracer measured its own overhead, that overhead with
the note ``tracer_note`` gives (the same note the table prints).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from cgtool.artifacts.trace import TracerOverhead
from cgtool.inspect.results import DepsResult

if TYPE_CHECKING:  # the documents of deps runs; importing the readers is the caller's
    from cgtool.inspect.collectives import CollectiveFigures
    from cgtool.inspect.files import DepsRun

#: The tracer's stretch per GPU item is "of the order of" the gaps deps classifies from this share of
#: their median on (smaller shares are within what replays vary by), and never below this many µs.
TRACER_NOTE_SHARE = 0.25
TRACER_NOTE_MIN_US = 0.05


def median_gap_us(r: DepsResult) -> float | None:
    """The median gap (B.start - A.end) over every serialization found, or None without any."""
    pairs = sorted((f.gap_us, f.count) for f in r.findings if f.count > 0)
    total = sum(c for _, c in pairs)
    if not total:
        return None
    seen = 0
    for gap, c in pairs:
        seen += c
        if 2 * seen >= total:
            return gap
    return pairs[-1][0]  # pragma: no cover - the loop always returns


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs"


def tracer_note(ov: TracerOverhead | None, r: DepsResult) -> str | None:
    """A note when the tracer's measured stretch per GPU item is of the order of the gaps classified."""
    if ov is None:
        return None
    gap = median_gap_us(r)
    if gap is None or ov.per_item_us < max(TRACER_NOTE_MIN_US, TRACER_NOTE_SHARE * gap):
        return None
    return (f"tracing stretched each replay from {_us(ov.untraced_replay_us)} to {_us(ov.traced_replay_us)} "
            f"({ov.ratio:.2f}x), about {ov.per_item_us:.2f} µs per GPU item: an item's start moves later by about "
            f"that much for each item before it on its lane, of the order of the median gap between serialized items "
            f"({gap:.2f} µs). Gaps, waits and savings here include the tracer's share; `cgtool bench` times "
            "replays untraced.")


def deps_doc(r: DepsResult, overhead: TracerOverhead | None) -> dict[str, Any]:
    """``deps --json``'s document of one trace: the result, and the tracer's overhead with its note."""
    doc = r.to_json()
    if overhead is not None:
        doc["tracer_overhead"] = {**dataclasses.asdict(overhead), "note": tracer_note(overhead, r)}
    return doc


def nccl_figures(runs: list[DepsRun], max_bytes: int | None = None) -> CollectiveFigures | None:
    """The NCCL figures of a per-rank trace set (``inspect/collectives.py``); None for anything else
    and where no rank's graphs hold an NCCL kernel."""
    from cgtool.inspect.collectives import of_rank_files

    if len(runs) < 2 or not all(r.rank is not None and r.process is None for r in runs):
        return None
    return of_rank_files({r.rank: r.path for r in runs if r.rank is not None}, max_bytes)


def deps_document(runs: list[DepsRun], compared: dict[str, Any] | None,
                  nccl: CollectiveFigures | None = None) -> dict[str, Any]:
    """``deps --json``'s document: one trace's (with the comparison, given one), or every rank's or
    trace's of an input that holds several (a per-rank set with its ``nccl`` figures, null without)."""

    def doc(run: DepsRun) -> dict[str, Any]:
        d = deps_doc(run.result, run.overhead)
        if len(runs) > 1:  # which file each is (one trace's document is the same whatever its path)
            d["trace"] = str(run.path)
        d["graphs"] = {str(gid): run.result.figures(gid).to_json() for gid in run.result.graphs}
        if len(run.result.graphs) > 1:  # a median across different graphs is no graph's: see "graphs"
            for k in ("span_median_us", "span_mean_us", "critical_path_us", "median_span_us", "mean_span_us"):
                if k in d["summary"]:
                    d["summary"][k] = None
            d["summary"]["per_graph"] = "span and critical path are per graph, under \"graphs\""
        for gid, name in (run.names or {}).items():  # each graph named as topo, diff and report name it
            if str(gid) in d["graphs"]:
                d["graphs"][str(gid)]["name"] = name
        return d

    if len(runs) == 1:
        d = doc(runs[0])
        if compared is not None:
            d["compare"] = compared
        return d
    if all(r.rank is not None and r.process is None for r in runs):
        return {"schema_version": 2, "ranks": {str(r.rank): doc(r) for r in runs},
                "nccl": nccl.to_json() if nccl is not None else None}
    return {"schema_version": 2, "traces": {r.label: doc(r) for r in runs}}
