"""One set of derived figures per graph and trace, computed once from a ``DepsResult`` and shown
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

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cgtool.inspect.results import DepKind, DepsResult, Lane, MatchKind


@dataclass(frozen=True)
class Figures:
    source: str
    graphs: list[int]
    replays: int
    span_median_us: float | None
    span_mean_us: float | None
    critical_path_us: float | None  # measured; median over replays
    lane: Lane
    channels_from: str | None  # "the trace", or the setting of one connection that implies channel 0
    match: MatchKind
    certainty: dict[str, int]
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
        d = asdict(self)
        del d["source"]  # the document says where it came from; equal traces give equal figures
        d["lane"], d["match"] = self.lane.value, self.match.value
        d["fake_visible"] = self.fake_visible
        # the names earlier readers know, beside the labelled ones
        d["distinct_true"], d["distinct_fake"] = self.true_pairs, self.fake_pairs
        d["mean_span_us"], d["median_span_us"] = self.span_mean_us, self.span_median_us
        return d


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
        graphs=[graph_id] if graph_id is not None else list(res.graphs),
        replays=n,
        span_median_us=_r(float(np.median(spans))) if n else None,
        span_mean_us=_r(float(spans.mean())) if n else None,
        critical_path_us=_r(float(np.median(crit))) if n else None,
        lane=res.lane, channels_from=res.channels_from, match=res.match, certainty=certainty,
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
