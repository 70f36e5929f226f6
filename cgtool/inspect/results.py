"""The typed result of the deps analysis (``cgtool.inspect.deps.analyze``): categories, findings,
per-replay statistics, and the event↔node match every later step reads (views, DOT, the report),
so that nothing matches the trace to the graph a second time; and its figures (``Figures``).

**Figures**: one set of derived figures per graph and trace, computed once from a ``DepsResult`` and shown
with the same words by every command (``deps``, ``topo --trace``, ``dot --trace``), the HTML report
and the CI step summary (``cgtool.report.words``).

* **span**: per replay, first start to last end; its median and its mean, always labelled.
* **critical path**: the measured critical path, median over replays (the path drawn is that of
  the median replay). It is at most the span in every replay, so at most the median span.
* **true / fake dependencies**: serializations judged against the graph. Without hardware
  channels a trace cannot show fake serializations through a shared channel: ``fake`` is then
  unknown (None), never 0; what it shows instead is
* **waits behind unrelated work** (inferred from timing) and the late starts it **cannot tell**
  from waits for room on a full GPU or for the launch to submit them, with the reason.
* **estimated saving**: how much shorter the replays would be without the fake serializations
  (without channels: without the inferred waits, if they were fake serializations) — an
  estimate from a re-schedule, never a measurement.

Waited time and savings are per replay (means): totals over replays depend on how many replays
were traced.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from cgtool.inspect.analyzers._arrays import median

class Certainty(str, Enum):
    """How sure a node assignment (and so a verdict) is."""

    EXACT = "exact"  # the trace names the node of every event (graph node ids)
    UNIQUE = "inferred-unique"  # no ids, but exactly one assignment is consistent
    INVARIANT = "inferred-invariant"  # several assignments are consistent; the verdict is the same under all
    UNDECIDED = "undecided"  # several assignments are consistent and they disagree on the verdict


class DepKind(str, Enum):
    """The categories of an observed serialization."""

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
class EventMatch:
    """The trace's graph events and what they ran (parallel arrays, one entry per matched event).

    ``analyzers.matching`` builds the match (``ev`` to ``groups``); ``deps.analyze`` builds, once, the
    copy its result carries, with each event's replay row, times, lane, readiness, late start and
    verdict. Every later step (figures, views, DOT, the report) reads it instead of matching the trace
    to the graph again."""

    ev: np.ndarray  # event indices into the trace's columns
    node: np.ndarray  # node index within its graph (inferred: under the first consistent assignment)
    graph: np.ndarray  # exec graph id
    other: int  # GPU events outside any graph (or in replays left out)
    group: np.ndarray | None = None  # inferred: index into ``groups`` of each event's launch group
    slot: np.ndarray | None = None  # inferred: the event's slot in its group
    groups: tuple[Any, ...] = ()  # inferred: match.LaunchGroup per group
    replay: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # row of the replay table
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs, as in the trace
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lane: tuple[str, ...] = ()  # per distinct lane id: "channel N" or "stream N"
    lane_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index into ``lane``
    ready: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs: when the node became ready
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # streams: 0, or 1 + index of WaitKind
    verdict: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # of the serialization ending at
    # each event: -1 none, 0 true, 1 fake, 2 undecided (index into serializations.KINDS)

    def arrays(self) -> list[np.ndarray]:
        """Every array the match holds (those of its launch groups aside)."""
        return [v for v in (self.ev, self.node, self.graph, self.group, self.slot, self.replay, self.start, self.end,
                            self.lane_id, self.ready, self.late, self.verdict) if v is not None]

    def select(self, keep: np.ndarray) -> "EventMatch":
        """The events where ``keep`` is true (a boolean mask), the rest counted in ``other``."""
        return EventMatch(self.ev[keep], self.node[keep], self.graph[keep], self.other + int((~keep).sum()),
                          None if self.group is None else self.group[keep],
                          None if self.slot is None else self.slot[keep], self.groups)


@dataclass(frozen=True)
class Finding:
    """One distinct serialized pair, aggregated over the replays it was seen in (built once, with its
    totals and estimated saving: ``deps.analyze``)."""

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
    certainty: str = Certainty.EXACT.value  # how the events were matched to nodes (Certainty)
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


class WaitKind(str, Enum):
    """What a late start seen without channel data is taken for."""

    BEHIND = "behind unrelated work"  # the GPU had room and an unrelated item had just ended: a serialization
    CANNOT_TELL = "cannot tell"  # the GPU was full, or the launch still submitting: those waits look the same


@dataclass(frozen=True)
class InferredWait:
    """Without channel data: B started later than its graph predecessors allowed, and an
    unrelated item ended just before it started (inferred from timing; built once, with its totals,
    certainty and estimated saving)."""

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


@dataclass(frozen=True)
class ReplayStat:
    """One row of ``DepsResult.replay_table`` (``DepsResult.replays``)."""

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
    wait_us: float = 0.0  # streams: time waited behind unrelated work (inferred); channels: = fake_wait_us
    cannot_tell: int = 0  # streams: late starts while the GPU was full (a wait for room looks the same)
    cannot_tell_us: float = 0.0
    estimated_span_us: float = float("nan")  # list schedule with the observed serializations
    saving_us: float = float("nan")  # estimated span saved without any fake serialization
    filled: bool = False  # the kernels' area is close to the span: the GPU was full


REPLAY_FIELDS = ("graph_id", "device", "correlation", "events", "span_us", "critical_path_us", "true", "fake",
                 "fake_wait_us", "undecided", "waited", "wait_us", "cannot_tell", "cannot_tell_us",
                 "estimated_span_us", "saving_us", "filled")


@dataclass(frozen=True)
class Incomplete:
    """Replays of one graph that lack events of some of its GPU nodes: left out of the analysis."""

    graph_id: int
    replays: int  # how many
    of: int  # replays of this graph in the trace
    missing: tuple[int, ...]  # tools ids of the nodes missing in at least one of them (up to 20)
    correlations: tuple[int, ...]  # of the first few

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "missing": list(self.missing), "correlations": list(self.correlations)}


@dataclass(frozen=True)
class Figures:
    source: str
    graphs: tuple[int, ...]
    replays: int
    span_median_us: float | None
    span_mean_us: float | None
    critical_path_us: float | None  # measured; median over replays
    lane: Lane
    channels_from: str | None  # "the trace", or the setting of one connection that implies channel 0
    match: MatchKind
    certainty: Mapping[str, int]  # serializations per certainty of their verdict (read-only)
    true: int
    true_pairs: int
    fake: int | None  # None: the trace cannot show them (no hardware channels)
    fake_pairs: int | None
    fake_per_replay: float | None
    fake_wait_us: float | None  # per replay: time fake-serialized work sat ready (a wait, not a loss)
    fake_on_one_stream: int | None  # without channels: fake serializations seen on a single stream
    undecided: int
    waits: int | None  # without channels: waits behind unrelated work (inferred); None with channels
    waits_pairs: int | None
    waits_us: float | None  # per replay
    cannot_tell: int | None  # without channels: late starts on a full GPU or during the launch
    cannot_tell_us: float | None  # per replay
    cannot_tell_reason: str | None
    saving_us: float | None  # estimated, per replay
    saving_share: float | None  # of the mean span of the replays estimated
    saving_basis: str | None  # what was re-scheduled without: "fake serializations", "inferred waits" or
    # "serializations on one stream"; None with saving_us None: nothing the trace shows to estimate from
    gpu_filled: bool | None
    incomplete_replays: int  # left out: lacking events of some GPU nodes
    non_graph_events: int
    tolerance_us: float

    @property
    def fake_visible(self) -> bool:
        return self.fake is not None

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}  # asdict's keys (asdict cannot copy a mappingproxy)
        del d["source"]  # the document says where it came from; equal traces give equal figures
        d["graphs"], d["certainty"] = list(self.graphs), dict(self.certainty)
        d["lane"], d["match"] = self.lane.value, self.match.value
        d["fake_visible"] = self.fake_visible
        # the names earlier readers know, beside the labelled ones
        d["distinct_true"], d["distinct_fake"] = self.true_pairs, self.fake_pairs
        d["mean_span_us"], d["median_span_us"] = self.span_mean_us, self.span_median_us
        return d


@dataclass(frozen=True)
class DepsResult:
    """What ``deps.analyze`` found, built once with its final values: nothing changes it afterwards.
    Frozen all the way down: its findings, waits and rows are frozen dataclasses, its sequences
    tuples, its mappings read-only (``MappingProxyType``; the constructor wraps dicts it is given)
    and its arrays, those of the match it carries included, read-only (``writeable=False``)."""

    lane: Lane
    match: MatchKind
    tolerance_us: float
    findings: tuple[Finding, ...]
    replay_table: Mapping[str, np.ndarray]  # one array per ReplayStat field, replays in time order
    inferred_waits: tuple[InferredWait, ...]
    graphs: tuple[int, ...]
    notes: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()
    non_graph_events: int = 0
    match_groups: tuple[Mapping[str, Any], ...] = ()  # inferred match: per launch group
    critical_path_us: float | None = None  # median over replays of the measured critical path
    # graph id -> node indices of the median replay's measured critical path
    critical_paths: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    cost: Mapping[str, Any] = field(default_factory=dict)  # the estimate of what fake serializations cost
    events: EventMatch | None = None  # the event <-> node match, with replay rows and lanes
    incomplete: tuple[Incomplete, ...] = ()
    cannot_tell_reason: str | None = None  # streams: why some late starts are not judged
    source: str = ""  # the trace's path
    channels_in_profiler_trace: bool = False  # a profiler trace (not cgtool's) that carries channels
    channels_from: str | None = None  # where the channels came from: the trace, or a setting of 1 connection

    def __post_init__(self) -> None:
        # A frozen dataclass stops attribute assignment only: what its fields hold is made read-only here.
        for name in ("replay_table", "critical_paths", "cost"):
            v = getattr(self, name)
            if not isinstance(v, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(v))
        groups = tuple(g if isinstance(g, MappingProxyType) else MappingProxyType(g) for g in self.match_groups)
        object.__setattr__(self, "match_groups", groups)
        for a in [*self.replay_table.values(), *(self.events.arrays() if self.events is not None else ())]:
            a.flags.writeable = False

    @functools.cached_property
    def replays(self) -> tuple[ReplayStat, ...]:
        """Per-replay statistics (built on first use: a trace may hold 100,000s of replays)."""
        t = self.replay_table
        cols = [t[f].tolist() for f in REPLAY_FIELDS]
        return tuple(ReplayStat(*row) for row in zip(*cols))

    def _replay_dicts(self) -> list[dict[str, Any]]:
        """``asdict`` of every ReplayStat, made from the columns (the same values, far faster)."""
        t = self.replay_table
        return [dict(zip(REPLAY_FIELDS, row)) for row in zip(*(t[f].tolist() for f in REPLAY_FIELDS))]

    @property
    def n_true(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.TRUE)

    @property
    def n_fake(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.FAKE)

    @property
    def n_undecided(self) -> int:
        return sum(f.count for f in self.findings if f.kind is DepKind.UNDECIDED)

    @property
    def fake_visible(self) -> bool:
        """Whether the trace can show every fake serialization: only with hardware channels.
        On streams, work serialized through a shared channel (across streams) is not seen."""
        return self.lane is Lane.CHANNEL

    def fakes(self) -> list[Finding]:
        return sorted((f for f in self.findings if f.kind is DepKind.FAKE),
                      key=lambda f: (-(f.saving_us or 0.0), -f.wait_us, -f.count, f.before, f.after))

    def certainties(self) -> dict[str, int]:
        """Serializations per certainty of their verdict."""
        c: Counter[str] = Counter()
        for f in self.findings:
            c[f.certainty if f.kind is not DepKind.UNDECIDED else Certainty.UNDECIDED.value] += f.count
        return dict(c)

    def figures(self, graph_id: int | None = None) -> Figures:
        """The derived figures of all graphs, or of one."""
        return figures(self, graph_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 2,
            "summary": self.figures().to_json(),
            "cost": dict(self.cost),
            "match_groups": [dict(g) for g in self.match_groups],
            "incomplete_replays": [x.to_json() for x in self.incomplete],
            "serializations": [f.to_json() for f in sorted(
                self.findings, key=lambda f: (f.kind is not DepKind.FAKE, -f.wait_us, f.before, f.after))],
            "inferred_waits": [w.to_json() for w in self.inferred_waits],
            "replays": self._replay_dicts(),
            "notes": list(self.notes),
            "suggestions": list(self.suggestions),
        }


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), nd)


def figures(res: DepsResult, graph_id: int | None = None) -> Figures:
    """The figures of ``res``: of every graph it analysed, or of ``graph_id`` alone."""
    t = res.replay_table
    sel = np.ones(len(t["span_us"]), bool) if graph_id is None else t["graph_id"] == graph_id
    n = int(sel.sum())
    spans, crit = t["span_us"][sel], t["critical_path_us"][sel]
    finds = [f for f in res.findings if graph_id is None or f.graph_id == graph_id]
    waits = [w for w in res.inferred_waits if graph_id is None or w.graph_id == graph_id]
    certainty: dict[str, int] = {}
    for f in finds:
        k = f.certainty if f.kind is not DepKind.UNDECIDED else "undecided"
        certainty[k] = certainty.get(k, 0) + f.count
    true = sum(f.count for f in finds if f.kind is DepKind.TRUE)
    fake = sum(f.count for f in finds if f.kind is DepKind.FAKE)
    fake_pairs = sum(1 for f in finds if f.kind is DepKind.FAKE)
    fake_wait = sum(f.wait_us for f in finds if f.kind is DepKind.FAKE)
    visible = res.lane is Lane.CHANNEL
    stream = not visible
    sav, filled = t["saving_us"][sel], t["filled"][sel]
    done = ~np.isnan(sav)
    saving = share = None
    gpu_filled = None
    if done.any() and res.cost:
        saving = float(sav[done].mean())
        mean_span = float(spans[done].mean())
        share = saving / mean_span if mean_span else None
        gpu_filled = bool(filled[done].mean() >= 0.5)
    per = (lambda v: v / n) if n else (lambda v: 0.0)
    has_waits = stream and bool(int(t["waited"][sel].sum()))
    # Without channels, a saving is estimated only from what the trace shows: the inferred waits, or
    # independent work serialized on one stream. With neither, the saving is unknown, not 0: the
    # serializations across hardware channels are not in the trace, and late starts the timing
    # cannot tell apart ("cannot tell") may be fake ones.
    basis = ("fake serializations" if visible else "inferred waits" if has_waits
             else "serializations on one stream" if fake else None)
    if basis is None:
        saving = share = None
    return Figures(
        source=res.source,
        graphs=(graph_id,) if graph_id is not None else res.graphs,
        replays=n,
        span_median_us=_r(median(spans)) if n else None,
        span_mean_us=_r(float(spans.mean())) if n else None,
        critical_path_us=_r(median(crit)) if n else None,
        lane=res.lane, channels_from=res.channels_from, match=res.match, certainty=MappingProxyType(certainty),
        true=true, true_pairs=sum(1 for f in finds if f.kind is DepKind.TRUE),
        fake=fake if visible else None,
        fake_pairs=fake_pairs if visible else None,
        fake_per_replay=_r(per(fake)) if visible else None,
        fake_wait_us=_r(per(fake_wait)) if visible else None,
        fake_on_one_stream=fake if stream else None,
        undecided=sum(f.count for f in finds if f.kind is DepKind.UNDECIDED),
        waits=int(t["waited"][sel].sum()) if stream else None,
        waits_pairs=len(waits) if stream else None,
        waits_us=_r(per(float(t["wait_us"][sel].sum()))) if stream else None,
        cannot_tell=int(t["cannot_tell"][sel].sum()) if stream else None,
        cannot_tell_us=_r(per(float(t["cannot_tell_us"][sel].sum()))) if stream else None,
        cannot_tell_reason=res.cannot_tell_reason if stream else None,
        saving_us=_r(saving),
        saving_share=_r(share, 4),
        saving_basis=None if saving is None else basis,
        gpu_filled=gpu_filled,
        incomplete_replays=sum(x.replays for x in res.incomplete if graph_id is None or x.graph_id == graph_id),
        non_graph_events=res.non_graph_events,
        tolerance_us=res.tolerance_us,
    )
