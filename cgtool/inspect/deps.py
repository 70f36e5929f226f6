"""True and fake dependencies: the one entry point of the trace analysis.

``analyze(trace, graphs)`` runs the analyzers (``cgtool.inspect.analyzers``, one per question) in
order and returns a ``DepsResult`` that carries the event↔node match, so the figures, views,
DOT and the report read it instead of matching the trace to the graph again:

1. ``matching``: which event ran which node (node ids, or inferred); replays lacking an event of
   some GPU node are left out (and reported);
2. ``timing``: readiness, span and the measured critical path of each replay;
3. ``serializations``: every serialization on a lane (channel, or stream without channel data)
   judged true, fake or undecided;
4. ``waits``: without channels, late starts sorted into waits behind unrelated work and those the
   timing cannot tell from waits for room on a full GPU or for the launch to submit them;
5. ``saving``: the estimated cost, by re-scheduling sampled replays;
6. ``advice``: notes and suggestions.

Words (docs/architecture.md): a *serialization* A→B is B starting at or after A's end on one lane;
it is **true** when B is reachable from A in the graph and **fake** otherwise. A wait is not a loss:
what a fake serialization costs the replay is *estimated*.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar

import numpy as np

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import Trace
from cgtool.errors import InvalidInputError
from cgtool.inspect import DEFAULT_TOLERANCE_US  # the default is re-exported here
from cgtool.inspect.analyzers import advice, matching, saving, serializations, timing, waits as waitsmod
from cgtool.inspect.analyzers._arrays import dense
from cgtool.inspect.analyzers.compare import compare_traces
from cgtool.inspect.analyzers.matching import graph_events, match_graph_events
from cgtool.inspect.analyzers.timing import measured_critical_path, measured_path, replay_times
from cgtool.inspect.results import (DepKind, DepsResult, EventMatch, Finding, Incomplete, InferredWait, Lane,
                                    MatchKind, ReplayStat)
from cgtool.text import plural

__all__ = ["DEFAULT_TOLERANCE_US", "DepKind", "DepsResult", "EventMatch", "Finding", "Incomplete", "InferredWait",
           "Lane", "MatchKind", "ReplayStat", "analyze", "compare_traces", "graph_events", "graphs_from_trace",
           "match_graph_events", "measured_critical_path", "measured_path", "node_lanes", "replay_times"]


def analyze(trace: Trace, graphs: Sequence[GraphData], *, tolerance_us: float = DEFAULT_TOLERANCE_US,
            estimate: bool = True, max_connections: int | None = None) -> DepsResult:
    """Classify every serialization in ``trace`` against ``graphs``; with ``estimate``, also
    estimate what the fake ones cost the replays (cgtool.inspect.cost).

    ``max_connections``: the CUDA_DEVICE_MAX_CONNECTIONS the traced program ran with, where the
    trace does not record it. A trace without channel data whose setting is 1 (recorded, or given)
    ran every stream's work through hardware channel 0 (every recording at that setting shows it:
    docs/deps.md), so its serializations are taken on that one channel, as with channel data."""
    _check_inputs(trace, graphs)
    prepared = matching.prepare_graphs(graphs)
    m, match, incomplete, notes, replays = _match(trace, prepared, tolerance_us)
    lanes = _lanes(trace, match, max_connections, notes)
    ev = m.ev
    start, end = trace.start[ev], trace.end[ev]
    corr, dev = trace.correlation[ev], trace.device[ev]
    replay, rfirst = replays if replays is not None else dense(dev, m.graph, corr)
    lanes_key = ((dev,) if lanes.one_channel else (trace.channel_type[ev], trace.channel[ev])
                 if lanes.lane is Lane.CHANNEL else (trace.stream[ev],))
    lane_id, lfirst = dense(*lanes_key)
    n_rep = len(rfirst)
    tm = timing.replay_timing(prepared, m, replay, n_rep, start, end)
    sz = serializations.serializations(trace, prepared, m, replay, lane_id, tm.ready, tolerance_us,
                                       channel_of=0 if lanes.one_channel else None, times=(start, end))
    cover = waitsmod.coverage(prepared, m)
    empty = np.zeros(0, np.int64)
    inferred = waitsmod.Waits((), empty, empty, empty, empty)
    if lanes.lane is Lane.STREAM:
        # when each replay's launch had submitted its work (the host's cudaGraphLaunch returned), NaN unknown
        launch_end = np.array([trace.launch_ends.get(c, np.nan) for c in corr[rfirst].tolist()])[replay]
        inferred = waitsmod.inferred_waits(prepared, m, start, end, tm.ready, replay, tolerance_us, cover, launch_end)
    est = saving.nothing(n_rep)
    if estimate:
        est = saving.estimate(prepared, m, start, end, replay, tm.span, sz.a, sz.b, sz.kind, sz.pair, sz.findings,
                              inferred.waits, cover, (inferred.b, inferred.a, inferred.index))
    ready_wait = start - tm.ready
    waited, waited_cost = _waited(lanes.lane, sz, inferred, cover, replay, n_rep, tm.ready, start, end, ready_wait,
                                  tolerance_us)
    o = _replay_order(replay, start, n_rep)
    stats = {
        "graph_id": m.graph[rfirst][o], "device": dev[rfirst][o], "correlation": corr[rfirst][o],
        "events": np.bincount(replay, minlength=n_rep)[o], "span_us": np.round(tm.span[o], 3),
        "critical_path_us": np.round(tm.critical[o], 3),
        **{k: v[o] for k, v in _verdict_counts(sz, replay, n_rep).items()},
        **{k: v[o] for k, v in waited.items()},
        "estimated_span_us": np.round(est.span_us[o], 3), "saving_us": np.round(est.saving_us[o], 3),
        "filled": est.filled[o],
    }
    m = _complete_match(m, trace, o, replay, start, end, lane_id, lfirst, tm.ready, inferred, sz, lanes)
    # Every part with its final values (savings, advice), then the result, once.
    findings, waits = _with_saving(sz.findings, est.finding_saving_us), _with_saving(inferred.waits, est.wait_saving_us)
    cost = {**est.cost, **waited_cost}
    adv = advice.advise(findings, waits, cost, stats["span_us"], lanes.lane, trace)
    return DepsResult(lanes.lane, match, tolerance_us, findings, stats, waits, tuple(sorted(prepared)),
                      (*notes, *adv.notes), adv.suggestions, non_graph_events=m.other,
                      match_groups=tuple(serializations.group_summary(m)), cost=cost,
                      critical_path_us=tm.median_critical_us,
                      critical_paths={gid: tuple(p) for gid, p in tm.paths.items()}, events=m,
                      incomplete=tuple(incomplete), cannot_tell_reason=inferred.reason, source=trace.source,
                      channels_in_profiler_trace=lanes.profiler and lanes.lane is Lane.CHANNEL and not lanes.one_channel,
                      channels_from=f"CUDA_DEVICE_MAX_CONNECTIONS=1, {lanes.said_by}" if lanes.one_channel else
                      ("the trace" if lanes.lane is Lane.CHANNEL else None))


_Item = TypeVar("_Item", Finding, InferredWait)


def _with_saving(items: Sequence[_Item], saving_us: Mapping[int, float]) -> tuple[_Item, ...]:
    """``items`` with the estimated saving of each one estimated (by index), the others as they are."""
    return tuple(dataclasses.replace(x, saving_us=saving_us[k]) if k in saving_us else x for k, x in enumerate(items))


def _check_inputs(trace: Trace, graphs: Sequence[GraphData]) -> None:
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


def _match(trace: Trace, prepared: dict[int, matching.PreparedGraph], tolerance_us: float
           ) -> tuple[EventMatch, MatchKind, list[Incomplete], list[str], tuple[np.ndarray, np.ndarray] | None]:
    """Which event ran which node: by node ids, or inferred; replays lacking an event of some node left out.
    Also the dense replay ids of the match's events (``dense(device, graph, correlation)``) where
    they were computed on the way (None: to compute)."""
    notes: list[str] = []
    incomplete: list[Incomplete] = []
    replays = None
    if trace.has_graph_ids:
        in_trace = set(trace.graph_ids())
        others = sorted(in_trace - set(prepared))
        m = matching.exact_match(trace, prepared, ignore_unknown=bool(in_trace & set(prepared)))
        if others:  # only some of the trace's graphs were given: theirs are analysed, the others left out
            notes.append(f"The trace also replays exec graph(s) {others[:8]}, whose exports were not given: their "
                         "events were left out.")
        if len(m.ev):
            replays = dense(trace.device[m.ev], m.graph, trace.correlation[m.ev])
        m, incomplete = matching.drop_incomplete(trace, m, prepared, replays)
        if incomplete:  # replays were left out: their ids are dense no more
            replays = None
        match = MatchKind.EXACT
    else:
        m, notes = matching.inferred_match(trace, prepared, tolerance_us)
        match = MatchKind.INFERRED
    if incomplete and not len(m.ev):
        x = incomplete[0]
        raise InvalidInputError(
            f"{trace.source}: every replay of exec graph {x.graph_id} lacks events of some of its GPU nodes "
            f"({_nodes(x.missing)} missing), so no replay can be analysed whole. The profiler lost records or "
            "the trace was cut: trace the replays again (`cgtool trace`), or check the tracer's dropped records.")
    if not len(m.ev):
        raise InvalidInputError(f"{trace.source} has no graph work to analyse.")
    for x in incomplete:
        notes.append(f"{x.replays} of the {x.of} replays of exec graph {x.graph_id} lack events of some GPU "
                     f"nodes ({_nodes(x.missing)}; correlation ids {list(x.correlations)}) and were left out: "
                     "a replay with a missing event has a wrong span, waits and critical path.")
    return m, match, incomplete, notes, replays


@dataclass(frozen=True)
class _Lanes:
    """Where serializations are taken: per channel, or per stream (a trace without channel data)."""

    lane: Lane
    one_channel: bool  # no channel data, but one connection: every stream's work on channel 0
    profiler: bool  # a profiler's trace (not cgtool's CUPTI collector)
    said_by: str  # who says the connections setting


def _lanes(trace: Trace, match: MatchKind, max_connections: int | None, notes: list[str]) -> _Lanes:
    """The lanes of the trace, with the note that says which (appended to ``notes``)."""
    lane = Lane.CHANNEL if trace.has_channels else Lane.STREAM
    profiler = (trace.cgtool or {}).get("collector") not in ("cupti",)
    setting, said_by = stated_connections(trace, max_connections)
    one_channel = lane is Lane.STREAM and setting == 1
    if one_channel:
        lane = Lane.CHANNEL
        notes.append(f"The trace has no hardware channel data, but CUDA_DEVICE_MAX_CONNECTIONS=1 ({said_by}): every "
                     "stream's work went through hardware channel 0, so serializations are taken on that one "
                     "channel, as with channel data.")
    if lane is Lane.STREAM:
        notes.append("The trace has no hardware channel data: serializations are taken per stream, so fake "
                     "dependencies through a shared channel are not visible; waits behind unrelated work are "
                     "inferred from timing.")
    elif profiler:
        notes.append("This profiler trace carries hardware channels" + (" and graph node ids" if match is MatchKind.EXACT
                     else "") + ": serializations are taken per channel, as in a `cgtool trace`.")
    return _Lanes(lane, one_channel, profiler, said_by)


def _verdict_counts(sz: serializations.Serializations, replay: np.ndarray, n_rep: int) -> dict[str, np.ndarray]:
    """Per replay: serializations judged true, fake and undecided, and the time fake-serialized work waited."""
    rb = replay[sz.b]
    return {"true": np.bincount(rb[sz.kind == 0], minlength=n_rep),
            "fake": np.bincount(rb[sz.kind == 1], minlength=n_rep),
            "fake_wait_us": np.round(np.bincount(rb, weights=sz.wait, minlength=n_rep), 3),
            "undecided": np.bincount(rb[sz.kind == 2], minlength=n_rep)}


def _waited(lane: Lane, sz: serializations.Serializations, inferred: waitsmod.Waits, cover: np.ndarray,
            replay: np.ndarray, n_rep: int, ready: np.ndarray, start: np.ndarray, end: np.ndarray,
            ready_wait: np.ndarray, tolerance_us: float) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Per replay: the waits (inferred on streams, fake serializations with room on channels) and the late
    starts the timing cannot tell from waits for room or for the launch; and, on streams, the totals of
    the latter (the result's ``cost`` holds them; empty on channels)."""
    cost: dict[str, object] = {}
    n_waited: np.ndarray
    wait_us: np.ndarray
    n_cannot: np.ndarray
    cannot_us: np.ndarray
    if lane is Lane.STREAM:
        n_waited = np.bincount(replay[inferred.b], minlength=n_rep)
        wait_us = np.bincount(replay[inferred.b], weights=ready_wait[inferred.b], minlength=n_rep)
        n_cannot = np.bincount(replay[inferred.cannot_b], minlength=n_rep).astype(np.float64)
        cannot_us = np.bincount(replay[inferred.cannot_b], weights=ready_wait[inferred.cannot_b], minlength=n_rep)
        cost["full_gpu_waits"] = int(len(inferred.cannot_b) - len(inferred.launch_b))  # on a full GPU: cannot tell
        cost["launch_waits"] = int(len(inferred.launch_b))  # while the launch was submitting: cannot tell
        on_full = inferred.cannot_b[~np.isin(inferred.cannot_b, inferred.launch_b)]
        cost["full_gpu_wait_us"] = round(waitsmod.total_in_order(ready_wait[on_full]), 3)
        cost["launch_wait_us"] = round(waitsmod.total_in_order(ready_wait[inferred.launch_b]), 3)
    else:
        fb = sz.b[sz.kind == 1]
        n_waited = np.bincount(replay[fb][waitsmod.waited_with_room(fb, ready, start, end, replay, cover,
                                                                     tolerance_us)], minlength=n_rep)
        wait_us = np.bincount(replay[sz.b], weights=sz.wait, minlength=n_rep)
        n_cannot = np.zeros(n_rep)
        cannot_us = np.zeros(n_rep)
    return {"waited": n_waited, "wait_us": np.round(wait_us, 3), "cannot_tell": n_cannot.astype(np.int64),
            "cannot_tell_us": np.round(cannot_us, 3)}, cost


