"""True and fake dependencies: every serialization a trace shows, classified against the graph.

Words (docs/architecture.md): in one replay, on one hardware channel (one stream when the trace has no
channel data), a *serialization* A→B is B starting at or after A's end (within ``tolerance_us``),
A being the item on that lane that ended last before B started (of items ending at the same
nanosecond, the one that started last). It is a **true** dependency when
B is reachable from A in the graph (through any node types) and a **fake** one otherwise:
independent work that the hardware ran one after the other.

Cost of a fake dependency: how long B sat ready — from the end of its last graph predecessor
(or the replay's start, for a root) to its own start. Per replay, the observed span is set
against the critical path through the graph with the measured durations (the lower bound).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Sequence

import numpy as np

from cgtool.errors import InvalidInputError
from cgtool.text import plural
from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.artifacts.names import demangle
from cgtool.inspect.reach import Reachability, topological_order
from cgtool.artifacts.trace import KINDS, Trace

DEFAULT_TOLERANCE_US = 0.5


class DepKind(str, Enum):
    """The two categories of an observed serialization."""

    TRUE = "true"  # B is reachable from A in the graph: the graph required the order
    FAKE = "fake"  # no path from A to B: the graph allowed overlap, the hardware serialized them


class Lane(str, Enum):
    """What a serialization is observed on."""

    CHANNEL = "channel"  # hardware channels (the trace records them: CUPTI, newer Kineto)
    STREAM = "stream"  # streams, when the trace has no channel data (torch.profiler on torch <= 2.12)


class MatchKind(str, Enum):
    """How the trace's events were matched to graph nodes."""

    EXACT = "exact"  # graph node ids in the trace
    INFERRED = "inferred"  # by launch, kernel name and order


@dataclass(frozen=True)
class DepsSummary:
    """The headline figures of a ``DepsResult`` (also its JSON ``summary``)."""

    true: int
    fake: int
    distinct_true: int
    distinct_fake: int
    fake_cost_us: float
    replays: int
    graphs: list[int]
    lane: Lane
    match: MatchKind
    tolerance_us: float
    mean_span_us: float | None
    mean_critical_path_us: float | None
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
    cost_us: float = 0.0  # total time B sat ready, over all occurrences (fake ones)
    before_name: str = ""
    after_name: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["gap_us"] = round(self.gap_us, 3)
        d["cost_us"] = round(self.cost_us, 3)
        d["mean_cost_us"] = round(self.cost_us / self.count, 3) if self.count else 0.0
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

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["wait_us"] = round(self.wait_us, 3)
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
    fake_cost_us: float = 0.0


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

    @functools.cached_property
    def replays(self) -> list[ReplayStat]:
        """Per-replay statistics (built on first use: a trace may hold 100,000s of replays)."""
        t = self.replay_table
        cols = [t[f].tolist() for f in ("graph_id", "device", "correlation", "events", "span_us",
                                        "critical_path_us", "true", "fake", "fake_cost_us")]
        return [ReplayStat(*row) for row in zip(*cols)]

    @property
    def n_true(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.TRUE)

    @property
    def n_fake(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.FAKE)

    def fakes(self) -> list[Finding]:
        return sorted((f for f in self.findings if f.kind is DepKind.FAKE),
                      key=lambda f: (-f.cost_us, -f.count, f.before, f.after))

    def summary(self) -> DepsSummary:
        spans = self.replay_table["span_us"]
        crit = self.replay_table["critical_path_us"]
        return DepsSummary(
            true=self.n_true, fake=self.n_fake,
            distinct_true=sum(1 for f in self.findings if f.kind is DepKind.TRUE),
            distinct_fake=sum(1 for f in self.findings if f.kind is DepKind.FAKE),
            fake_cost_us=round(sum(f.cost_us for f in self.findings if f.kind is DepKind.FAKE), 3),
            replays=int(len(spans)), graphs=self.graphs, lane=self.lane, match=self.match,
            tolerance_us=self.tolerance_us,
            mean_span_us=round(float(spans.mean()), 3) if len(spans) else None,
            mean_critical_path_us=round(float(crit.mean()), 3) if len(crit) else None,
            non_graph_events=self.non_graph_events,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "summary": self.summary().to_json(),
            "serializations": [f.to_json() for f in sorted(
                self.findings, key=lambda f: (f.kind is not DepKind.FAKE, -f.cost_us, f.before, f.after))],
            "inferred_waits": [w.to_json() for w in self.inferred_waits],
            "replays": [asdict(r) for r in self.replays],
            "notes": self.notes,
            "suggestions": self.suggestions,
        }


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
    node: np.ndarray  # node index within its graph
    graph: np.ndarray  # exec graph id
    other: int  # GPU events outside any graph


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


