"""Analyses started from the paths a command was given: resolve the inputs (``inspect.inputs``),
check that they hold what the command needs, run the analysis once per trace, and return typed
results for a renderer. One domain function per command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.artifacts.trace import Trace, TracerOverhead
from cgtool.errors import UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.inputs import (GraphItem, InputKind, Resolved, Selector, TraceSource, attach_trace, listing,
                                   one_graph, require, resolve, selected)
from cgtool.inspect.results import DepsResult
from cgtool.inspect.views import Analyses, GraphView

@dataclass(frozen=True)
class DepsRun:
    """A deps analysis with what it was computed from."""

    label: str
    path: Path
    rank: int | None
    process: str | None
    trace: Trace | None  # None once dropped (a folder may hold many ranks' large traces)
    graphs: list[GraphData]
    result: DepsResult
    overhead: TracerOverhead | None
    doc: dict[str, Any] | None = None  # the whole trace document, when asked for (annotation)
    names: dict[int, str] | None = None  # exec graph id -> the graph's name in topo/diff/report (``#0 ...``)

    def sources(self) -> dict[int, str]:
        """Tools id -> source label, from the exports' per-node sources."""
        return {k: v for g in self.graphs for k, v in g.source_labels().items()}


def compare_run(run: DepsRun, other: Path, graphs: Sequence[Path], *, tolerance_us: float = DEFAULT_TOLERANCE_US,
                max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """``deps --compare``: ``run`` against another trace of the same graph (analysed with its own
    connections setting), judged by measured span per replay."""
    from cgtool.inspect.analyzers.compare import compare_traces

    (theirs,) = deps_runs(other, graphs, tolerance_us=tolerance_us, max_bytes=max_bytes)
    return compare_traces(run.result, theirs.result, str(run.path), str(other))


def _given_graphs(paths: Sequence[Path], max_bytes: int | None) -> list[GraphData]:
    out: list[GraphData] = []
    for p in paths:
        r = resolve(p, max_bytes=max_bytes)
        if not r.graphs:
            raise UsageError(f"{p} (given with --graph) is {r.kind.value}, which holds no graph export.")
        out += [i.graph for i in selected(r, Selector())]
    return out


def deps_runs(inp: Path | str, graph_paths: Sequence[Path] = (), *, selector: Selector = Selector(),
              tolerance_us: float = DEFAULT_TOLERANCE_US, max_bytes: int | None = DEFAULT_MAX_BYTES,
              keep_doc: bool = False, keep_trace: bool = False, max_connections: int | None = None) -> list[DepsRun]:
    """Classify the serializations of every trace ``inp`` holds (one file, or a folder's per rank
    and process) against its graphs: the given exports, else the ones embedded or beside it.
    ``selector`` narrows the traces (rank, process) and the graphs analysed (exec graph id, ``#n``)."""
    res = resolve(inp, max_bytes=max_bytes)
    given = _given_graphs(graph_paths, max_bytes) if graph_paths else []
    require(res, "deps", have_graph=bool(given))
    traces = [ts for ts in res.traces if (selector.rank is None or ts.rank == selector.rank)
              and (selector.process is None or ts.process == selector.process)]
    if not traces:
        raise UsageError(f"{res.path} holds no trace {selector.describe()}; its traces: "
                         + ", ".join(f"{t.path} (rank {t.rank})" for t in res.traces) + ".")
    sel = Selector(selector.graph_id, res.number if res.number is not None else selector.number)
    out = []
    analyses = Analyses(tolerance_us=tolerance_us, max_bytes=max_bytes, max_connections=max_connections)
    for ts in traces:
        if given:
            if ts.embedded:  # the exports given must be the graphs the trace embeds (the one check)
                from cgtool.inspect.belong import check_belong

                emb = {g.exec_graph_id: g for g in ts.graphs}
                for g in given:
                    if g.exec_graph_id in emb:
                        check_belong(g, emb[g.exec_graph_id], ts.path)
            ts = TraceSource(ts.path, given, False, ts.rank, ts.process, ts._trace)
        elif not ts.graphs:
            raise UsageError(f"{ts.path} is a profiler trace with no graph export in it or beside it: pass the "
                             f"export of the replayed graph with --graph (`cgtool deps {ts.path} --graph GRAPH.json`).")
        if not sel.empty:
            items = [i for i in res.graphs if i.trace is ts] or [
                GraphItem(g.source, g, k, ts.rank, ts.process, ts) for k, g in enumerate(ts.graphs)]
            keep = {i.graph.exec_graph_id for i in sel.pick(items, res.path)}
            ts = TraceSource(ts.path, [g for g in ts.graphs if g.exec_graph_id in keep], ts.embedded, ts.rank,
                             ts.process, ts._trace)
        names = {i.graph.exec_graph_id: i.label for i in res.graphs if i.trace is ts and i.label}
        result = analyses.of(ts)
        t = ts.load(max_bytes)
        doc = None
        if keep_doc:
            from cgtool.artifacts.jsonio import load_json

            doc = load_json(ts.path, max_bytes=max_bytes)
        label = str(ts.path) if len(traces) == 1 else _trace_label(ts)
        out.append(DepsRun(label, ts.path, ts.rank, ts.process, t if keep_trace else None, ts.graphs, result,
                           t.tracer_overhead, doc, names or None))
        if not keep_trace:
            ts.forget()
    return out


def _trace_label(ts: TraceSource) -> str:
    who = (f"rank {ts.rank}" if ts.rank is not None else "") + (f" process {ts.process}" if ts.process else "")
    return f"{who.strip()}: {ts.path}" if who.strip() else str(ts.path)


def deps_of_file(trace_path: Path, graph_paths: Sequence[Path] = (), *, tolerance_us: float = DEFAULT_TOLERANCE_US,
                 max_bytes: int | None = DEFAULT_MAX_BYTES, keep_doc: bool = False,
                 max_connections: int | None = None) -> DepsRun:
    """Classify the serializations of one trace file against the given exports (or its embedded ones)."""
    (run,) = deps_runs(trace_path, graph_paths, tolerance_us=tolerance_us, max_bytes=max_bytes, keep_doc=keep_doc,
                       keep_trace=True, max_connections=max_connections)
    return run


def graph_views(inp: Path | str, trace: Path | str | None = None, *, selector: Selector = Selector(),
                command: str = "topo", tolerance_us: float = DEFAULT_TOLERANCE_US,
                max_bytes: int | None = DEFAULT_MAX_BYTES, one: bool = False) -> tuple[Resolved, list[GraphView], list[str]]:
    """The graphs of ``inp`` (those ``selector`` names; with ``one``, exactly one), each timed by
    its trace: the one it holds, or ``trace`` given beside it (paired per rank)."""
    res = resolve(inp, max_bytes=max_bytes)
    tres = resolve(trace, max_bytes=max_bytes) if trace is not None else None
    require(res, command)
    items = [one_graph(res, selector, command)] if one else selected(res, selector)
    notes = list(res.notes)
    if tres is not None:
        if tres.kind not in (InputKind.CGTOOL_TRACE, InputKind.PROFILER_TRACE, InputKind.RANKS, InputKind.RECORD,
                             InputKind.FOLDER) or not tres.traces:
            raise UsageError(f"{tres.path} (given with --trace) is {tres.kind.value} holding no trace.")
        notes += attach_trace(items, tres)
    analyses = Analyses(tolerance_us=tolerance_us, max_bytes=max_bytes)
    views = []
    for item in items:
        if item.trace is not None and item.trace.embedded and item.path is not None:
            _check_same(item)
        views.append(analyses.view(item))
    return res, views, notes


def _check_same(item: GraphItem) -> None:
    """An export given beside a cgtool trace must be the graph the trace embeds under its id."""
    from cgtool.errors import InvalidInputError
    from cgtool.inspect.belong import check_belong

    assert item.trace is not None
    emb = {g.exec_graph_id: g for g in item.trace.graphs}
    g = emb.get(item.graph.exec_graph_id)
    if g is None:
        raise InvalidInputError(
            f"{item.trace.path} holds graph work of exec graph id(s) {sorted(emb)}, but {item.path} is exec graph "
            f"{item.graph.exec_graph_id}. A trace and an export join only when they come from the same "
            "instantiation (re-instantiating makes a new id): pass the export written with this trace.")
    check_belong(item.graph, g, item.trace.path)


def diff_pair(a: Path | str, b: Path | str, sel_a: Selector, sel_b: Selector, *,
              max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[GraphItem, GraphItem]:
    """The two graphs `diff` compares: one from each input."""
    out = []
    for p, sel in ((a, sel_a), (b, sel_b)):
        r = resolve(p, max_bytes=max_bytes)
        require(r, "diff")
        out.append(one_graph(r, sel, "diff"))
    return out[0], out[1]


def topo_of_recording(folder: Path, trace: Path | None = None, *,
                      max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[str, tuple[GraphData, Any]]:
    """Every graph of a one-process recording (by file name), weighted by its trace when it has one."""
    _, views, _ = graph_views(folder, trace, max_bytes=max_bytes)
    out: dict[str, tuple[GraphData, Any]] = {}
    for v in views:
        name = Path(v.graph.source).name
        out[name] = (v.graph, v.topology)
    return out


__all__ = ["DepsRun", "deps_of_file", "deps_runs", "diff_pair", "graph_views", "listing", "topo_of_recording"]
