"""Every serialization on a lane, judged against the graph.

In one replay, on one hardware channel (one stream when the trace has no channel data), a
*serialization* A→B is B starting at or after A's end (within ``tolerance_us``), A being the item on
that lane that ended last before B started (of items ending at the same nanosecond, the one that
started last). It is **true** when B is reachable from A in the graph (through any node types) and
**fake** otherwise: independent work that the hardware ran one after the other. Without node ids,
a verdict the consistent node assignments disagree on is **undecided**.

The **wait** of a fake serialization: how long B sat ready — from the end of its last graph
predecessor (or the replay's start, for a root) to its own start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cgtool.artifacts.trace import Trace
from cgtool.inspect.analyzers._arrays import dense, latest_before
from cgtool.inspect.analyzers.matching import PreparedGraph
from cgtool.inspect.results import Certainty, DepKind, EventMatch, Finding

KINDS = (DepKind.TRUE, DepKind.FAKE, DepKind.UNDECIDED)
CERTS = (Certainty.EXACT, Certainty.UNIQUE, Certainty.INVARIANT, Certainty.UNDECIDED)


@dataclass(frozen=True)
class Serializations:
    """The serialized pairs (positions into the matched events) and their aggregation."""

    a: np.ndarray  # position of A of each serialization
    b: np.ndarray  # position of B
    kind: np.ndarray  # index into KINDS
    pair: np.ndarray  # index into ``findings``
    wait: np.ndarray  # µs B sat ready (fake ones; 0 for the others)
    findings: tuple[Finding, ...]  # without their estimated savings (``saving``: deps.analyze adds them)


def serializations(trace: Trace, prepared: dict[int, PreparedGraph], m: EventMatch, replay: np.ndarray,
                   lane_id: np.ndarray, ready: np.ndarray, tolerance_us: float,
                   channel_of: int | None = None, times: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> Serializations:
    """``channel_of``: the channel of every event where the trace has none but it is known (one
    connection: channel 0). ``times``: (start, end) of the matched events, where the caller has them."""
    ev = m.ev
    start, end = times if times is not None else (trace.start[ev], trace.end[ev])
    a_of = latest_before(start, end, replay * (int(lane_id.max()) + 1) + lane_id, tolerance_us)
    b = np.flatnonzero(a_of >= 0)
    a = a_of[b]
    kind_true = np.zeros(len(b), dtype=bool)
    node_a, node_b, graph_b = m.node[a], m.node[b], m.graph[b]
    for gid, pg in prepared.items():
        if len(prepared) == 1:  # every matched event is of this graph: no mask to apply
            kind_true = np.asarray(pg.reach.reachable_many(node_a, node_b), dtype=bool)
            continue
        mm = graph_b == gid
        if mm.any():
            kind_true[mm] = pg.reach.reachable_many(node_a[mm], node_b[mm])
    cert, n_assign = certainty(m, prepared, a, b)
    undecided = cert == CERTS.index(Certainty.UNDECIDED)
    kind = np.where(undecided, 2, np.where(kind_true, 0, 1))  # index into KINDS
    gap = start[b] - end[a]
    wait = np.where(kind == 1, np.maximum(0.0, start[b] - ready[b]), 0.0)

    # Aggregate distinct pairs (and, for inferred matches, their certainty).
    gcode = np.searchsorted(np.array(sorted(prepared), dtype=np.int64), graph_b)
    pair, pfirst = dense(gcode, node_a, node_b, kind, cert, n_assign) if len(b) else dense(gcode)
    counts = np.bincount(pair, minlength=len(pfirst)) if len(b) else np.zeros(0, np.int64)
    gaps = np.bincount(pair, weights=gap, minlength=len(pfirst)) if len(b) else np.zeros(0)
    waits = np.bincount(pair, weights=wait, minlength=len(pfirst)) if len(b) else np.zeros(0)
    findings: list[Finding] = []
    for k, j in enumerate(pfirst.tolist()):
        gid = int(graph_b[j])
        pg = prepared[gid]
        na, nb = int(node_a[j]), int(node_b[j])
        c = int(trace.channel[ev[b[j]]]) if channel_of is None else channel_of
        findings.append(Finding(
            gid, pg.g.nodes[na].tools_id, pg.g.nodes[nb].tools_id, KINDS[int(kind[j])],
            None if c < 0 else c, int(trace.stream[ev[b[j]]]), int(counts[k]),
            float(gaps[k] / counts[k]), float(waits[k]), pg.name(na), pg.name(nb),
            CERTS[int(cert[j])].value, int(n_assign[j])))
    return Serializations(a, b, kind, pair, wait, tuple(findings))


def certainty(m: EventMatch, prepared: dict[int, PreparedGraph], a: np.ndarray,
              b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per serialization: index into CERTS, and the number of consistent assignments."""
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


def group_summary(m: EventMatch) -> list[dict[str, object]]:
    """Per launch group of an inferred match: its graph, replays, events and assignments."""
    return [{"graph_id": lg.graph_id, "replays": len(lg.correlations), "events_per_replay": int(lg.events.shape[0]),
             "assignments": lg.assignments, "complete": lg.complete}
            for lg in m.groups]
