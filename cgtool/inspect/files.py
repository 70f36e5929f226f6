"""Analyses started from files: load the artifacts, match them, run the analysis.

The CLI calls these with the paths it was given; each returns typed results for a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.artifacts.ranks import rank_files
from cgtool.artifacts.trace import Trace, load_trace, load_trace_and_doc
from cgtool.inspect import topo
from cgtool.inspect.deps import DEFAULT_TOLERANCE_US, DepsResult, analyze, graphs_from_trace, match_graph_events


@dataclass
class DepsRun:
    """A deps analysis with what it was computed from."""

    trace: Trace
    graphs: list[GraphData]
    result: DepsResult
    doc: dict[str, Any] | None = None  # the whole trace document, when asked for (annotation)


def deps_of_file(trace_path: Path, graph_paths: Sequence[Path] = (), *, tolerance_us: float = DEFAULT_TOLERANCE_US,
                 max_bytes: int | None = DEFAULT_MAX_BYTES, keep_doc: bool = False) -> DepsRun:
    """Classify the serializations of one trace file against the given exports (or its embedded ones)."""
    doc = None
    if keep_doc:
        t, doc = load_trace_and_doc(trace_path, max_bytes=max_bytes)
    else:
        t = load_trace(trace_path, max_bytes=max_bytes)
    gs = [GraphData.load(p, max_bytes=max_bytes) for p in graph_paths] if graph_paths else graphs_from_trace(t)
    return DepsRun(t, gs, analyze(t, gs, tolerance_us=tolerance_us), doc)


def deps_of_ranks(folder: Path, *, tolerance_us: float = DEFAULT_TOLERANCE_US,
                  max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[int, tuple[Path, DepsResult]]:
    """Per rank (read from each file), its trace file and deps result."""
    return {r: (p, deps_of_file(p, tolerance_us=tolerance_us, max_bytes=max_bytes).result)
            for r, p in sorted(rank_files(folder, "trace", max_bytes=max_bytes).items())}


def topo_of_ranks(folder: Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[int, tuple[GraphData, topo.Topology]]:
    """Per rank, its graph export and topology."""
    out = {}
    for r, p in sorted(rank_files(folder, "graph", max_bytes=max_bytes).items()):
        g = GraphData.load(p, max_bytes=max_bytes)
        out[r] = (g, topo.analyze(g))
    return out


def node_durations(g: GraphData, trace: Trace) -> dict[int, float]:
    """Mean measured duration (µs) per node index over the trace's replays of ``g``."""
    ev, nodes = match_graph_events(trace, g)
    n = len(g.nodes)
    tot = np.bincount(nodes, weights=trace.end[ev] - trace.start[ev], minlength=n)
    cnt = np.bincount(nodes, minlength=n)
    return {i: float(tot[i] / cnt[i]) for i in range(n) if cnt[i]}


def node_lanes(g: GraphData, trace: Trace) -> dict[int, str]:
    """The lane (``channel N``, or ``stream N`` without channel data) each node ran on first."""
    ev, nodes = match_graph_events(trace, g)
    lanes: dict[int, str] = {}
    for i, nd in zip(ev.tolist(), nodes.tolist()):
        if nd not in lanes:
            c = int(trace.channel[i])
            lanes[nd] = f"channel {c}" if c >= 0 else f"stream {int(trace.stream[i])}"
    return lanes


def topo_of_file(graph_path: Path, trace_path: Path | None = None, *,
                 max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[GraphData, topo.Topology]:
    """A graph export's topology; with a trace of the same instantiation, weighted by measured durations."""
    g = GraphData.load(graph_path, max_bytes=max_bytes)
    durations = node_durations(g, load_trace(trace_path, max_bytes=max_bytes)) if trace_path else None
    return g, topo.analyze(g, durations)
