"""The typed result of the deps analysis (``cgtool.inspect.deps.analyze``): categories, findings,
per-replay statistics, and the event↔node match every later step reads (views, DOT, the report),
so that nothing matches the trace to the graph a second time.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from cgtool.inspect.match import Certainty


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


@dataclass
class EventMatch:
    """The trace's graph events and what they ran (parallel arrays, one entry per matched event).

    Built once by ``analyzers.matching``; every later step (figures, views, DOT, the report) reads
    it instead of matching the trace to the graph again."""

    ev: np.ndarray  # event indices into the trace's columns
    node: np.ndarray  # node index within its graph (inferred: under the first consistent assignment)
    graph: np.ndarray  # exec graph id
    other: int  # GPU events outside any graph (or in replays left out)
    group: np.ndarray | None = None  # inferred: index into ``groups`` of each event's launch group
    slot: np.ndarray | None = None  # inferred: the event's slot in its group
    groups: list[Any] = field(default_factory=list)  # inferred: match.LaunchGroup per group
    replay: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # row of the replay table
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs, as in the trace
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lane: list[str] = field(default_factory=list)  # per distinct lane id: "channel N" or "stream N"
    lane_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index into ``lane``
    ready: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs: when the node became ready
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # streams: 0, or 1 + index of WaitKind
    verdict: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # of the serialization ending at
    # each event: -1 none, 0 true, 1 fake, 2 undecided (index into serializations.KINDS)

    def select(self, keep: np.ndarray) -> "EventMatch":
        """The events where ``keep`` is true (a boolean mask), the rest counted in ``other``."""
        return EventMatch(self.ev[keep], self.node[keep], self.graph[keep], self.other + int((~keep).sum()),
                          None if self.group is None else self.group[keep],
                          None if self.slot is None else self.slot[keep], self.groups)


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


class WaitKind(str, Enum):
    """What a late start seen without channel data is taken for."""

    BEHIND = "behind unrelated work"  # the GPU had room and an unrelated item had just ended: a serialization
    CANNOT_TELL = "cannot tell"  # the GPU was full, or the launch still submitting: those waits look the same


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
    wait_us: float = 0.0  # streams: time waited behind unrelated work (inferred); channels: = fake_wait_us
    cannot_tell: int = 0  # streams: late starts while the GPU was full (a wait for room looks the same)
    cannot_tell_us: float = 0.0
    estimated_span_us: float = float("nan")  # list schedule with the observed serializations
    saving_us: float = float("nan")  # estimated span saved without any fake serialization
    filled: bool = False  # the kernels' area is close to the span: the GPU was full


REPLAY_FIELDS = ("graph_id", "device", "correlation", "events", "span_us", "critical_path_us", "true", "fake",
                 "fake_wait_us", "undecided", "waited", "wait_us", "cannot_tell", "cannot_tell_us",
                 "estimated_span_us", "saving_us", "filled")


@dataclass
class Incomplete:
    """Replays of one graph that lack events of some of its GPU nodes: left out of the analysis."""

    graph_id: int
    replays: int  # how many
    of: int  # replays of this graph in the trace
    missing: list[int]  # tools ids of the nodes missing in at least one of them (up to 20)
    correlations: list[int]  # of the first few

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    events: EventMatch | None = None  # the event <-> node match, with replay rows and lanes
    incomplete: list[Incomplete] = field(default_factory=list)
    cannot_tell_reason: str | None = None  # streams: why some late starts are not judged
    source: str = ""  # the trace's path
    channels_in_profiler_trace: bool = False  # a profiler trace (not cgtool's) that carries channels
    channels_from: str | None = None  # where the channels came from: the trace, or a setting of 1 connection

    @functools.cached_property
    def replays(self) -> list[ReplayStat]:
        """Per-replay statistics (built on first use: a trace may hold 100,000s of replays)."""
        t = self.replay_table
        cols = [t[f].tolist() for f in REPLAY_FIELDS]
        return [ReplayStat(*row) for row in zip(*cols)]

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

    def figures(self, graph_id: int | None = None) -> Any:
        """The derived figures (``cgtool.inspect.figures.Figures``) of all graphs, or of one."""
        from cgtool.inspect.figures import figures

        return figures(self, graph_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 2,
            "summary": self.figures().to_json(),
            "cost": self.cost,
            "match_groups": self.match_groups,
            "incomplete_replays": [x.to_json() for x in self.incomplete],
            "serializations": [f.to_json() for f in sorted(
                self.findings, key=lambda f: (f.kind is not DepKind.FAKE, -f.wait_us, f.before, f.after))],
            "inferred_waits": [w.to_json() for w in self.inferred_waits],
            "replays": self._replay_dicts(),
            "notes": self.notes,
            "suggestions": self.suggestions,
        }