def _inferred_match(trace: Trace, graphs: dict[int, _G]) -> tuple[_Matched, list[str]]:
    """Kineto traces without graph ids: a replay is the GPU work of one cudaGraphLaunch's
    correlation id; events are matched to nodes by kind/name and, among nodes of one name, by
    start order, which is only sound when those nodes are totally ordered in the graph."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    other = 0
    launches = trace.launches
    corr, dev = trace.correlation.tolist(), trace.device.tolist()
    for i in range(len(trace)):
        if corr[i] in launches:
            groups[(dev[i], corr[i])].append(i)
        else:
            other += 1
    if not groups:
        raise InvalidInputError(
            f"{trace.source} has no graph work: no GPU event carries a graph id and none belongs to "
            "a cudaGraphLaunch. Profile the graph replays (`cgtool trace`), not eager work."
        )
    sigs: dict[int, Counter[tuple[str, str]]] = {}
    by_key: dict[int, dict[tuple[str, str], list[int]]] = {}
    for gid, pg in graphs.items():
        bk: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i in pg.order:
            if pg.g.nodes[i].node_type.runs_on_gpu:
                bk[_key_node(pg.g, i)].append(i)
        by_key[gid] = bk
        sigs[gid] = Counter({k: len(v) for k, v in bk.items()})
    keys = [_key_event(KINDS[k], trace.names[n]) for k, n in zip(trace.kind.tolist(), trace.name.tolist())]
    start = trace.start.tolist()
    evs: list[int] = []
    nodes: list[int] = []
    gids: list[int] = []
    checked: set[tuple[int, tuple[str, str]]] = set()
    for (_, c), idx in groups.items():
        sig = Counter(keys[i] for i in idx)
        match = [gid for gid, s_ in sigs.items() if s_ == sig]
        if not match:
            raise InvalidInputError(
                f"{trace.source}: the {len(idx)} GPU events of graph launch (correlation {c}) match "
                f"no given graph by kernel names and counts (graphs: {sorted(graphs)}). The trace has "
                "no graph node ids, so cgtool matches by name: pass the export of the graph that "
                "was replayed (--graph), from the same capture."
            )
        if len(match) > 1:
            raise InvalidInputError(
                f"{trace.source}: graph launch (correlation {c}) matches several graphs "
                f"{match} equally; without graph ids in the trace the match is ambiguous. Pass only "
                "the graph that was replayed, or record with `cgtool trace` (it writes node ids)."
            )
        gid = match[0]
        pg = graphs[gid]
        bucket: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i in sorted(idx, key=lambda i: (start[i], int(trace.seq[i]))):
            bucket[keys[i]].append(i)
        for key, es in bucket.items():
            nds = by_key[gid][key]
            if len(nds) > 1 and (gid, key) not in checked:
                for a, b in zip(nds, nds[1:]):
                    if not pg.reach.reachable(a, b):
                        raise InvalidInputError(
                            f"{trace.source}: the match is ambiguous. The trace has no graph node ids, "
                            f"and graph {gid} has {len(nds)} nodes named {key[1] or key[0]!r} "
                            f"(e.g. indices {a} and {b}) that may run in either order, so their events "
                            "cannot be told apart by name and order. Record the trace with "
                            "`cgtool trace` or a PyTorch whose profiler writes 'graph node id'."
                        )
                checked.add((gid, key))
            evs += es
            nodes += nds
            gids += [gid] * len(es)
    notes = ["Events were matched to graph nodes by launch, kernel name and order (the trace has no "
             "graph node ids): the match is inferred."]
    return _Matched(np.array(evs, np.int64), np.array(nodes, np.int64), np.array(gids, np.int64), other), notes


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
def analyze(trace: Trace, graphs: Sequence[GraphData], *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> DepsResult:
    """Classify every serialization in ``trace`` against ``graphs``."""
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
    prepared: dict[int, _G] = {}
    for g in graphs:
        if g.exec_graph_id in prepared:
            raise InvalidInputError(
                f"Two graph exports have exec graph id {g.exec_graph_id} ({prepared[g.exec_graph_id].g.source} "
                f"and {g.source}); ids are unique per process, so these come from different runs. "
                "Pass the exports written with this trace."
            )
        prepared[g.exec_graph_id] = _G(g)
    notes: list[str] = []
    if trace.has_graph_ids:
        m = _exact_match(trace, prepared)
        match = MatchKind.EXACT
    else:
        m, notes = _inferred_match(trace, prepared)
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
    for gid, pg in prepared.items():
        sel = np.flatnonzero(m.graph == gid)
        if not len(sel):
            continue
        reps, local = np.unique(replay[sel], return_inverse=True)
        local = local.reshape(-1)
        n = len(pg.g.nodes)
        S = np.full((len(reps), n), np.nan)
        E = np.full((len(reps), n), np.nan)
        S[local, m.node[sel]] = start[sel]
        E[local, m.node[sel]] = end[sel]
        t0 = np.nanmin(S, axis=1)
        span[reps] = np.nanmax(E, axis=1) - t0
        R = np.empty_like(S)
        F = np.empty_like(S)
        L = np.empty_like(S)
        traced = ~np.isnan(E)
        dur = np.where(traced, E - S, 0.0)
        nodes = pg.g.nodes
        for v in pg.order:
            deps = nodes[v].dependencies
            if deps:
                d = list(deps)
                R[:, v] = F[:, d].max(axis=1) if len(d) > 1 else F[:, d[0]]
                L[:, v] = dur[:, v] + (L[:, d].max(axis=1) if len(d) > 1 else L[:, d[0]])
            else:
                R[:, v] = t0
                L[:, v] = dur[:, v]
            F[:, v] = np.where(traced[:, v], E[:, v], R[:, v])
        crit[reps] = L.max(axis=1) if n else 0.0
        ready[sel] = R[local, m.node[sel]]

    a_of = _latest_before(start, end, replay * (int(lane_id.max()) + 1) + lane_id, tolerance_us)
    b = np.flatnonzero(a_of >= 0)
    a = a_of[b]
    kind_true = np.zeros(len(b), dtype=bool)
    for gid, pg in prepared.items():
        mm = m.graph[b] == gid
        if mm.any():
            kind_true[mm] = pg.reach.reachable_many(m.node[a[mm]], m.node[b[mm]])
    gap = start[b] - end[a]
    cost = np.where(kind_true, 0.0, np.maximum(0.0, start[b] - ready[b]))

    # Aggregate distinct pairs.
    gcode = np.searchsorted(np.array(sorted(prepared), dtype=np.int64), m.graph[b])
    pair, pfirst = _dense(gcode, m.node[a], m.node[b])
    counts = np.bincount(pair, minlength=len(pfirst)) if len(b) else np.zeros(0, np.int64)
    gaps = np.bincount(pair, weights=gap, minlength=len(pfirst)) if len(b) else np.zeros(0)
    costs = np.bincount(pair, weights=cost, minlength=len(pfirst)) if len(b) else np.zeros(0)
    findings: list[Finding] = []
    chan = trace.channel[ev]
    stream = trace.stream[ev]
    for k, j in enumerate(pfirst.tolist()):
        gid = int(m.graph[b[j]])
        pg = prepared[gid]
        na, nb = int(m.node[a[j]]), int(m.node[b[j]])
        c = int(chan[b[j]])
        findings.append(Finding(
            gid, pg.g.nodes[na].tools_id, pg.g.nodes[nb].tools_id,
            DepKind.TRUE if kind_true[j] else DepKind.FAKE,
            None if c < 0 else c, int(stream[b[j]]), int(counts[k]),
            float(gaps[k] / counts[k]), float(costs[k]), pg.name(na), pg.name(nb)))
    n_true = np.bincount(replay[b][kind_true], minlength=n_rep)
    n_fake = np.bincount(replay[b][~kind_true], minlength=n_rep)
    fake_cost = np.bincount(replay[b], weights=cost, minlength=n_rep)
    counts_ev = np.bincount(replay, minlength=n_rep)
    t_first = np.full(n_rep, np.inf)
    np.minimum.at(t_first, replay, start)
    o = np.argsort(t_first, kind="stable")
    stats = {
        "graph_id": m.graph[rfirst][o], "device": dev[rfirst][o], "correlation": corr[rfirst][o],
        "events": counts_ev[o], "span_us": np.round(span[o], 3), "critical_path_us": np.round(crit[o], 3),
        "true": n_true[o], "fake": n_fake[o], "fake_cost_us": np.round(fake_cost[o], 3),
    }
    waits: list[InferredWait] = []
    if lane is Lane.STREAM:
        waits = _inferred_waits(prepared, m, start, end, ready, replay, tolerance_us)
    res = DepsResult(lane, match, tolerance_us, findings, stats, waits, sorted(prepared), notes, non_graph_events=m.other)
    res.suggestions = _suggest(res, trace, prepared)
    return res


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


def _inferred_waits(prepared: dict[int, _G], m: _Matched, start: np.ndarray, end: np.ndarray, ready: np.ndarray,
                    replay: np.ndarray, tol: float) -> list[InferredWait]:
    """Without channel data: B started later than its predecessors allowed; name the unrelated
    item (no path to B) that ended last before B started, while B was waiting."""
    late = np.flatnonzero(start - ready > max(tol, 1.0))
    if not len(late):
        return []
    order = np.lexsort((start, end, replay))
    rep_sorted, end_sorted = replay[order], end[order]
    waits: dict[tuple[int, int, int], InferredWait] = {}
    for bi in late.tolist():
        r = replay[bi]
        lo = int(np.searchsorted(rep_sorted, r, side="left"))
        hi = int(np.searchsorted(rep_sorted, r, side="right"))
        k = lo + int(np.searchsorted(end_sorted[lo:hi], start[bi] + tol, side="right")) - 1
        gid = int(m.graph[bi])
        pg = prepared[gid]
        nb = int(m.node[bi])
        found = -1
        while k >= lo:
            ai = int(order[k])
            if end[ai] <= ready[bi]:
                break
            if ai != bi and start[ai] < start[bi] and not pg.reach.reachable(int(m.node[ai]), nb):
                found = ai
                break
            k -= 1
        if found < 0:
            continue
        na = int(m.node[found])
        key = (gid, pg.g.nodes[nb].tools_id, pg.g.nodes[na].tools_id)
        w = waits.get(key)
        if w is None:
            w = waits[key] = InferredWait(gid, key[1], key[2], after_name=pg.name(nb), behind_name=pg.name(na))
        w.count += 1
        w.wait_us += float(start[bi] - ready[bi])
    return sorted(waits.values(), key=lambda w: -w.wait_us)


def _suggest(res: DepsResult, trace: Trace, graphs: dict[int, _G]) -> list[str]:
    out: list[str] = []
    if res.n_fake == 0:
        return out
    env = (trace.cgtool or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    chans = {int(c) for c in np.unique(trace.channel) if c >= 0}
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
    else:
        out.append(
            "Independent work ran one after another on the same stream. Capture independent "
            "branches on separate streams (fork with wait_stream) so the graph has no edge between them."
        )
    out.append(
        "If a fake dependency delays the critical path, issue critical-path work first or on a "
        "higher-priority stream (torch.cuda.Stream(priority=-1)) during capture."
    )
    return out


def graphs_from_trace(trace: Trace) -> list[GraphData]:
    """The graph exports a cgtool trace embeds (empty for other traces)."""
    if not trace.cgtool:
        return []
    gs = trace.cgtool.get("graphs") or []
    if not isinstance(gs, list):
        raise InvalidInputError(f"{trace.source}: its cgtool.graphs should be a list.")
    return [GraphData.from_json(d, source=f"{trace.source} (embedded graph {k})") for k, d in enumerate(gs)]


