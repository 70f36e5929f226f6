"""True and fake dependencies: every serialization a trace shows, classified against the graph.

Words (docs/architecture.md): in one replay, on one hardware channel (one stream when the trace has no
channel data), a *serialization* A→B is B starting at or after A's end (within ``tolerance_us``),
A being the item on that lane that ended last before B started (of items ending at the same
nanosecond, the one that started last). It is a **true** dependency when
B is reachable from A in the graph (through any node types) and a **fake** one otherwise:
independent work that the hardware ran one after the other.

The **wait** of a fake dependency: how long B sat ready — from the end of its last graph
predecessor (or the replay's start, for a root) to its own start. A wait is not a loss: what a
fake dependency costs the replay is *estimated* by re-scheduling it without that serialization
(``cgtool.inspect.cost``), and set against the measured critical path (one definition, shared
with ``topo`` and ``dot``).

Without graph node ids in the trace (torch.profiler up to 2.12) events are matched to nodes by
``cgtool.inspect.match``; each finding then says how certain its verdict is (exact,
inferred-unique, inferred-invariant, or undecided with the number of consistent assignments).
"""

from __future__ import annotations

import functools
import operator
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Sequence

import numpy as np

from cgtool.errors import InvalidInputError
from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.artifacts.names import demangle
from cgtool.inspect import DEFAULT_TOLERANCE_US, cost as costmod  # the default is re-exported here
from cgtool.inspect.match import Certainty, GraphModel, LaunchGroup, match_launches, prepare
from cgtool.text import plural
from cgtool.inspect.reach import Reachability, topological_order
from cgtool.artifacts.trace import KINDS, Trace



class DepKind(str, Enum):
    """The two categories of an observed serialization."""

    TRUE = "true"  # B is reachable from A in the graph: the graph required the order
    FAKE = "fake"  # no path from A to B: the graph allowed overlap, the hardware serialized them
    UNDECIDED = "undecided"  # no node ids, and the consistent assignments of events disagree


class Lane(str, Enum):
    """What a serialization is observed on."""

    CHANNEL = "channel"  # hardware channels (the trace records them: CUPTI, newer Kineto)
    STREAM = "stream"  # streams, when the trace has no channel data (torch.profiler on torch <= 2.12)


class MatchKind(str, Enum):
    """How the trace's events were matched to graph nodes."""

    EXACT = "exact"  # graph node ids in the trace
    INFERRED = "inferred"  # by launch, kernel name, shape, stream and time (cgtool.inspect.match)


@dataclass(frozen=True)
class DepsSummary:
    """The headline figures of a ``DepsResult`` (also its JSON ``summary``)."""

    true: int
    fake: int
    undecided: int  # serializations whose verdict differs between consistent assignments
    certainty: dict[str, int]  # serializations per certainty (exact, inferred-unique, ...)
    distinct_true: int
    distinct_fake: int
    fake_wait_us: float  # ready work waiting behind fake serializations, summed (a wait, not a loss)
    replays: int
    graphs: list[int]
    lane: Lane
    match: MatchKind
    tolerance_us: float
    mean_span_us: float | None
    mean_critical_path_us: float | None
    critical_path_us: float | None  # the median replay's measured critical path
    non_graph_events: int

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["lane"], d["match"] = self.lane.value, self.match.value
        return d


@dataclass
class Finding:
    """One distinct serialized pair, aggregated over the replays it was seen in."""

    graph_id: int
    before: int  # tools id of A
    after: int  # tools id of B
    kind: DepKind
    channel: int | None
    stream: int
    count: int = 0
    gap_us: float = 0.0  # mean of B.start - A.end
    wait_us: float = 0.0  # total time B sat ready, over all occurrences (fake ones)
    before_name: str = ""
    after_name: str = ""
    certainty: str = Certainty.EXACT.value  # how the events were matched to nodes (match.Certainty)
    assignments: int = 1  # consistent assignments of the replays' events to nodes
    saving_us: float | None = None  # estimated span saved per replay without this serialization

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["gap_us"] = round(self.gap_us, 3)
        d["wait_us"] = round(self.wait_us, 3)
        d["mean_wait_us"] = round(self.wait_us / self.count, 3) if self.count else 0.0
        d["saving_us"] = None if self.saving_us is None else round(self.saving_us, 3)
        return d


@dataclass
class InferredWait:
    """Without channel data: B started later than its graph predecessors allowed, and an
    unrelated item ended just before it started (inferred from timing)."""

    graph_id: int
    after: int
    behind: int
    count: int = 0
    wait_us: float = 0.0  # total
    after_name: str = ""
    behind_name: str = ""
    certainty: str = Certainty.EXACT.value  # of the node match (the wait itself is inferred from timing)
    saving_us: float | None = None  # estimated span saved per replay without this wait

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["wait_us"] = round(self.wait_us, 3)
        d["saving_us"] = None if self.saving_us is None else round(self.saving_us, 3)
        d["inferred"] = "timing"
        return d


@dataclass
class ReplayStat:
    graph_id: int
    device: int
    correlation: int
    events: int
    span_us: float
    critical_path_us: float
    true: int = 0
    fake: int = 0
    fake_wait_us: float = 0.0
    undecided: int = 0
    waited: int = 0  # waits behind unrelated work while the GPU had room (fake ones; streams: inferred)
    estimated_span_us: float = float("nan")  # list schedule with the observed serializations
    saving_us: float = float("nan")  # estimated span saved without any fake serialization
    filled: bool = False  # the kernels' area is close to the span: the GPU was full


