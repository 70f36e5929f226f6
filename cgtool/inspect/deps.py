"""True and fake dependencies: every serialization a trace shows, classified against the graph.

Words (DESIGN.md): in one replay, on one hardware channel (one stream when the trace has no
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

import bisect
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable, Sequence

from cgtool.errors import InvalidInputError
from cgtool.inspect.graph import GraphData, NodeType
from cgtool.inspect.names import demangle
from cgtool.inspect.reach import Reachability, topological_order
from cgtool.inspect.trace import GpuEvent, Trace

DEFAULT_TOLERANCE_US = 0.5


class DepKind(str, Enum):
    """The two categories of an observed serialization."""

    TRUE = "true"  # B is reachable from A in the graph: the graph required the order
    FAKE = "fake"  # no path from A to B: the graph allowed overlap, the hardware serialized them


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
    lane: str  # "channel" or "stream"
    match: str  # "exact" (node ids in the trace) or "inferred" (by launch, name and order)
    tolerance_us: float
    findings: list[Finding]
    replays: list[ReplayStat]
    inferred_waits: list[InferredWait]
    graphs: list[int]
    notes: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    non_graph_events: int = 0

    @property
    def n_true(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.TRUE)

    @property
    def n_fake(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.FAKE)

    def fakes(self) -> list[Finding]:
        return sorted((f for f in self.findings if f.kind is DepKind.FAKE),
                      key=lambda f: (-f.cost_us, -f.count, f.before, f.after))

    def to_json(self) -> dict[str, Any]:
        spans = [r.span_us for r in self.replays]
        crit = [r.critical_path_us for r in self.replays]
        return {
            "schema_version": 1,
            "summary": {
                "true": self.n_true,
                "fake": self.n_fake,
                "distinct_true": sum(1 for f in self.findings if f.kind is DepKind.TRUE),
                "distinct_fake": sum(1 for f in self.findings if f.kind is DepKind.FAKE),
                "fake_cost_us": round(sum(f.cost_us for f in self.findings if f.kind is DepKind.FAKE), 3),
                "replays": len(self.replays),
                "graphs": self.graphs,
                "lane": self.lane,
                "match": self.match,
                "tolerance_us": self.tolerance_us,
                "mean_span_us": round(sum(spans) / len(spans), 3) if spans else None,
                "mean_critical_path_us": round(sum(crit) / len(crit), 3) if crit else None,
                "non_graph_events": self.non_graph_events,
            },
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

    def name(self, index: int) -> str:
        return self.g.display_name(index)


# --------------------------------------------------------------------------- matching
Replay = tuple[int, int, int]  # (device, graph id, correlation)


def _exact_replays(trace: Trace, graphs: dict[int, _G]) -> tuple[dict[Replay, list[tuple[GpuEvent, int]]], int]:
    in_trace = sorted({e.graph_id for e in trace.events if e.graph_id is not None})
    unknown = [i for i in in_trace if i not in graphs]
    if unknown:
        raise InvalidInputError(
            f"{trace.source} holds graph work of exec graph id(s) {unknown}, but the graph "
            f"export(s) have exec graph id(s) {sorted(graphs)}. A trace and an export join only "
            "when they come from the same instantiation (re-instantiating makes a new id): pass "
            "the export written with this trace (`cgtool trace` embeds it), or record both again."
        )
    out: dict[Replay, list[tuple[GpuEvent, int]]] = defaultdict(list)
    other = 0
    checked: set[tuple[int, int]] = set()
    for e in trace.events:
        if e.graph_id is None:
            other += 1
            continue
        pg = graphs[e.graph_id]
        idx = pg.index.get(e.tools_id)  # type: ignore[arg-type]
        if idx is None:
            raise InvalidInputError(
                f"{trace.source}: event #{e.seq} ({e.name[:50]!r}) has graph node id {e.tools_id}, "
                f"which is not a node of exec graph {e.graph_id} in {pg.g.source}. The export does "
                "not match this trace: record both from the same instantiation."
            )
        if (e.graph_id, idx) not in checked:
            # Exec graph ids count up per process (the first graph of every process is 2 or so),
            # so equal ids do not prove that a trace and an export belong together: the node
            # must also be of the event's kind and, for kernels, have its name.
            if _key_node(pg.g, idx) != _key_event(e):
                raise InvalidInputError(
                    f"{trace.source}: event #{e.seq} is {e.kind} {demangle(e.name)[:60]!r}, but node "
                    f"{idx} of exec graph {e.graph_id} in {pg.g.source} is "
                    f"{pg.g.nodes[idx].node_type.value} {pg.name(idx)[:60]!r}. Exec graph ids are "
                    "counters per process, so this export comes from another run with the same id: "
                    "pass the export written with this trace (cgtool traces embed theirs)."
                )
            checked.add((e.graph_id, idx))
        out[(e.device, e.graph_id, e.correlation)].append((e, idx))
    return out, other


def _key_node(g: GraphData, i: int) -> tuple[str, str]:
    n = g.nodes[i]
    if n.node_type is NodeType.KERNEL:
        return ("kernel", demangle(n.kernel_name or ""))
    return (n.node_type.value, "")


def _key_event(e: GpuEvent) -> tuple[str, str]:
    return ("kernel", demangle(e.name)) if e.kind == "kernel" else (e.kind, "")


def _inferred_replays(trace: Trace, graphs: dict[int, _G]) -> tuple[dict[Replay, list[tuple[GpuEvent, int]]], int, list[str]]:
    """Kineto traces without graph ids: a replay is the GPU work of one cudaGraphLaunch's
    correlation id; events are matched to nodes by kind/name and, among nodes of one name, by
    start order, which is only sound when those nodes are totally ordered in the graph."""
    groups: dict[tuple[int, int], list[GpuEvent]] = defaultdict(list)
    other = 0
    for e in trace.events:
        if e.correlation in trace.launches:
            groups[(e.device, e.correlation)].append(e)
        else:
            other += 1
    if not groups:
        raise InvalidInputError(
            f"{trace.source} has no graph work: no GPU event carries a graph id and none belongs to "
            "a cudaGraphLaunch. Profile the graph replays (`cgtool trace`), not eager work."
        )
    # Per graph: multiset signature and, per key, nodes in topological order.
    sigs: dict[int, Counter[tuple[str, str]]] = {}
    by_key: dict[int, dict[tuple[str, str], list[int]]] = {}
    for gid, pg in graphs.items():
        bk: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i in pg.order:
            if pg.g.nodes[i].node_type.runs_on_gpu:
                bk[_key_node(pg.g, i)].append(i)
        by_key[gid] = bk
        sigs[gid] = Counter({k: len(v) for k, v in bk.items()})
    out: dict[Replay, list[tuple[GpuEvent, int]]] = {}
    checked: set[tuple[int, tuple[str, str]]] = set()
    for (dev, corr), evs in groups.items():
        sig = Counter(_key_event(e) for e in evs)
        match = [gid for gid, s in sigs.items() if s == sig]
        if not match:
            raise InvalidInputError(
                f"{trace.source}: the {len(evs)} GPU events of graph launch (correlation {corr}) match "
                f"no given graph by kernel names and counts (graphs: {sorted(graphs)}). The trace has "
                "no graph node ids, so cgtool matches by name: pass the export of the graph that "
                "was replayed (--graph), from the same capture."
            )
        if len(match) > 1:
            raise InvalidInputError(
                f"{trace.source}: graph launch (correlation {corr}) matches several graphs "
                f"{match} equally; without graph ids in the trace the match is ambiguous. Pass only "
                "the graph that was replayed, or record with `cgtool trace` (it writes node ids)."
            )
        gid = match[0]
        pg = graphs[gid]
        bucket: dict[tuple[str, str], list[GpuEvent]] = defaultdict(list)
        for e in sorted(evs, key=lambda e: (e.start, e.seq)):
            bucket[_key_event(e)].append(e)
        pairs: list[tuple[GpuEvent, int]] = []
        for key, es in bucket.items():
            nodes = by_key[gid][key]
            if len(nodes) > 1 and (gid, key) not in checked:
                for a, b in zip(nodes, nodes[1:]):
                    if not pg.reach.reachable(a, b):
                        raise InvalidInputError(
                            f"{trace.source}: the match is ambiguous. The trace has no graph node ids, "
                            f"and graph {gid} has {len(nodes)} nodes named {key[1] or key[0]!r} "
                            f"(e.g. indices {a} and {b}) that may run in either order, so their events "
                            "cannot be told apart by name and order. Record the trace with "
                            "`cgtool trace` or a PyTorch whose profiler writes 'graph node id'."
                        )
                checked.add((gid, key))
            pairs.extend(zip(es, nodes))
        out[(dev, gid, corr)] = pairs
    return out, other, ["Events were matched to graph nodes by launch, kernel name and order "
                        "(the trace has no graph node ids): the match is inferred."]


# --------------------------------------------------------------------------- analysis
def analyze(trace: Trace, graphs: Sequence[GraphData], *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> DepsResult:
    """Classify every serialization in ``trace`` against ``graphs``."""
    if not trace.events:
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
        replays, other = _exact_replays(trace, prepared)
        match = "exact"
    else:
        replays, other, notes = _inferred_replays(trace, prepared)
        match = "inferred"
    if not replays:
        raise InvalidInputError(f"{trace.source} has no graph work to analyse.")
    lane = "channel" if trace.has_channels else "stream"
    if lane == "stream":
        notes.append("The trace has no hardware channel data: serializations are taken per stream, "
                     "and waits behind unrelated work are inferred from timing.")

    findings: dict[tuple[int, int, int], Finding] = {}
    gaps: dict[tuple[int, int, int], float] = defaultdict(float)
    waits: dict[tuple[int, int, int], InferredWait] = {}
    stats: list[ReplayStat] = []
    for (dev, gid, corr), pairs in sorted(replays.items(), key=lambda kv: min(e.start for e, _ in kv[1])):
        pg = prepared[gid]
        st = _analyze_replay(pg, dev, gid, corr, pairs, lane, tolerance_us, findings, gaps, waits)
        stats.append(st)
    for k, f in findings.items():
        f.gap_us = gaps[k] / f.count
    res = DepsResult(lane, match, tolerance_us, list(findings.values()), stats,
                     sorted(waits.values(), key=lambda w: -w.wait_us), sorted(prepared), notes,
                     non_graph_events=other)
    res.suggestions = _suggest(res, trace, prepared)
    return res


def _analyze_replay(pg: _G, dev: int, gid: int, corr: int, pairs: list[tuple[GpuEvent, int]], lane: str,
                    tol: float, findings: dict[tuple[int, int, int], Finding],
                    gaps: dict[tuple[int, int, int], float], waits: dict[tuple[int, int, int], InferredWait]) -> ReplayStat:
    g = pg.g
    ev_of: dict[int, GpuEvent] = {}
    for e, i in pairs:
        ev_of[i] = e  # a node runs once per replay
    t0 = min(e.start for e, _ in pairs)
    t1 = max(e.end for e, _ in pairs)
    # Readiness (end of the last predecessor, through untraced nodes) and the measured critical path.
    ready: dict[int, float] = {}
    finish_end: dict[int, float] = {}
    longest: dict[int, float] = {}
    for v in pg.order:
        deps = g.nodes[v].dependencies
        r = max((finish_end[u] for u in deps), default=t0)
        ready[v] = r
        e = ev_of.get(v)
        finish_end[v] = e.end if e is not None else r
        d = (e.end - e.start) if e is not None else 0.0
        longest[v] = d + max((longest[u] for u in deps), default=0.0)
    crit = max(longest.values(), default=0.0)
    st = ReplayStat(gid, dev, corr, len(pairs), round(t1 - t0, 3), round(crit, 3))

    lanes: dict[Any, list[tuple[GpuEvent, int]]] = defaultdict(list)
    for e, i in pairs:
        key = (e.channel_type, e.channel) if lane == "channel" else e.stream
        lanes[key].append((e, i))
    reach = pg.reach.reachable
    for key, items in lanes.items():
        items.sort(key=lambda p: (p[0].start, p[0].seq))
        # A is the item that ended last; of items ending together, the one that started last.
        by_end = sorted(items, key=lambda p: (p[0].end, p[0].start, p[0].seq))
        ends = [p[0].end for p in by_end]
        for eb, b in items:
            k = bisect.bisect_right(ends, eb.start + tol) - 1
            while k >= 0 and (by_end[k][1] == b or by_end[k][0].start >= eb.start):
                k -= 1
            if k < 0:
                continue
            ea, a = by_end[k]
            kind = DepKind.TRUE if reach(a, b) else DepKind.FAKE
            fk = (gid, g.nodes[a].tools_id, g.nodes[b].tools_id)
            f = findings.get(fk)
            if f is None:
                f = findings[fk] = Finding(gid, fk[1], fk[2], kind, eb.channel, eb.stream,
                                           before_name=pg.name(a), after_name=pg.name(b))
            f.count += 1
            gaps[fk] += eb.start - ea.end
            if kind is DepKind.FAKE:
                cost = max(0.0, eb.start - ready[b])
                f.cost_us += cost
                st.fake += 1
                st.fake_cost_us += cost
            else:
                st.true += 1
    st.fake_cost_us = round(st.fake_cost_us, 3)
    if lane == "stream":
        _inferred_waits(pg, gid, pairs, ready, tol, waits)
    return st


def _inferred_waits(pg: _G, gid: int, pairs: list[tuple[GpuEvent, int]], ready: dict[int, float],
                    tol: float, waits: dict[tuple[int, int, int], InferredWait]) -> None:
    by_end = sorted(pairs, key=lambda p: p[0].end)
    ends = [p[0].end for p in by_end]
    for eb, b in pairs:
        late = eb.start - ready[b]
        if late <= max(tol, 1.0):
            continue
        k = bisect.bisect_right(ends, eb.start + tol) - 1
        while k >= 0:
            ea, a = by_end[k]
            if ea.end <= ready[b]:
                k = -1
                break
            if a != b and ea.start < eb.start and not pg.reach.reachable(a, b):
                break
            k -= 1
        if k < 0:
            continue
        a = by_end[k][1]
        wk = (gid, pg.g.nodes[b].tools_id, pg.g.nodes[a].tools_id)
        w = waits.get(wk)
        if w is None:
            w = waits[wk] = InferredWait(gid, wk[1], wk[2], after_name=pg.name(b), behind_name=pg.name(a))
        w.count += 1
        w.wait_us += late


def _suggest(res: DepsResult, trace: Trace, graphs: dict[int, _G]) -> list[str]:
    out: list[str] = []
    if res.n_fake == 0:
        return out
    env = (trace.cgtool or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    chans = {e.channel for e in trace.events if e.channel is not None}
    if res.lane == "channel":
        if env is not None and chans and len(chans) <= int(env or 8):
            out.append(
                f"CUDA_DEVICE_MAX_CONNECTIONS={env} limits the GPU to {env} hardware channel(s) and "
                f"the trace used {len(chans)}: independent branches share a channel. Unset it or "
                "raise it to at least the graph's width (see `cgtool topo`), up to 32."
            )
        else:
            out.append(
                f"Independent work shared {len(chans)} hardware channel(s). Raising "
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


def iter_events_summary(events: Iterable[GpuEvent]) -> Counter[str]:  # small helper for reports
    return Counter(e.kind for e in events)
