"""Which trace event ran which graph node.

With graph node ids in the trace (CUPTI, newer Kineto) the match is exact: each event names its
node. Without them (torch.profiler up to 2.12) a replay is the GPU work of one cudaGraphLaunch's
correlation id, and its events are matched to nodes as a constraint problem
(``cgtool.inspect.match``); each verdict then says how certain it is.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.artifacts.names import demangle
from cgtool.artifacts.trace import KINDS, Trace
from cgtool.errors import InvalidInputError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.analyzers._arrays import dense, distinct, unique_ids
from cgtool.inspect.match import GraphModel, match_launches, prepare
from cgtool.inspect.reach import Reachability, topological_order
from cgtool.inspect.results import EventMatch


class PreparedGraph:
    """A graph prepared for analysis: reachability, topological order, tools id -> index."""

    def __init__(self, g: GraphData) -> None:
        self.g = g
        self.order = topological_order(g)
        self.reach = Reachability(g, self.order)
        tools = np.array([n.tools_id for n in g.nodes], dtype=np.int64)
        self.sort = np.argsort(tools, kind="stable")
        self.sorted_tools = tools[self.sort]
        self.gpu_nodes = np.array([n.index for n in g.nodes if n.node_type.runs_on_gpu], dtype=np.int64)

    def name(self, index: int) -> str:
        return self.g.display_name(index)

    @functools.cached_property
    def model(self) -> GraphModel:
        """The GPU projection (nearest GPU predecessors, launch keys) used by matching and cost."""
        return prepare(self.g, self.order)

    def lookup(self, tools: np.ndarray) -> np.ndarray:
        """Node index of each tools id; -1 where the graph has no such node."""
        if not len(self.sorted_tools):
            return np.full(len(tools), -1, dtype=np.int64)
        pos = np.searchsorted(self.sorted_tools, tools)
        pos = np.minimum(pos, len(self.sorted_tools) - 1)
        hit = self.sorted_tools[pos] == tools
        return np.where(hit, self.sort[pos], -1)


def prepare_graphs(graphs: Sequence[GraphData]) -> dict[int, PreparedGraph]:
    prepared: dict[int, PreparedGraph] = {}
    for g in graphs:
        if g.exec_graph_id in prepared:
            raise InvalidInputError(
                f"Two graph exports have exec graph id {g.exec_graph_id} ({prepared[g.exec_graph_id].g.source} "
                f"and {g.source}); ids are unique per process, so these come from different runs. "
                "Pass the exports written with this trace."
            )
        prepared[g.exec_graph_id] = PreparedGraph(g)
    return prepared


def _key_node(g: GraphData, i: int) -> tuple[str, str]:
    n = g.nodes[i]
    if n.node_type is NodeType.KERNEL:
        return ("kernel", demangle(n.kernel_name or ""))
    return (n.node_type.value, "")


def _key_event(kind: str, name: str) -> tuple[str, str]:
    return ("kernel", demangle(name)) if kind == "kernel" else (kind, "")


def exact_match(trace: Trace, graphs: dict[int, PreparedGraph], *, ignore_unknown: bool = False) -> EventMatch:
    """The match by graph node ids. ``ignore_unknown``: events of graphs not given are left out
    (else they are an error: the trace and the exports come from different instantiations)."""
    ev = np.flatnonzero(trace.graph_id > 0)
    gids = trace.graph_id[ev]
    in_trace = distinct(gids).tolist()
    if ignore_unknown and any(i not in graphs for i in in_trace):
        keep = np.isin(gids, list(graphs))
        ev, gids = ev[keep], gids[keep]
        in_trace = [i for i in in_trace if i in graphs]
    unknown = [i for i in in_trace if i not in graphs]
    if unknown:
        raise InvalidInputError(
            f"{trace.source} holds graph work of exec graph id(s) {unknown}, but the graph "
            f"export(s) have exec graph id(s) {sorted(graphs)}. A trace and an export join only "
            "when they come from the same instantiation (re-instantiating makes a new id): pass "
            "the export written with this trace (`cgtool trace` embeds it), or record both again."
        )
    node = np.empty(len(ev), dtype=np.int64)
    for gid in in_trace:
        pg = graphs[gid]
        # One graph (the usual trace): its events are all of them, no mask to apply.
        m: Any = slice(None) if len(in_trace) == 1 else gids == gid
        ev_m = ev[m]
        found = pg.lookup(trace.tools_id[ev_m])
        if (found < 0).any():
            i = int(ev_m[np.flatnonzero(found < 0)[0]])
            e = trace.event(i)
            raise InvalidInputError(
                f"{trace.source}: event #{e.seq} ({e.name[:50]!r}) has graph node id {e.tools_id}, "
                f"which is not a node of exec graph {gid} in {pg.g.source}. The export does "
                "not match this trace: record both from the same instantiation."
            )
        node[m] = found
        # Exec graph ids count up per process (the first graph of every process has the same id),
        # so equal ids do not prove that a trace and an export belong together: each node must
        # also be of its events' kind and, for kernels, have their name. Checked once per pair.
        # The first event of each distinct (node, name, kind), in that order (a table, not a sort).
        _, first = dense(found, trace.name[ev_m], trace.kind[ev_m])
        for j in first.tolist():
            i = int(ev_m[j])
            nd = int(found[j])
            kind, name = KINDS[trace.kind[i]], trace.names[trace.name[i]]
            if _key_node(pg.g, nd) != _key_event(kind, name):
                raise InvalidInputError(
                    f"{trace.source}: event #{int(trace.seq[i])} is {kind} {demangle(name)[:60]!r}, but node "
                    f"{nd} of exec graph {gid} in {pg.g.source} is "
                    f"{pg.g.nodes[nd].node_type.value} {pg.name(nd)[:60]!r}. Exec graph ids are "
                    "counters per process, so this export comes from another run with the same id: "
                    "pass the export written with this trace (cgtool traces embed theirs)."
                )
    return EventMatch(ev, node, gids, len(trace) - len(ev))


def match_graph_events(trace: Trace, g: GraphData) -> tuple[np.ndarray, np.ndarray]:
    """(event indices, node indices) of the trace's events of exec graph ``g`` (node ids needed),
    with the same checks as the analysis (ids present, kinds and names agree)."""
    if g.exec_graph_id not in set(distinct(trace.graph_id).tolist()):
        ids = distinct(trace.graph_id[trace.graph_id > 0]).tolist()
        raise InvalidInputError(
            f"{trace.source} has graph ids {ids or 'none'} but {g.source} is exec graph "
            f"{g.exec_graph_id}: they come from different instantiations. Pass the matching pair."
        )
    m = exact_match(trace, {g.exec_graph_id: PreparedGraph(g)}, ignore_unknown=True)
    return m.ev, m.node


def inferred_match(trace: Trace, graphs: dict[int, PreparedGraph], tolerance_us: float) -> tuple[EventMatch, list[str]]:
    """Kineto traces without graph ids: a replay is the GPU work of one cudaGraphLaunch's
    correlation id; its events are matched to nodes as a constraint problem (cgtool.inspect.match)."""
    mt = match_launches(trace, {gid: pg.model for gid, pg in graphs.items()}, tolerance_us=tolerance_us)
    evs, nodes, gids, grp, slots = [], [], [], [], []
    for k, lg in enumerate(mt.groups):
        n_slots, n_rep = lg.events.shape
        evs.append(lg.events.T.reshape(-1))
        nodes.append(np.tile(lg.solutions[0], n_rep))
        gids.append(np.full(n_slots * n_rep, lg.graph_id, np.int64))
        grp.append(np.full(n_slots * n_rep, k, np.int64))
        slots.append(np.tile(np.arange(n_slots, dtype=np.int64), n_rep))

    def cat(xs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(xs) if xs else np.zeros(0, np.int64)
    n_assign = sorted({lg.assignments for lg in mt.groups})
    notes = ["Events were matched to graph nodes by launch, kernel name and shape, stream and time (the "
             "trace has no graph node ids): the match is inferred "
             + ("and unique." if n_assign == [1] and all(lg.complete for lg in mt.groups) else
                f"with {', '.join(map(str, n_assign))} consistent assignment(s) per launch group; "
                "each finding says whether its verdict holds under all of them.")]
    if not all(lg.complete for lg in mt.groups):
        notes.append("The search for assignments stopped at its bound for some launches: their counts are "
                     "lower bounds and 'inferred-invariant' holds for the assignments found.")
    notes += mt.notes
    other = mt.other
    unmatched = set(mt.unmatched) | set(mt.other_graph_launches)
    if unmatched:  # events of launches left out are neither graph work analysed nor "other"
        other += int(np.isin(trace.correlation, list(unmatched)).sum())
    return EventMatch(cat(evs), cat(nodes), cat(gids), other, cat(grp), cat(slots), tuple(mt.groups)), notes


def graph_events(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(event indices, node indices) of ``g``'s work in ``trace``: by node ids when the trace has
    them, else by the inferred match (its first consistent assignment)."""
    if trace.has_graph_ids:
        return match_graph_events(trace, g)
    m, _ = inferred_match(trace, {g.exec_graph_id: PreparedGraph(g)}, tolerance_us)
    return m.ev, m.node