@dataclass
class DepsResult:
    lane: Lane
    match: MatchKind
    tolerance_us: float
    findings: list[Finding]
    replay_table: dict[str, np.ndarray]  # one array per ReplayStat field, replays in time order
    inferred_waits: list[InferredWait]
    graphs: list[int]
    notes: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    non_graph_events: int = 0
    match_groups: list[dict[str, Any]] = field(default_factory=list)  # inferred match: per launch group
    critical_path_us: float | None = None  # median over replays of the measured critical path
    critical_paths: dict[int, list[int]] = field(default_factory=dict)  # graph id -> node indices (median replay)
    cost: dict[str, Any] = field(default_factory=dict)  # the estimate of what fake serializations cost

    @functools.cached_property
    def replays(self) -> list[ReplayStat]:
        """Per-replay statistics (built on first use: a trace may hold 100,000s of replays)."""
        t = self.replay_table
        cols = [t[f].tolist() for f in _REPLAY_FIELDS]
        return [ReplayStat(*row) for row in zip(*cols)]

    def _replay_dicts(self) -> list[dict[str, Any]]:
        """``asdict`` of every ReplayStat, made from the columns (the same values, far faster)."""
        t = self.replay_table
        return [dict(zip(_REPLAY_FIELDS, row)) for row in zip(*(t[f].tolist() for f in _REPLAY_FIELDS))]

    @property
    def n_true(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.TRUE)

    @property
    def n_fake(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.FAKE)

    @property
    def n_undecided(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.UNDECIDED)

    def fakes(self) -> list[Finding]:
        return sorted((f for f in self.findings if f.kind is DepKind.FAKE),
                      key=lambda f: (-(f.saving_us or 0.0), -f.wait_us, -f.count, f.before, f.after))

    def certainties(self) -> dict[str, int]:
        """Serializations per certainty of their verdict."""
        c: Counter[str] = Counter()
        for f in self.findings:
            c[f.certainty if f.kind is not DepKind.UNDECIDED else Certainty.UNDECIDED.value] += f.count
        return dict(c)

    def summary(self) -> DepsSummary:
        spans = self.replay_table["span_us"]
        crit = self.replay_table["critical_path_us"]
        return DepsSummary(
            true=self.n_true, fake=self.n_fake, undecided=self.n_undecided, certainty=self.certainties(),
            distinct_true=sum(1 for f in self.findings if f.kind is DepKind.TRUE),
            distinct_fake=sum(1 for f in self.findings if f.kind is DepKind.FAKE),
            fake_wait_us=round(sum(f.wait_us for f in self.findings if f.kind is DepKind.FAKE), 3),
            replays=int(len(spans)), graphs=self.graphs, lane=self.lane, match=self.match,
            tolerance_us=self.tolerance_us,
            mean_span_us=round(float(spans.mean()), 3) if len(spans) else None,
            mean_critical_path_us=round(float(crit.mean()), 3) if len(crit) else None,
            critical_path_us=self.critical_path_us,
            non_graph_events=self.non_graph_events,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "summary": self.summary().to_json(),
            "cost": self.cost,
            "match_groups": self.match_groups,
            "serializations": [f.to_json() for f in sorted(
                self.findings, key=lambda f: (f.kind is not DepKind.FAKE, -f.wait_us, f.before, f.after))],
            "inferred_waits": [w.to_json() for w in self.inferred_waits],
            "replays": self._replay_dicts(),
            "notes": self.notes,
            "suggestions": self.suggestions,
        }


_REPLAY_FIELDS = ("graph_id", "device", "correlation", "events", "span_us", "critical_path_us", "true", "fake",
                  "fake_wait_us", "undecided", "waited", "estimated_span_us", "saving_us", "filled")


class _G:
    """A graph prepared for analysis: reachability, topo order, tools id -> index."""

    def __init__(self, g: GraphData) -> None:
        self.g = g
        self.order = topological_order(g)
        self.reach = Reachability(g, self.order)
        self.index = {n.tools_id: n.index for n in g.nodes}
        tools = np.array([n.tools_id for n in g.nodes], dtype=np.int64)
        self.sort = np.argsort(tools, kind="stable")
        self.sorted_tools = tools[self.sort]

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


def _key_node(g: GraphData, i: int) -> tuple[str, str]:
    n = g.nodes[i]
    if n.node_type is NodeType.KERNEL:
        return ("kernel", demangle(n.kernel_name or ""))
    return (n.node_type.value, "")


def _key_event(kind: str, name: str) -> tuple[str, str]:
    return ("kernel", demangle(name)) if kind == "kernel" else (kind, "")


@dataclass
class _Matched:
    """Graph events of the trace and their nodes (parallel arrays over the selected events)."""

    ev: np.ndarray  # event indices into the trace's columns
    node: np.ndarray  # node index within its graph (inferred: under the first consistent assignment)
    graph: np.ndarray  # exec graph id
    other: int  # GPU events outside any graph
    group: np.ndarray | None = None  # inferred: index into ``groups`` of each event's launch group
    slot: np.ndarray | None = None  # inferred: the event's slot in its group
    groups: list[LaunchGroup] = field(default_factory=list)


# --------------------------------------------------------------------------- matching
def _exact_match(trace: Trace, graphs: dict[int, _G], *, ignore_unknown: bool = False) -> _Matched:
    ev = np.flatnonzero(trace.graph_id > 0)
    if ignore_unknown:
        ev = ev[np.isin(trace.graph_id[ev], list(graphs))]
    gids = trace.graph_id[ev]
    in_trace = [int(x) for x in np.unique(gids)]
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
        m = gids == gid
        found = pg.lookup(trace.tools_id[ev[m]])
        if (found < 0).any():
            i = int(ev[m][np.flatnonzero(found < 0)[0]])
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
        combo = found * 65536 * 4 + trace.name[ev[m]].astype(np.int64) * 4 + trace.kind[ev[m]]
        _, first = np.unique(combo, return_index=True)
        for j in first:
            i = int(ev[m][j])
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
    return _Matched(ev, node, gids, len(trace) - len(ev))