def _replay_order(replay: np.ndarray, start: np.ndarray, n_rep: int) -> np.ndarray:
    """The replays in time order (of their first event's start): the rows of the replay table."""
    t_first = np.full(n_rep, np.inf)
    np.minimum.at(t_first, replay, start)
    return np.argsort(t_first, kind="stable")


def _complete_match(m: EventMatch, trace: Trace, o: np.ndarray, replay: np.ndarray, start: np.ndarray,
                    end: np.ndarray, lane_id: np.ndarray, lfirst: np.ndarray, ready: np.ndarray,
                    inferred: waitsmod.Waits, sz: serializations.Serializations, lanes: _Lanes) -> EventMatch:
    """The match with what every later step reads beside it: each event's replay row, times, lane,
    readiness, late start and verdict (the match the result carries)."""
    row = np.empty(len(o), np.int64)
    row[o] = np.arange(len(o))  # dense replay id -> row of the replay table
    late = np.zeros(len(m.ev), np.int8)
    late[inferred.b] = 1  # a wait behind unrelated work (WaitKind.BEHIND)
    late[inferred.cannot_b] = 2  # cannot tell (WaitKind.CANNOT_TELL)
    verdict = np.full(len(m.ev), -1, np.int8)
    verdict[sz.b] = sz.kind
    ev = m.ev
    lane = ["channel 0" if lanes.one_channel else f"channel {int(trace.channel[ev[j]])}"
            if lanes.lane is Lane.CHANNEL else f"stream {int(trace.stream[ev[j]])}" for j in lfirst.tolist()]
    return dataclasses.replace(m, replay=row[replay], start=start, end=end, lane=tuple(lane), lane_id=lane_id,
                               ready=ready, late=late, verdict=verdict)


def stated_connections(trace: Trace, given: int | None) -> tuple[int | None, str]:
    """The CUDA_DEVICE_MAX_CONNECTIONS of the traced run, and who says so: given, or recorded in the
    trace's cgtool block (`cgtool trace` writes it, with either collector). None: unknown."""
    if given is not None:
        return given, "given with --max-connections"
    cg = trace.cgtool or {}
    for v in (cg.get("CUDA_DEVICE_MAX_CONNECTIONS"), (cg.get("environment") or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
              if isinstance(cg.get("environment"), dict) else None):
        try:
            if v is not None:
                return int(v), "recorded in the trace"
        except (TypeError, ValueError):
            continue
    return None, ""


def _nodes(tools_ids: Sequence[int]) -> str:
    shown = ", ".join(f"#{t & 0xFFFFFFFF}" for t in tools_ids[:8])
    return plural(len(tools_ids), "node") + " " + shown + (", ..." if len(tools_ids) > 8 else "")


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


def graphs_from_trace(trace: Trace) -> list[GraphData]:
    """The graph exports a cgtool trace embeds (empty for other traces)."""
    from cgtool.inspect.inputs import embedded_graphs

    return embedded_graphs(trace)
