"""One graph and what a trace measured of it, ready for a renderer (DOT, the HTML report, tables).

Everything here is read from a ``DepsResult`` and its event↔node match (``DepsResult.events``):
the trace is never matched to the graph again. ``Analyses`` runs the deps analysis once per trace
and hands the same result to every graph of that trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.cost import CriticalPath
from cgtool.inspect.results import DepKind, DepsResult, Figures

if TYPE_CHECKING:  # networkx (under topo) is imported where a topology is made
    from cgtool.artifacts.trace import Trace
    from cgtool.inspect.inputs import GraphItem, TraceSource
    from cgtool.inspect.topo import Topology


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
    topology: "Topology"
    rank: int | None = None
    trace_source: str | None = None
    durations: dict[int, float] | None = None  # mean µs per node index over the traced replays
    deps: DepsResult | None = None
    replay: Replay | None = None  # the replay of median span
    figures: Figures | None = None  # of this graph in this trace (not of the whole trace)
    lanes: dict[int, str] = field(default_factory=dict)  # node index -> the lane it ran on (median replay)
    fakes: list[tuple[int, int, int]] = field(default_factory=list)  # (node a, node b, count) fake pairs
    fake_waits: list[float] = field(default_factory=list)  # µs B waited per occurrence, for each of ``fakes``
    waits: list[tuple[int, int, int, float]] = field(default_factory=list)  # (after, behind, count, µs each)
    process: str | None = None


def measured_of(res: DepsResult, graph_id: int) -> CriticalPath | None:
    """The measured critical path of one graph from a result (None: the trace has no replay of it)."""
    t = res.replay_table
    sel = t["graph_id"] == graph_id
    if not sel.any() or graph_id not in res.critical_paths:
        return None
    return CriticalPath(t["critical_path_us"][sel], list(res.critical_paths[graph_id]))


def graph_view(label: str, g: GraphData, rank: int | None = None, trace: "Trace | None" = None,
               res: DepsResult | None = None, *, process: str | None = None) -> GraphView:
    """``g`` with what ``res`` (the deps analysis of a trace holding its replays) measured of it."""
    from cgtool.inspect import topo

    gid = g.exec_graph_id
    measured = measured_of(res, gid) if res is not None else None
    if res is None or res.events is None or measured is None:
        return GraphView(label, g, topo.analyze(g), rank, process=process,
                         trace_source=res.source if res is not None else None)
    m = res.events
    mine = np.flatnonzero(m.graph == gid)
    node, start, end = m.node[mine], m.start[mine], m.end[mine]
    n = len(g.nodes)
    tot = np.bincount(node, weights=end - start, minlength=n)
    cnt = np.bincount(node, minlength=n)
    durations = {i: float(tot[i] / cnt[i]) for i in range(n) if cnt[i]}
    # One replay, the one of median span: a typical replay, not the first (warm-up) one.
    t = res.replay_table
    rows = np.flatnonzero(t["graph_id"] == gid)
    k = int(rows[np.argsort(t["span_us"][rows], kind="stable")[(len(rows) - 1) // 2]])
    sel = mine[m.replay[mine] == k]
    o = np.argsort(m.start[sel], kind="stable")
    sel = sel[o]
    t0 = float(m.start[sel].min()) if len(sel) else 0.0
    lanes = [m.lane[int(j)] for j in m.lane_id[sel].tolist()]
    replay = Replay(int(t["correlation"][k]), m.node[sel], lanes, m.start[sel] - t0, m.end[sel] - t0)
    node_lane: dict[int, str] = {}
    for nd, ln in zip(replay.node.tolist(), lanes):
        node_lane.setdefault(int(nd), ln)
    tid = {nd.tools_id: nd.index for nd in g.nodes}
    mine_fakes = [f for f in res.findings
                  if f.kind is DepKind.FAKE and f.graph_id == gid and f.before in tid and f.after in tid]
    fakes = [(tid[f.before], tid[f.after], f.count) for f in mine_fakes]
    fake_waits = [f.wait_us / f.count if f.count else 0.0 for f in mine_fakes]
    waits = [(tid[w.after], tid[w.behind], w.count, w.wait_us / w.count if w.count else 0.0)
             for w in res.inferred_waits if w.graph_id == gid and w.after in tid and w.behind in tid]
    return GraphView(label, g, topo.analyze(g, measured=measured), rank, res.source, durations, res, replay,
                     res.figures(gid), node_lane, fakes, fake_waits, waits, process)


class Analyses:
    """The deps analysis of each trace, run once and shared by every graph of that trace."""

    def __init__(self, *, tolerance_us: float = DEFAULT_TOLERANCE_US, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 estimate: bool = True, max_connections: int | None = None) -> None:
        self.tolerance_us, self.max_bytes, self.estimate = tolerance_us, max_bytes, estimate
        self.max_connections = max_connections
        self._done: dict[int, DepsResult] = {}

    def of(self, ts: "TraceSource") -> DepsResult:
        from cgtool.inspect.deps import analyze

        key = id(ts)
        if key not in self._done:
            self._done[key] = analyze(ts.load(self.max_bytes), ts.graphs, tolerance_us=self.tolerance_us,
                                      estimate=self.estimate, max_connections=self.max_connections)
        return self._done[key]

    def view(self, item: "GraphItem") -> GraphView:
        """The view of one graph of an input: timed when its trace holds replays of it."""
        res = self.of(item.trace) if item.trace is not None else None
        return graph_view(item.label, item.graph, item.rank, None, res, process=item.process)


def summary_of(v: GraphView) -> dict[str, Any]:
    """The figures of a view as JSON (None without a trace)."""
    return v.figures.to_json() if v.figures is not None else {}