def drop_incomplete(trace: Trace, m: EventMatch, graphs: dict[int, PreparedGraph],
                    replays: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[EventMatch, list[Any]]:
    """Leave out the replays that lack an event of some GPU node of their graph (a record lost by
    the profiler, a replay cut at the edge of a traced window): their span, waits and critical
    path would be wrong. Returns the match of the complete replays and, per graph, what was left
    out (``results.Incomplete``). The inferred match needs no such step: a launch whose events do
    not cover its graph's nodes has no consistent assignment and is left out there.
    ``replays``: ``dense(device, graph, correlation)`` of ``m``'s events, where the caller has it."""
    from cgtool.inspect.results import Incomplete

    if not len(m.ev):
        return m, []
    rep, first = replays if replays is not None else dense(trace.device[m.ev], m.graph, trace.correlation[m.ev])
    keep = np.ones(len(m.ev), bool)
    out: list[Incomplete] = []
    for gid, pg in graphs.items():
        sel = np.flatnonzero(m.graph == gid)
        if not len(sel):
            continue
        n_gpu = len(pg.gpu_nodes)
        reps, local = unique_ids(rep[sel])
        seen = np.zeros((len(reps), len(pg.g.nodes)), bool)
        seen[local, m.node[sel]] = True
        have = seen[:, pg.gpu_nodes].sum(axis=1) if n_gpu else np.zeros(len(reps), np.int64)
        bad = np.flatnonzero(have < n_gpu)
        if not len(bad):
            continue
        keep[sel[np.isin(local, bad)]] = False
        lacking = ~seen[np.ix_(bad, pg.gpu_nodes)]
        missing = pg.gpu_nodes[lacking.any(axis=0)]
        corr = trace.correlation[m.ev[first[reps[bad]]]]
        out.append(Incomplete(gid, len(bad), len(reps), tuple(pg.g.nodes[int(i)].tools_id for i in missing[:20]),
                              tuple(int(c) for c in corr[:5])))
    if not out:
        return m, []
    return m.select(keep), out