def match_graph_events(trace: Trace, g: GraphData) -> tuple[np.ndarray, np.ndarray]:
    """(event indices, node indices) of the trace's events of exec graph ``g`` (node ids needed),
    with the same checks as the analysis (ids present, kinds and names agree)."""
    if g.exec_graph_id not in set(np.unique(trace.graph_id).tolist()):
        ids = sorted(int(x) for x in np.unique(trace.graph_id[trace.graph_id > 0]))
        raise InvalidInputError(
            f"{trace.source} has graph ids {ids or 'none'} but {g.source} is exec graph "
            f"{g.exec_graph_id}: they come from different instantiations. Pass the matching pair."
        )
    m = _exact_match(trace, {g.exec_graph_id: _G(g)}, ignore_unknown=True)
    return m.ev, m.node


def _inferred_match(trace: Trace, graphs: dict[int, _G], tolerance_us: float) -> tuple[_Matched, list[str]]:
    """Kineto traces without graph ids: a replay is the GPU work of one cudaGraphLaunch's
    correlation id; its events are matched to nodes as a constraint problem (cgtool.inspect.match)."""
    mt = match_launches(trace, {gid: pg.model for gid, pg in graphs.items()}, tolerance_us=tolerance_us)
    evs, nodes, gids, grp, slots = [], [], [], [], []
    n_slots_all = 0
    for k, lg in enumerate(mt.groups):
        n_slots, n_rep = lg.events.shape
        evs.append(lg.events.T.reshape(-1))
        nodes.append(np.tile(lg.solutions[0], n_rep))
        gids.append(np.full(n_slots * n_rep, lg.graph_id, np.int64))
        grp.append(np.full(n_slots * n_rep, k, np.int64))
        slots.append(np.tile(np.arange(n_slots, dtype=np.int64), n_rep))
        n_slots_all += n_slots

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
    m = _Matched(cat(evs), cat(nodes), cat(gids), mt.other, cat(grp), cat(slots), mt.groups)
    unmatched = set(mt.unmatched)
    if unmatched:  # events of launches left out are neither graph work analysed nor "other"
        m.other += int(np.isin(trace.correlation, list(unmatched)).sum())
    return m, notes


