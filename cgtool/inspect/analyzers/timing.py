"""When each node of a replay became ready, each replay's span, and the measured critical path.

The **measured critical path** (one definition for ``deps``, ``topo --trace``, ``dot --trace`` and
the report, see ``cgtool.inspect.cost``): per replay, the longest path through the graph with each
node weighted by its measured duration in that replay; the figure reported is the median over
replays, and the path drawn is the one of that median replay. Since it is at most the replay's
span in every replay, the median critical path is at most the median span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import Trace
from cgtool.inspect import DEFAULT_TOLERANCE_US, cost as costmod
from cgtool.inspect.analyzers._arrays import dense, median, unique_ids
from cgtool.inspect.analyzers.matching import PreparedGraph, graph_events
from cgtool.inspect.reach import topological_order
from cgtool.inspect.results import EventMatch


def replay_matrix(n: int, local: np.ndarray, node: np.ndarray, start: np.ndarray, end: np.ndarray,
                  n_rep: int) -> tuple[np.ndarray, np.ndarray]:
    """[replays, nodes] start and end times (NaN where a node has no event in a replay)."""
    S = np.full((n_rep, n), np.nan)
    E = np.full((n_rep, n), np.nan)
    S[local, node] = start
    E[local, node] = end
    return S, E


def readiness(pg: PreparedGraph, S: np.ndarray, E: np.ndarray, t0: np.ndarray) -> np.ndarray:
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


@dataclass(frozen=True)
class Timing:
    """Per matched event: when its node became ready; per replay: span and critical path."""

    ready: np.ndarray  # per event
    span: np.ndarray  # per replay (dense replay id)
    critical: np.ndarray  # per replay
    paths: dict[int, list[int]]  # graph id -> node indices of the median replay's critical path
    median_critical_us: float | None


def replay_timing(prepared: dict[int, PreparedGraph], m: EventMatch, replay: np.ndarray, n_rep: int,
                  start: np.ndarray, end: np.ndarray) -> Timing:
    """Readiness and the measured critical path, per graph, vectorized over its replays."""
    ready = np.zeros(len(m.ev))
    span = np.zeros(n_rep)
    crit = np.zeros(n_rep)
    paths: dict[int, list[int]] = {}
    crit_all: list[np.ndarray] = []
    for gid, pg in prepared.items():
        sel = np.flatnonzero(m.graph == gid)
        if not len(sel):
            continue
        reps, local = unique_ids(replay[sel])
        S, E = replay_matrix(len(pg.g.nodes), local, m.node[sel], start[sel], end[sel], len(reps))
        t0 = np.nanmin(S, axis=1)
        span[reps] = np.nanmax(E, axis=1) - t0
        R = readiness(pg, S, E, t0)
        cp = measured_critical_path(pg.g, pg.order, S, E)
        crit[reps] = cp.lengths_us
        paths[gid] = cp.path
        crit_all.append(cp.lengths_us)
        ready[sel] = R[local, m.node[sel]]
    med = round(median(np.concatenate(crit_all)), 3) if crit_all else None
    return Timing(ready, span, crit, paths, med)


def replay_times(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> tuple[np.ndarray, np.ndarray]:
    """[replays, nodes] start and end times of ``g``'s replays in ``trace`` (NaN: no event)."""
    ev, node = graph_events(trace, g, tolerance_us=tolerance_us)
    replay, rfirst = dense(trace.device[ev], trace.correlation[ev])
    return replay_matrix(len(g.nodes), replay, node, trace.start[ev], trace.end[ev], len(rfirst))


def measured_path(trace: Trace, g: GraphData, *, tolerance_us: float = DEFAULT_TOLERANCE_US) -> costmod.CriticalPath:
    """The measured critical path of ``g``'s replays in ``trace`` (see ``measured_critical_path``)."""
    starts, ends = replay_times(trace, g, tolerance_us=tolerance_us)
    return measured_critical_path(g, topological_order(g), starts, ends)
