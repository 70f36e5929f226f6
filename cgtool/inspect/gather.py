"""Everything `cgtool report` shows, gathered from the files it is given.

An input is a file or a folder (searched recursively): graph exports, traces (cgtool's, with their
graphs embedded, or torch.profiler's beside the export of the replayed graph), bench results, a
capture bundle, a per-rank folder, a `cgtool record` folder. Each file is told by its content, not
its name. Every graph becomes one ``GraphView``: its topology, and with a trace of the same
instantiation the measured durations, the deps analysis and the events of one replay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import msgspec
import numpy as np

from cgtool.artifacts.bench import BenchResults
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, describe_json_error, read_bytes
from cgtool.artifacts.trace import Trace, load_trace
from cgtool.errors import InvalidInputError, UsageError
from cgtool.inspect import topo
from cgtool.inspect.benchstats import Judgement, compare_results
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.deps import DepsResult, analyze, graph_events, graphs_from_trace, measured_path

_RANK = re.compile(r"rank[_-]?(\d+)")


class _Probe(msgspec.Struct):
    # msgspec.Raw cannot sit in a Union: an absent key is the empty Raw (length 0).
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    nodes: msgspec.Raw = msgspec.Raw(b"")
    workloads: msgspec.Raw = msgspec.Raw(b"")
    kind: Any = None
    cgtool_record: Any = None  # a `cgtool record` folder's index.json: its graphs and trace are read as files
    cgtool: Any = None


_probe = msgspec.json.Decoder(_Probe)


@dataclass
class Replay:
    """The events of one replay of a graph, in time order (µs from the replay's first start)."""

    correlation: int
    node: np.ndarray  # node index per event
    lane: list[str]  # "channel N" or "stream N" per event
    start: np.ndarray
    end: np.ndarray


@dataclass
class GraphView:
    """One graph and what was measured of it."""

    label: str
    graph: GraphData
    topology: topo.Topology
    rank: int | None = None
    trace_source: str | None = None
    durations: dict[int, float] | None = None  # mean µs per node index over the traced replays
    deps: DepsResult | None = None
    replay: Replay | None = None


@dataclass
class BenchView:
    results: BenchResults
    source: str
    judgements: list[Judgement] | None = None
    baseline: BenchResults | None = None
    baseline_source: str | None = None


@dataclass
class Gathered:
    graphs: list[GraphView] = field(default_factory=list)
    bench: list[BenchView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _files(p: Path) -> list[Path]:
    if p.is_dir():
        return sorted({f for pat in ("*.json", "*.json.gz") for f in p.rglob(pat) if f.is_file()})
    if not p.exists():
        raise UsageError(f"No such file or folder: {p}.")
    return [p]


def _rank(path: Path, doc_cgtool: Any) -> int | None:
    r = doc_cgtool.get("rank") if isinstance(doc_cgtool, dict) else None
    if isinstance(r, int):
        return r
    m = _RANK.search(str(path))
    return int(m.group(1)) if m else None


def _match(trace: Trace, g: GraphData) -> tuple[np.ndarray, np.ndarray]:
    """(event indices, node indices) of ``g``'s work in ``trace``: by node ids when the trace has
    them, else inferred by launch, name and order as `deps` does."""
    return graph_events(trace, g)


def graph_view(label: str, g: GraphData, rank: int | None = None, trace: Trace | None = None,
               res: DepsResult | None = None) -> GraphView:
    """``g`` with what ``trace`` (analysed by deps into ``res``) measured of it, when given."""
    if trace is None or res is None:
        return GraphView(label, g, topo.analyze(g), rank)
    ev, nodes = _match(trace, g)
    n = len(g.nodes)
    tot = np.bincount(nodes, weights=trace.end[ev] - trace.start[ev], minlength=n)
    cnt = np.bincount(nodes, minlength=n)
    durations = {i: float(tot[i] / cnt[i]) for i in range(n) if cnt[i]}
    # One replay, the one of median span: a typical replay, not the first (warm-up) one.
    t = res.replay_table
    mine = np.flatnonzero(t["graph_id"] == g.exec_graph_id)
    replay = None
    if len(mine):
        k = mine[np.argsort(t["span_us"][mine], kind="stable")[len(mine) // 2]]
        corr, dev = int(t["correlation"][k]), int(t["device"][k])
        sel = (trace.correlation[ev] == corr) & (trace.device[ev] == dev)
        e, nd = ev[sel], nodes[sel]
        o = np.argsort(trace.start[e], kind="stable")
        e, nd = e[o], nd[o]
        t0 = float(trace.start[e].min()) if len(e) else 0.0
        lanes = [f"channel {int(trace.channel[i])}" if trace.channel[i] >= 0 else f"stream {int(trace.stream[i])}"
                 for i in e.tolist()]
        replay = Replay(corr, nd, lanes, trace.start[e] - t0, trace.end[e] - t0)
    # The measured critical path: the one deps and topo --trace report (durations only colour nodes).
    return GraphView(label, g, topo.analyze(g, measured=measured_path(trace, g)), rank, trace.source, durations,
                     res, replay)


def gather(inputs: Sequence[Path], *, baseline: Path | None = None, tolerance_us: float = DEFAULT_TOLERANCE_US,
           max_bytes: int | None = DEFAULT_MAX_BYTES) -> Gathered:
    """Read every input, tell the files apart by content, and pair traces with their graphs."""
    traces: list[tuple[Path, Trace, int | None]] = []
    exports: list[tuple[Path, GraphData, int | None]] = []
    benches: list[tuple[Path, BenchResults]] = []
    out = Gathered()
    seen: set[Path] = set()
    skipped: list[Path] = []  # files in input folders that are not cgtool artifacts (raw records, notes)
    for inp in inputs:
        files = _files(inp)
        for f in files:
            if f.resolve() in seen:
                continue
            seen.add(f.resolve())
            data = read_bytes(f, max_bytes=max_bytes)
            try:
                pr = _probe.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                if inp.is_dir():
                    skipped.append(f)
                    continue
                raise InvalidInputError(describe_json_error(f, data, e)) from None
            if len(pr.traceEvents):
                traces.append((f, load_trace(f, max_bytes=max_bytes), _rank(f, pr.cgtool)))
            elif len(pr.nodes):
                exports.append((f, GraphData.load(f, max_bytes=max_bytes), _rank(f, pr.cgtool)))
            elif len(pr.workloads) or pr.kind == "bench":
                benches.append((f, BenchResults.load(f, max_bytes=max_bytes)))
            elif pr.cgtool_record is not None:
                continue  # the index of a `cgtool record` folder: the files it lists are read on their own
            elif inp.is_dir():
                skipped.append(f)
            else:
                raise InvalidInputError(f"{f} is not a graph export, a trace or bench results (it has no "
                                        "'nodes', 'traceEvents' or 'workloads'). Pass cgtool's artifacts.")
        if not files and inp.is_dir():
            raise InvalidInputError(f"No JSON files in {inp} (looked for *.json and *.json.gz, recursively).")
    if skipped:
        out.notes.append(f"{len(skipped)} file(s) in the input folders are not graph exports, traces or bench "
                         f"results and were skipped: {', '.join(str(p) for p in skipped[:5])}"
                         + (", ..." if len(skipped) > 5 else ""))
    used: set[tuple[int | None, int]] = set()
    for f, t, rank in traces:
        gs = graphs_from_trace(t)
        if not gs:  # torch.profiler: the exports of the same rank that match by launch
            gs = [g for _, g, r in exports if r == rank and (rank, g.exec_graph_id) not in used]
            if t.has_graph_ids:
                ids = set(np.unique(t.graph_id).tolist())
                gs = [g for g in gs if g.exec_graph_id in ids]
        if not gs:
            out.notes.append(f"{f}: no graph export for this trace (pass the export of the replayed graph)")
            continue
        try:
            res = analyze(t, gs, tolerance_us=tolerance_us)
        except InvalidInputError as e:  # e.g. a trace of another instantiation: show the graphs alone
            out.notes.append(f"{f}: not used: {e.message}")
            continue
        traced = set(res.replay_table["graph_id"].tolist())
        for k, g in enumerate(gs):
            label = _label(f, g, k, len(gs), rank)
            # A graph the trace embeds but never saw replayed (`record` traces a window) is shown untimed.
            timed = g.exec_graph_id in traced
            out.graphs.append(graph_view(label, g, rank, t if timed else None, res if timed else None))
            used.add((rank, g.exec_graph_id))
    for f, g, rank in exports:
        if (rank, g.exec_graph_id) in used:
            continue  # the same graph came with a trace
        out.graphs.append(graph_view(_label(f, g, 0, 1, rank), g, rank))
    base = BenchResults.load(baseline, max_bytes=max_bytes) if baseline is not None else None
    for f, b in benches:
        js = compare_results(base, b) if base is not None else None
        out.bench.append(BenchView(b, str(f), js, base, str(baseline) if baseline else None))
    out.graphs.sort(key=lambda v: (-1 if v.rank is None else v.rank))
    if not out.graphs and not out.bench:
        raise InvalidInputError("Nothing to report: the inputs hold no graph export, trace or bench results.")
    return out


def _label(f: Path, g: GraphData, k: int, n: int, rank: int | None) -> str:
    meta: Any = g.meta
    rec = meta.get("record") if isinstance(meta, dict) else None
    lab = (rec.get("label") if isinstance(rec, dict) else None) or (meta.get("label") if isinstance(meta, dict) else None)
    name = str(lab) if lab else (f.name if n == 1 else f"{f.name} graph {k}")
    return f"rank {rank}: {name}" if rank is not None else name