def _dense(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense id per row, index of each id's first row) for the combination of integer columns.

    Each column is ranked on its own, then the ranks are combined in mixed radix into one int64
    key (a 1-D unique is far faster than numpy's row-wise unique)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.zeros(len(cols[0]), dtype=np.int64)
    room = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        width = hi - lo + 1
        if room * width < 2**62:  # combine the values directly
            key = key * width + (c - lo)
            room *= width
        else:  # rank first (one more sort) to keep the key small
            u, r = np.unique(c, return_inverse=True)
            key = key * len(u) + r.reshape(-1)
            room *= len(u)
            if room >= 2**62:  # pragma: no cover - would need billions of distinct values
                raise InvalidInputError("Too many distinct replays or lanes to index.")
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


# --------------------------------------------------------------------------- analysis
def analyze(trace: Trace, graphs: Sequence[GraphData], *, tolerance_us: float = DEFAULT_TOLERANCE_US,
            estimate: bool = True) -> DepsResult:
    """Classify every serialization in ``trace`` against ``graphs``; with ``estimate``, also
    estimate what the fake ones cost the replays (cgtool.inspect.cost)."""
    if not len(trace):
        raise InvalidInputError(
            f"{trace.source} has no GPU events (kernel, gpu_memcpy, gpu_memset) among its "
            f"{trace.n_events} events. Profile with CUDA activity enabled (`cgtool trace`)."
        )
    if not graphs:
        raise InvalidInputError(
            f"{trace.source} embeds no graph export and none was given. Pass the export of the "
            "same instantiation with --graph graph.json."
        )
    prepared = _prepare(graphs)
    notes: list[str] = []
    if trace.has_graph_ids:
        m = _exact_match(trace, prepared)
        match = MatchKind.EXACT
    else:
        m, notes = _inferred_match(trace, prepared, tolerance_us)
        match = MatchKind.INFERRED
    if not len(m.ev):
        raise InvalidInputError(f"{trace.source} has no graph work to analyse.")
    lane = Lane.CHANNEL if trace.has_channels else Lane.STREAM
    if lane is Lane.STREAM:
        notes.append("The trace has no hardware channel data: serializations are taken per stream, "
                     "and waits behind unrelated work are inferred from timing.")
    ev = m.ev
    start, end = trace.start[ev], trace.end[ev]
    corr, dev = trace.correlation[ev], trace.device[ev]
    replay, rfirst = _dense(dev, m.graph, corr)
    lanes_key = (trace.channel_type[ev], trace.channel[ev]) if lane is Lane.CHANNEL else (trace.stream[ev],)
    lane_id, _ = _dense(*lanes_key)
    n_rep = len(rfirst)

    # Readiness and the measured critical path, per graph, vectorized over its replays.
    ready = np.zeros(len(ev))
    span = np.zeros(n_rep)
    crit = np.zeros(n_rep)
    crit_paths: dict[int, list[int]] = {}
    crit_all: list[np.ndarray] = []
    for gid, pg in prepared.items():
        sel = np.flatnonzero(m.graph == gid)
        if not len(sel):
            continue
        reps, local = np.unique(replay[sel], return_inverse=True)
        local = local.reshape(-1)
        S, E = _replay_matrix(len(pg.g.nodes), local, m.node[sel], start[sel], end[sel], len(reps))
        t0 = np.nanmin(S, axis=1)
        span[reps] = np.nanmax(E, axis=1) - t0
        R = _readiness(pg, S, E, t0)
        cp = measured_critical_path(pg.g, pg.order, S, E)
        crit[reps] = cp.lengths_us
        crit_paths[gid] = cp.path
        crit_all.append(cp.lengths_us)
        ready[sel] = R[local, m.node[sel]]

    a_of = _latest_before(start, end, replay * (int(lane_id.max()) + 1) + lane_id, tolerance_us)
    b = np.flatnonzero(a_of >= 0)
    a = a_of[b]
    kind_true = np.zeros(len(b), dtype=bool)
    for gid, pg in prepared.items():
        mm = m.graph[b] == gid
        if mm.any():
            kind_true[mm] = pg.reach.reachable_many(m.node[a[mm]], m.node[b[mm]])
    cert, n_assign = _certainty(m, prepared, a, b, kind_true)
    undecided = cert == _CERTS.index(Certainty.UNDECIDED)
    kind = np.where(undecided, 2, np.where(kind_true, 0, 1))  # index into _KINDS
    gap = start[b] - end[a]
    wait = np.where(kind == 1, np.maximum(0.0, start[b] - ready[b]), 0.0)

    # Aggregate distinct pairs (and, for inferred matches, their certainty).
    gcode = np.searchsorted(np.array(sorted(prepared), dtype=np.int64), m.graph[b])
    pair, pfirst = _dense(gcode, m.node[a], m.node[b], kind, cert, n_assign) if len(b) else _dense(gcode)
    counts = np.bincount(pair, minlength=len(pfirst)) if len(b) else np.zeros(0, np.int64)
    gaps = np.bincount(pair, weights=gap, minlength=len(pfirst)) if len(b) else np.zeros(0)
    waits_ = np.bincount(pair, weights=wait, minlength=len(pfirst)) if len(b) else np.zeros(0)
    findings: list[Finding] = []
    chan = trace.channel[ev]
    stream = trace.stream[ev]
    for k, j in enumerate(pfirst.tolist()):
        gid = int(m.graph[b[j]])
        pg = prepared[gid]
        na, nb = int(m.node[a[j]]), int(m.node[b[j]])
        c = int(chan[b[j]])
        findings.append(Finding(
            gid, pg.g.nodes[na].tools_id, pg.g.nodes[nb].tools_id, _KINDS[int(kind[j])],
            None if c < 0 else c, int(stream[b[j]]), int(counts[k]),
            float(gaps[k] / counts[k]), float(waits_[k]), pg.name(na), pg.name(nb),
            _CERTS[int(cert[j])].value, int(n_assign[j])))
    n_true = np.bincount(replay[b][kind == 0], minlength=n_rep)
    n_fake = np.bincount(replay[b][kind == 1], minlength=n_rep)
    n_und = np.bincount(replay[b][kind == 2], minlength=n_rep)
    fake_wait = np.bincount(replay[b], weights=wait, minlength=n_rep)
    counts_ev = np.bincount(replay, minlength=n_rep)
    t_first = np.full(n_rep, np.inf)
    np.minimum.at(t_first, replay, start)
    o = np.argsort(t_first, kind="stable")
    waits: list[InferredWait] = []
    wait_pairs = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    cover = _coverage(prepared, m)
    full_gpu = [0, 0.0]
    if lane is Lane.STREAM:
        waits, wait_pairs = _inferred_waits(prepared, m, start, end, ready, replay, tolerance_us, cover, full_gpu)
        for w in waits:
            w.certainty = _wait_certainty(m, w, prepared)
    est = np.full(n_rep, np.nan)
    saving = np.full(n_rep, np.nan)
    filled = np.zeros(n_rep, dtype=bool)
    cost: dict[str, Any] = {}
    if estimate:
        cost = _estimate(prepared, m, start, end, replay, span, a, b, kind, pair, findings, waits, cover,
                         wait_pairs, est, saving, filled)
    if lane is Lane.STREAM:
        n_waited = np.bincount(replay[wait_pairs[0]], minlength=n_rep)
    else:
        fb = b[kind == 1]
        n_waited = np.bincount(replay[fb][_waited(fb, ready, start, end, replay, cover, tolerance_us)],
                               minlength=n_rep)
    if lane is Lane.STREAM:
        cost["full_gpu_waits"] = full_gpu[0]  # waits for room on a full GPU (not behind a serialization)
        cost["full_gpu_wait_us"] = round(full_gpu[1], 3)
    stats = {
        "graph_id": m.graph[rfirst][o], "device": dev[rfirst][o], "correlation": corr[rfirst][o],
        "events": counts_ev[o], "span_us": np.round(span[o], 3), "critical_path_us": np.round(crit[o], 3),
        "true": n_true[o], "fake": n_fake[o], "fake_wait_us": np.round(fake_wait[o], 3), "undecided": n_und[o],
        "waited": n_waited[o],
        "estimated_span_us": np.round(est[o], 3), "saving_us": np.round(saving[o], 3), "filled": filled[o],
    }
    res = DepsResult(lane, match, tolerance_us, findings, stats, waits, sorted(prepared), notes,
                     non_graph_events=m.other, match_groups=_group_summary(m), cost=cost,
                     critical_path_us=round(float(np.median(np.concatenate(crit_all))), 3) if crit_all else None,
                     critical_paths=crit_paths)
    res.suggestions = _suggest(res, trace, prepared)
    return res


_KINDS = (DepKind.TRUE, DepKind.FAKE, DepKind.UNDECIDED)
_CERTS = (Certainty.EXACT, Certainty.UNIQUE, Certainty.INVARIANT, Certainty.UNDECIDED)


def _prepare(graphs: Sequence[GraphData]) -> dict[int, _G]:
    prepared: dict[int, _G] = {}
    for g in graphs:
        if g.exec_graph_id in prepared:
            raise InvalidInputError(
                f"Two graph exports have exec graph id {g.exec_graph_id} ({prepared[g.exec_graph_id].g.source} "
                f"and {g.source}); ids are unique per process, so these come from different runs. "
                "Pass the exports written with this trace."
            )
        prepared[g.exec_graph_id] = _G(g)
    return prepared


def _replay_matrix(n: int, local: np.ndarray, node: np.ndarray, start: np.ndarray, end: np.ndarray,
                   n_rep: int) -> tuple[np.ndarray, np.ndarray]:
    """[replays, nodes] start and end times (NaN where a node has no event in a replay)."""
    S = np.full((n_rep, n), np.nan)
    E = np.full((n_rep, n), np.nan)
    S[local, node] = start
    E[local, node] = end
    return S, E


def _readiness(pg: _G, S: np.ndarray, E: np.ndarray, t0: np.ndarray) -> np.ndarray:
    """When each node became ready: its graph predecessors' end (through untraced nodes), or t0."""
    R = np.empty_like(S)
    F = np.empty_like(S)
    traced = ~np.isnan(E)
    nodes = pg.g.nodes
    for v in pg.order:
        deps = nodes[v].dependencies
        if deps:
            d = list(deps)
            R[:, v] = F[:, d].max(axis=1) if len(d) > 1 else F[:, d[0]]
        else:
            R[:, v] = t0
        F[:, v] = np.where(traced[:, v], E[:, v], R[:, v])
    return R


def measured_critical_path(g: GraphData, order: Sequence[int], S: np.ndarray, E: np.ndarray) -> costmod.CriticalPath:
    """The measured critical path of replays given as [replays, nodes] start/end arrays (NaN: no
    event): the one definition that ``deps``, ``topo --trace`` and ``dot --trace`` report."""
    dur = np.where(np.isnan(E), 0.0, E - S)
    return costmod.critical_path([n.dependencies for n in g.nodes], order, dur)


def graph_events(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(event indices, node indices) of ``g``'s work in ``trace``: by node ids when the trace has
    them, else by the inferred match (its first consistent assignment)."""
    if trace.has_graph_ids:
        return match_graph_events(trace, g)
    m, _ = _inferred_match(trace, {g.exec_graph_id: _G(g)}, tolerance_us)
    return m.ev, m.node


def replay_times(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> tuple[np.ndarray, np.ndarray]:
    """[replays, nodes] start and end times of ``g``'s replays in ``trace`` (NaN: no event)."""
    ev, node = graph_events(trace, g, tolerance_us=tolerance_us)
    replay, rfirst = _dense(trace.device[ev], trace.correlation[ev])
    return _replay_matrix(len(g.nodes), replay, node, trace.start[ev], trace.end[ev], len(rfirst))


def measured_path(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> costmod.CriticalPath:
    """The measured critical path of ``g``'s replays in ``trace`` (see ``measured_critical_path``)."""
    starts, ends = replay_times(trace, g, tolerance_us=tolerance_us)
    return measured_critical_path(g, topological_order(g), starts, ends)


def node_lanes(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> dict[int, str]:
    """The lane (channel, or stream without channel data) each node of ``g`` ran on first in
    ``trace``, with node ids or by the inferred match."""
    ev, node = graph_events(trace, g, tolerance_us=tolerance_us)
    lanes: dict[int, str] = {}
    for i, nd in zip(ev.tolist(), node.tolist()):
        if nd not in lanes:
            c = int(trace.channel[i])
            lanes[nd] = f"channel {c}" if c >= 0 else f"stream {int(trace.stream[i])}"
    return lanes


def _certainty(m: _Matched, prepared: dict[int, _G], a: np.ndarray, b: np.ndarray,
               kind_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per serialization: index into _CERTS, and the number of consistent assignments."""
    cert = np.zeros(len(b), np.int64)
    n_assign = np.ones(len(b), np.int64)
    if m.group is None or m.slot is None:
        return cert, n_assign
    gb = m.group[b]
    for k, lg in enumerate(m.groups):
        sel = np.flatnonzero(gb == k)
        if not len(sel):
            continue
        n_assign[sel] = min(lg.assignments, 2**62)
        if lg.certainty is Certainty.UNIQUE:
            cert[sel] = 1
            continue
        sols = lg.solutions
        reach = prepared[lg.graph_id].reach
        sa, sb = m.slot[a[sel]], m.slot[b[sel]]
        verdicts = reach.reachable_many(sols[:, sa], sols[:, sb])  # [solutions, serializations]
        same = (verdicts == verdicts[:1]).all(axis=0)
        cert[sel] = np.where(same, 2, 3)
    return cert, n_assign


def _wait_certainty(m: _Matched, w: InferredWait, prepared: dict[int, _G]) -> str:
    if m.group is None:
        return Certainty.EXACT.value
    gs = [lg for lg in m.groups if lg.graph_id == w.graph_id]
    if all(lg.certainty is Certainty.UNIQUE for lg in gs):
        return Certainty.UNIQUE.value
    # Several assignments: interchangeable chains keep every wait as it is; other alternatives may not.
    return Certainty.INVARIANT.value if all(len(lg.solutions) == 1 for lg in gs) else Certainty.UNDECIDED.value


def _group_summary(m: _Matched) -> list[dict[str, Any]]:
    return [{"graph_id": lg.graph_id, "replays": len(lg.correlations), "events_per_replay": int(lg.events.shape[0]),
             "assignments": lg.assignments, "complete": lg.complete}
            for lg in m.groups]


#: Re-scheduling is Python work per replay: at most this many replays (evenly spaced) and findings.
ESTIMATE_REPLAYS = 32
ESTIMATE_FINDINGS = 20


def _estimate(prepared: dict[int, _G], m: _Matched, start: np.ndarray, end: np.ndarray, replay: np.ndarray,
              span: np.ndarray, a: np.ndarray, b: np.ndarray, kind: np.ndarray, pair: np.ndarray,
              findings: list[Finding], waits: list[InferredWait], cover: np.ndarray,
              wait_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], est: np.ndarray, saving: np.ndarray,
              filled: np.ndarray) -> dict[str, Any]:
    """Re-schedule sampled replays with and without fake serializations (cgtool.inspect.cost)."""
    n_rep = len(span)
    if n_rep == 0:
        return {}
    # Serializations that order events: true and fake lane pairs, and (streams) inferred waits.
    # Each is tagged with the finding it belongs to (fake ones) or -1 (true: implied by the graph).
    n_find = len(findings)
    w_b, w_a, w_id = wait_pairs
    fake_tag = np.where(kind == 1, pair, -1) if len(b) else np.zeros(0, np.int64)
    undecided_tag = kind == 2
    all_b = np.concatenate([b, w_b])
    all_a = np.concatenate([a, w_a])
    all_tag = np.concatenate([np.where(undecided_tag, -1, fake_tag), w_id + n_find])
    pick = np.unique(np.linspace(0, n_rep - 1, min(n_rep, ESTIMATE_REPLAYS)).round().astype(np.int64))
    in_pick = np.isin(replay[all_b], pick)
    by_b: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for bb, aa, tt in zip(all_b[in_pick].tolist(), all_a[in_pick].tolist(), all_tag[in_pick].tolist()):
        by_b[bb].append((aa, tt))
    order = np.lexsort((end, start, replay))
    bounds = np.searchsorted(replay[order], np.arange(n_rep + 1))
    # Candidates for per-finding estimates: the fake findings and waits that waited longest.
    fake_ids = sorted((k for k, f in enumerate(findings) if f.kind is DepKind.FAKE),
                      key=lambda k: -findings[k].wait_us)[:ESTIMATE_FINDINGS]
    wait_ids = sorted(range(len(waits)), key=lambda k: -waits[k].wait_us)[:ESTIMATE_FINDINGS]
    tags = fake_ids + [n_find + k for k in wait_ids]
    per_tag: dict[int, list[float]] = defaultdict(list)
    sm_unknown = False
    for r in pick.tolist():
        pos = order[bounds[r]:bounds[r + 1]]
        if not len(pos):
            continue
        gid = int(m.graph[pos[0]])
        pg = prepared[gid]
        model = pg.model
        where = {int(p): k for k, p in enumerate(pos.tolist())}
        node_pos = {int(m.node[p]): k for k, p in enumerate(pos.tolist())}
        dur = (end[pos] - start[pos]).tolist()
        gpreds = [[node_pos[u] for u in model.preds.get(int(m.node[p]), ()) if u in node_pos] for p in pos.tolist()]
        lpreds = [[(where[aa], tt) for aa, tt in by_b.get(int(p), ()) if aa in where] for p in pos.tolist()]
        cv = cover[pos]
        area = None
        if np.isnan(cv).any():
            sm_unknown = True
        else:
            area = costmod.gpu_area(start[pos].tolist(), end[pos].tolist(), cv.tolist())
        rm = costmod.ReplayModel(dur, gpreds, lpreds, area, float(span[r]))
        with_all = rm.span()
        est[r] = with_all
        saving[r] = max(0.0, with_all - rm.span(drop_all=True))
        filled[r] = rm.filled
        present = {tt for lp in lpreds for _, tt in lp}
        for t in tags:
            if t in present:
                per_tag[t].append(max(0.0, with_all - rm.span(drop=t)))
    for t, vals in per_tag.items():
        if t < n_find:
            findings[t].saving_us = float(np.mean(vals))
        else:
            waits[t - n_find].saving_us = float(np.mean(vals))
    done = ~np.isnan(saving)
    mean_span = float(span[done].mean()) if done.any() else 0.0
    mean_saving = float(saving[done].mean()) if done.any() else 0.0
    return {
        "replays_estimated": int(done.sum()),
        "estimated_span_us": round(float(est[done].mean()), 3) if done.any() else None,
        "saving_us": round(mean_saving, 3),
        "saving_share": round(mean_saving / mean_span, 4) if mean_span else None,
        "filled_replays": int(filled[done].sum()),
        "gpu_filled": bool(done.any() and filled[done].mean() >= 0.5),
        "area_known": not sm_unknown,
    }


def _latest_before(start: np.ndarray, end: np.ndarray, group: np.ndarray, tol: float) -> np.ndarray:
    """For each item B: the item A of the same group that ended last with A.end <= B.start + tol
    and A.start < B.start (ties on the end: the one that started last); -1 where none."""
    n = len(start)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    base = float(start.min())
    s_ns = np.rint((start - base) * 1000).astype(np.int64)
    e_ns = np.rint((end - base) * 1000).astype(np.int64)
    tol_ns = int(round(tol * 1000))
    width = int(max(e_ns.max(), s_ns.max())) + tol_ns + 2
    order = np.lexsort((s_ns, e_ns, group))
    if (int(group.max()) + 1) * width >= 2**62:  # pragma: no cover - would need years of trace
        raise InvalidInputError("The trace spans too long a time to analyse in one piece; split it.")
    key = group[order] * width + e_ns[order]
    query = group * width + s_ns + tol_ns
    k = np.searchsorted(key, query, side="right") - 1
    idx = np.arange(n)
    todo = idx
    while len(todo):
        kk = k[todo]
        ok_k = kk >= 0
        cand = np.where(ok_k, order[np.maximum(kk, 0)], 0)
        same = ok_k & (group[cand] == group[todo])
        good = same & (cand != todo) & (s_ns[cand] < s_ns[todo])
        out[todo[good]] = cand[good]
        retry = same & ~good
        k[todo[retry]] -= 1
        todo = todo[retry]
    return out


_Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _coverage(prepared: dict[int, _G], m: _Matched) -> np.ndarray:
    """Per matched event: the share of the GPU its kernel covers, min(1, blocks / SMs); 0 for
    copies and fills; NaN where the export lacks the grid or the SM count."""
    cover = np.full(len(m.ev), np.nan)
    for gid, pg in prepared.items():
        sm = (pg.g.meta.get("environment") or {}).get("sm_count")
        if not isinstance(sm, int) or sm <= 0:
            continue
        per_node = np.full(len(pg.g.nodes), np.nan)
        for nd in pg.g.nodes:
            grid = pg.g.node_extra(nd.index).get("grid")
            if nd.node_type is not NodeType.KERNEL:
                per_node[nd.index] = 0.0
            elif isinstance(grid, list) and grid:
                per_node[nd.index] = min(1.0, float(np.prod(grid)) / sm)
        sel = m.graph == gid
        cover[sel] = per_node[m.node[sel]]
    return cover


def _waited(b: np.ndarray, ready: np.ndarray, start: np.ndarray, end: np.ndarray, replay: np.ndarray,
            cover: np.ndarray, tol: float) -> np.ndarray:
    """Of the events at positions ``b``: which sat ready longer than the tolerance (and 1 µs)
    while the GPU had room (the other kernels running covered at most the whole GPU, on average;
    replays with a kernel of unknown cover count as having room), from ``costmod.mean_cover_many``."""
    late: np.ndarray = np.asarray(start[b] - ready[b] > max(tol, 1.0))
    if not late.any():
        return late
    known = np.ones(int(replay.max()) + 1, dtype=bool)
    known[replay[np.isnan(cover)]] = False
    q = b[late]
    mean = costmod.mean_cover_many(ready[q], start[q], replay[q], start, end, np.nan_to_num(cover), replay)
    full = known[replay[q]] & (mean > 1.0)
    late[np.flatnonzero(late)[full]] = False
    return late


def _inferred_waits(prepared: dict[int, _G], m: _Matched, start: np.ndarray, end: np.ndarray, ready: np.ndarray,
                    replay: np.ndarray, tol: float, cover: np.ndarray,
                    full_gpu: list[Any]) -> tuple[list[InferredWait], _Pairs]:
    """Without channel data: B started later than its predecessors allowed; name the unrelated
    item (no path to B) that ended last before B started, while B was waiting. A wait during
    which the other kernels running covered more than the whole GPU (``cover`` summed over the
    wait, on average) is a wait for room on the GPU, not behind a serialization: it is only
    counted in ``full_gpu`` ([count, total µs]). Also returns the occurrences: (positions of B,
    positions of A, index of their InferredWait).

    Vectorized over the late items (every step as in a loop over them, in the same order, so the
    sums round the same): per item, a walk back through its replay's items by end time."""
    late = np.flatnonzero(start - ready > max(tol, 1.0))
    empty = np.zeros(0, np.int64)
    if not len(late):
        return [], (empty, empty, empty)
    order = np.lexsort((start, end, replay))
    rep_sorted, end_sorted = replay[order], end[order]
    bounds = np.searchsorted(rep_sorted, np.arange(int(replay.max()) + 2))
    r = replay[late]
    lo = bounds[r]
    # k: the last position (in ``order``) of B's replay whose item ended by B's start + tol. One
    # merged sort of items and queries (items first among equal times, as searchsorted "right").
    q = start[late] + tol
    merged = np.lexsort((np.r_[np.zeros(len(order), np.int8), np.ones(len(late), np.int8)],
                         np.r_[end_sorted, q], np.r_[rep_sorted, r]))
    is_q = merged >= len(order)
    qpos = np.flatnonzero(is_q)
    k = np.empty(len(late), np.int64)
    k[merged[qpos] - len(order)] = qpos - np.arange(len(qpos)) - 1
    found = np.full(len(late), -1, np.int64)
    active = np.arange(len(late))
    graph, node = m.graph, m.node
    while len(active):
        ka = k[active]
        inside = ka >= lo[active]
        ai = order[np.where(inside, ka, 0)]
        bi = late[active]
        done = ~inside | (end[ai] <= ready[bi])
        cand = ~done & (ai != bi) & (start[ai] < start[bi])
        related = np.zeros(len(active), bool)
        for gid, pg in prepared.items():
            sel = np.flatnonzero(cand & (graph[bi] == gid))
            if len(sel):
                related[sel] = pg.reach.reachable_many(node[ai[sel]], node[bi[sel]])
        hit = cand & ~related
        found[active[hit]] = ai[hit]
        go = ~done & ~hit
        k[active[go]] -= 1
        active = active[go]
    f = np.flatnonzero(found >= 0)
    qb, qa = late[f], found[f]
    full = _gpu_was_full_many(qb, order, bounds, replay, ready, start, end, cover)
    waited = (start[qb[full]] - ready[qb[full]]).tolist()
    full_gpu[0] += len(waited)
    full_gpu[1] = functools.reduce(operator.add, waited, full_gpu[1])  # one at a time, in order (as a loop adds)
    kb, ka_ = qb[~full], qa[~full]
    if not len(kb):
        return [], (empty, empty, empty)
    gcode = np.searchsorted(np.array(sorted(prepared), dtype=np.int64), graph[kb])
    key, first = _dense(gcode, node[kb], node[ka_])
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # ids in order of first occurrence
    key = rank[key]
    first = np.sort(first)
    counts = np.bincount(key, minlength=len(first))
    total = np.bincount(key, weights=start[kb] - ready[kb], minlength=len(first))
    waits = []
    for j, c, t in zip(first.tolist(), counts.tolist(), total.tolist()):
        gid = int(graph[kb[j]])
        pg = prepared[gid]
        nb, na = int(node[kb[j]]), int(node[ka_[j]])
        waits.append(InferredWait(gid, pg.g.nodes[nb].tools_id, pg.g.nodes[na].tools_id, count=c, wait_us=t,
                                  after_name=pg.name(nb), behind_name=pg.name(na)))
    by_wait = sorted(range(len(waits)), key=lambda i: -waits[i].wait_us)
    index = np.empty(len(waits), np.int64)
    index[by_wait] = np.arange(len(waits))
    return [waits[i] for i in by_wait], (kb, ka_, index[key])


def _gpu_was_full_many(b: np.ndarray, order: np.ndarray, bounds: np.ndarray, replay: np.ndarray, ready: np.ndarray,
                       start: np.ndarray, end: np.ndarray, cover: np.ndarray) -> np.ndarray:
    """``_gpu_was_full`` for the items at positions ``b``: the same sums, term by term in the
    same order (the items of each replay in ``order``), over all of them at once."""
    out = np.zeros(len(b), bool)
    if not len(b):
        return out
    r = replay[b]
    nan_rep = np.zeros(len(bounds), bool)
    nan_rep[replay[np.isnan(cover)]] = True
    ok = ~nan_rep[r]  # a replay with a kernel of unknown cover: not full
    q = np.flatnonzero(ok)
    if not len(q):
        return out
    # The queries by decreasing replay size: those still live at step j are a prefix (slices, not
    # gathers). Each query's terms are still added one at a time in the order of its replay's items.
    n_all = bounds[r[q] + 1] - bounds[r[q]]
    q = q[np.argsort(-n_all, kind="stable")]
    bq, rq = b[q], r[q]
    lo, n = bounds[rq], bounds[rq + 1] - bounds[rq]
    t_lo, t_hi = ready[bq], start[bq]
    tot = np.zeros(len(q))
    live = len(q)
    for j in range(int(n[0])):
        while n[live - 1] <= j:
            live -= 1
        item = order[lo[:live] + j]
        ov = np.minimum(end[item], t_hi[:live])
        ov -= np.maximum(start[item], t_lo[:live])
        add = (ov > 0) & (item != bq[:live])
        ov *= cover[item]  # the term (cover times overlap), added where it counts: x + 0.0 is x
        tot[:live] += np.where(add, ov, 0.0)
    out[q] = tot / (t_hi - t_lo) > 1.0
    return out


def _suggest(res: DepsResult, trace: Trace, graphs: dict[int, _G]) -> list[str]:
    """Advice, only where the estimated saving is a meaningful share of the span."""
    out: list[str] = []
    if res.n_fake == 0 and not res.inferred_waits:
        return out
    c = res.cost
    share = c.get("saving_share")
    spans = res.replay_table["span_us"]
    mean_span = float(spans.mean()) if len(spans) else 0.0
    if share is not None and share < costmod.MEANINGFUL_SHARE:
        why = (" The concurrent work already filled the GPU (the kernels' SM time is close to the span)."
               if c.get("gpu_filled") else "")
        res.notes.append(
            f"Re-scheduled without the fake serializations, the replays would be an estimated "
            f"{c.get('saving_us', 0.0):.1f} µs shorter ({100 * share:.1f}% of the {mean_span:.1f} µs span): "
            f"the waits did not cost the replay much, and no change is suggested.{why}")
        return out
    if share is not None:
        res.notes.append(f"Re-scheduled without the fake serializations, the replays would be an estimated "
                         f"{c['saving_us']:.1f} µs shorter ({100 * share:.1f}% of the {mean_span:.1f} µs span).")
    env = (trace.cgtool or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    chans = {int(ch) for ch in np.unique(trace.channel) if ch >= 0}
    try:
        limit = int(env) if env is not None else None
    except (TypeError, ValueError):  # a trace's metadata is input: a word here is not a limit
        limit = None
    if res.lane is Lane.CHANNEL:
        if limit is not None and chans and len(chans) <= limit:
            out.append(
                f"CUDA_DEVICE_MAX_CONNECTIONS={limit} limits the GPU to {plural(limit, 'hardware channel')} and "
                f"the trace used {len(chans)}: independent branches share a channel. Unset it or "
                "raise it to at least the graph's width (see `cgtool topo`), up to 32."
            )
        else:
            out.append(
                f"Independent work shared {plural(len(chans), 'hardware channel')}. Raising "
                "CUDA_DEVICE_MAX_CONNECTIONS (default 8, up to 32) gives the executor more channels."
            )
    elif res.n_fake:
        out.append(
            "Independent work ran one after another on the same stream. Capture independent "
            "branches on separate streams (fork with wait_stream) so the graph has no edge between them."
        )
    else:
        out.append(
            "Ready branches waited behind unrelated work (the trace has no channel data to say why). "
            "Check CUDA_DEVICE_MAX_CONNECTIONS (unset: 8 channels), or record with `cgtool trace` to see channels."
        )
    out.append(
        "If a fake dependency delays the critical path, issue critical-path work first or on a "
        "higher-priority stream (torch.cuda.Stream(priority=-1)) during capture."
    )
    return out


def compare_traces(a: DepsResult, b: DepsResult, name_a: str = "a", name_b: str = "b") -> dict[str, Any]:
    """Judge two traces of the same graph (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1 and default) by
    measured span per replay: medians, spreads (IQR), and whether B is faster, slower or the same
    within the spread. Also sets A's estimated saving against the measured difference."""
    ea, eb = sorted(set(a.replay_table["events"].tolist())), sorted(set(b.replay_table["events"].tolist()))
    if ea != eb:
        raise InvalidInputError(
            f"{name_a} and {name_b} are not traces of the same graph: their replays have {ea} and {eb} GPU "
            "events. --compare judges two traces of one graph (e.g. two CUDA_DEVICE_MAX_CONNECTIONS settings)."
        )
    out = costmod.compare_spans(a.replay_table["span_us"], b.replay_table["span_us"])
    out["a"]["trace"], out["b"]["trace"] = name_a, name_b
    out["a"]["fake"], out["b"]["fake"] = a.n_fake, b.n_fake
    out["a"]["estimated_saving_us"] = a.cost.get("saving_us")
    out["b"]["estimated_saving_us"] = b.cost.get("saving_us")
    return out


def graphs_from_trace(trace: Trace) -> list[GraphData]:
    """The graph exports a cgtool trace embeds (empty for other traces)."""
    if not trace.cgtool:
        return []
    gs = trace.cgtool.get("graphs") or []
    if not isinstance(gs, list):
        raise InvalidInputError(f"{trace.source}: its cgtool.graphs should be a list.")
    return [GraphData.from_json(d, source=f"{trace.source} (embedded graph {k})") for k, d in enumerate(gs)]


