"""Analyses started from files: load the artifacts, match them, run the analysis.

The CLI calls these with the paths it was given; each returns typed results for a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.artifacts.ranks import rank_files
from cgtool.artifacts.recording import graph_paths, is_single_recording, load_recordings, trace_path
from cgtool.artifacts.trace import Trace, TracerOverhead, load_trace, load_trace_and_doc
from cgtool.errors import UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.deps import DepsResult, analyze, graphs_from_trace, measured_path
from cgtool.inspect.deps import node_lanes as deps_node_lanes

if TYPE_CHECKING:  # imported where used: networkx, under topo, is not needed by `deps`
    from cgtool.inspect import topo


@dataclass
class DepsRun:
    """A deps analysis with what it was computed from."""

    trace: Trace
    graphs: list[GraphData]
    result: DepsResult
    doc: dict[str, Any] | None = None  # the whole trace document, when asked for (annotation)

    def sources(self) -> dict[int, str]:
        """Tools id -> source label, from the exports' per-node sources."""
        return {k: v for g in self.graphs for k, v in g.source_labels().items()}


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


def recorded_trace(path: Path) -> Path:
    """A one-process ``cgtool record`` folder -> its trace file; any other path unchanged."""
    if not is_single_recording(path):
        return path  # a trace file, or per-rank recordings (read as a per-rank folder)
    (rec,) = load_recordings(path)
    t = trace_path(rec)
    if t is None:
        raise UsageError(f"The recording {path} has no trace: record with `--trace-replays K` to get one.")
    return t


def topo_of_recording(folder: Path, trace: Path | None = None, *,
                      max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[str, tuple[GraphData, topo.Topology]]:
    """Every graph of a one-process recording (by file name), weighted by its trace when it has one."""
    from cgtool.inspect import topo

    (rec,) = load_recordings(folder)
    t_path = trace or trace_path(rec)
    tr = load_trace(t_path, max_bytes=max_bytes) if t_path else None
    traced = set(tr.graph_ids()) if tr is not None and tr.has_graph_ids else None
    out = {}
    for p in graph_paths(rec):
        g = GraphData.load(p, max_bytes=max_bytes)
        # A graph the program never replayed after the trace's warm-up has no events: static only.
        in_trace = tr is not None and (traced is None or g.exec_graph_id in traced)
        measured = measured_path(tr, g) if tr is not None and in_trace else None
        out[p.name] = (g, topo.analyze(g, measured=measured))
    return out


@dataclass
class RankDeps:
    """One rank's deps result with what its report shows beside it (the trace itself is not kept:
    a folder may hold many ranks' large traces)."""

    path: Path
    result: DepsResult
    overhead: TracerOverhead | None
    sources: dict[int, str]  # tools id -> source label, from the rank's exports


def deps_of_ranks(folder: Path, *, tolerance_us: float = DEFAULT_TOLERANCE_US,
                  max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[int, RankDeps]:
    """Per rank (read from each file), its trace file and deps result."""
    out = {}
    for r, p in sorted(rank_files(folder, "trace", max_bytes=max_bytes).items()):
        run = deps_of_file(p, tolerance_us=tolerance_us, max_bytes=max_bytes)
        out[r] = RankDeps(p, run.result, run.trace.tracer_overhead, run.sources())
    return out


def topo_of_ranks(folder: Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[int, tuple[GraphData, topo.Topology]]:
    """Per rank, its graph export and topology."""
    from cgtool.inspect import topo

    out = {}
    for r, p in sorted(rank_files(folder, "graph", max_bytes=max_bytes).items()):
        g = GraphData.load(p, max_bytes=max_bytes)
        out[r] = (g, topo.analyze(g))
    return out


def node_lanes(g: GraphData, trace: Trace) -> dict[int, str]:
    """The lane (``channel N``, or ``stream N`` without channel data) each node ran on first."""
    return deps_node_lanes(trace, g)


def topo_of_file(graph_path: Path, trace_path: Path | None = None, *,
                 max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[GraphData, topo.Topology]:
    """A graph export's topology; with a trace of the same instantiation, weighted by measured durations."""
    from cgtool.inspect import topo

    g = GraphData.load(graph_path, max_bytes=max_bytes)
    measured = measured_path(load_trace(trace_path, max_bytes=max_bytes), g) if trace_path else None
    return g, topo.analyze(g, measured=measured)
