"""What a replay's order costs: the measured critical path, and a list schedule of the replay.

One definition of the **measured critical path**, used by ``topo --trace``, ``deps`` and ``dot
--trace``: per replay, the longest path through the graph with each node weighted by its measured
duration in that replay (nodes without GPU work weigh 0). It is the lower bound on that replay's
span. The figure reported for a trace is the **median over replays**, and the path drawn is the
longest path of that median replay.

A **wait** is time a node sat ready (its graph predecessors done) before it started. A wait is not
a loss: if other work kept the GPU busy meanwhile, the replay was no longer for it. What a fake
serialization *costs* is estimated by re-scheduling the replay from its measured durations:

* the **list schedule** starts each event as soon as its graph predecessors and the events it was
  serialized behind on its lane (channel, or stream) have finished, in observed start order; with
  every observed serialization it reproduces the replay's order, and without one serialization it
  shows what that order cost;
* the GPU's capacity bounds any schedule from below: a kernel of ``b`` blocks on a GPU of ``S``
  SMs covers ``min(1, b/S)`` of it, and the **area** of a replay is the time integral of the
  covered share, capped at 1 (``gpu_area``): the full-GPU time the replay's work took. Kernels
  that shared the GPU ran longer, but the cap counts that time once, so the area is the work
  to be done however the kernels are ordered. The estimated span is ``max(schedule, area)``;
* the **saving** of removing serializations is the estimated span with them minus without them.
  When ``area`` is close to the measured span (``FILLED_SHARE``) the concurrent work already
  filled the GPU: overlapping more cannot shorten the replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cgtool.inspect.analyzers._arrays import median

#: The replay counts as filling the GPU when its kernels' area is at least this share of its span.
FILLED_SHARE = 0.9
#: Suggestions are made only when the estimated saving is at least this share of the span.
MEANINGFUL_SHARE = 0.05


@dataclass(frozen=True)
class CriticalPath:
    """The measured critical path of a trace's replays of one graph."""

    lengths_us: np.ndarray  # per replay
    path: list[int]  # node indices along the longest path of the median replay

    @property
    def median_us(self) -> float:
        return median(self.lengths_us) if len(self.lengths_us) else 0.0


def critical_path(deps: Sequence[Sequence[int]], order: Sequence[int], dur: np.ndarray) -> CriticalPath:
    """``dur``: [replays, nodes] measured µs (0 for nodes without GPU work or not traced);
    ``deps[v]``: node v's direct predecessors; ``order``: a topological order."""
    n_rep, n = dur.shape
    if n == 0 or n_rep == 0:
        return CriticalPath(np.zeros(n_rep), [])
    L = np.zeros((n_rep, n))
    for v in order:
        d = deps[v]
        if d:
            L[:, v] = dur[:, v] + (L[:, list(d)].max(axis=1) if len(d) > 1 else L[:, d[0]])
        else:
            L[:, v] = dur[:, v]
    lengths = L.max(axis=1)
    med = int(np.argsort(lengths, kind="stable")[(n_rep - 1) // 2])
    row = L[med]
    v = int(np.argmax(row))
    path = [v]
    while deps[v]:
        v = max(deps[v], key=lambda u: (row[u], -u))
        path.append(v)
    path.reverse()
    return CriticalPath(lengths, path)


def gpu_area(start: Sequence[float], end: Sequence[float], cover: Sequence[float]) -> float:
    """∫ min(1, Σ cover of the items running at t) dt over the items' intervals."""
    pts = sorted([(s, c) for s, c in zip(start, cover)] + [(e, -c) for e, c in zip(end, cover)])
    area = 0.0
    level = 0.0
    t_prev = pts[0][0] if pts else 0.0
    for t, dc in pts:
        if t > t_prev:
            area += min(1.0, max(level, 0.0)) * (t - t_prev)
            t_prev = t
        level += dc
    return area


def mean_cover(lo: float, hi: float, start: Sequence[float], end: Sequence[float], cover: Sequence[float]) -> float:
    """Mean over [lo, hi) of the summed cover of the items running (uncapped)."""
    if hi <= lo:
        return 0.0
    tot = 0.0
    for s, e, c in zip(start, end, cover):
        ov = min(e, hi) - max(s, lo)
        if ov > 0:
            tot += c * ov
    return tot / (hi - lo)


def mean_cover_many(lo: np.ndarray, hi: np.ndarray, group_q: np.ndarray, start: np.ndarray, end: np.ndarray,
                    cover: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``mean_cover`` for many queries at once: query k asks about [lo[k], hi[k]) among the items of
    group ``group_q[k]`` (items: ``start``/``end``/``cover``/``group`` arrays). Uses the integral
    F(x) = Σ_{s ≤ x} c·(x − s) − Σ_{e ≤ x} c·(x − e) over items laid out one group after another."""
    out = np.zeros(len(lo))
    if not len(lo) or not len(start):
        return out
    n_groups = int(max(group.max(), group_q.max())) + 1
    t0 = np.full(n_groups, np.inf)
    np.minimum.at(t0, group, start)
    t0[np.isinf(t0)] = 0.0
    width = float(np.max(end - t0[group])) + 1.0 + float(np.max(hi - t0[group_q]).clip(0))
    S = group * width + (start - t0[group])
    E = group * width + (end - t0[group])

    # The sorted keys and prefix sums, made once for both ends of every query.
    sums = []
    for key, sign in ((S, 1.0), (E, -1.0)):
        o = np.argsort(key, kind="stable")
        k, c = key[o], cover[o]
        sums.append((k, np.concatenate([[0.0], np.cumsum(c)]), np.concatenate([[0.0], np.cumsum(c * k)]), sign))
        del o, c

    def F(x: np.ndarray) -> np.ndarray:
        total = np.zeros(len(x))
        for k, pc, pck, sign in sums:
            i = np.searchsorted(k, x, side="right")
            total += sign * (x * pc[i] - pck[i])
        return total

    xl = group_q * width + (lo - t0[group_q])
    xh = group_q * width + (hi - t0[group_q])
    span = hi - lo
    ok = span > 0
    out[ok] = (F(xh) - F(xl))[ok] / span[ok]
    return out


def list_schedule(dur: Sequence[float], preds: Sequence[Sequence[int]]) -> float:
    """Span of the schedule that starts each item (given in a topological order: observed start
    order) when all of ``preds[i]`` (earlier items) have finished, the first ones at 0."""
    fin = [0.0] * len(dur)
    span = 0.0
    for i, d in enumerate(dur):
        s = 0.0
        for p in preds[i]:
            if fin[p] > s:
                s = fin[p]
        fin[i] = s + d
        if fin[i] > span:
            span = fin[i]
    return span


@dataclass
class ReplayModel:
    """One replay, ready to be re-scheduled: events in start order."""

    dur: list[float]
    graph_preds: list[list[int]]  # positions of the events of the node's GPU predecessors
    lane_preds: list[list[tuple[int, int]]]  # (position of A, finding id or -1) serializations A -> this
    area_us: float | None  # Σ min(1, blocks/SMs) · duration over kernels; None when unknown
    span_us: float  # measured

    def span(self, drop: int | None = None, drop_all: bool = False) -> float:
        """Estimated span with the observed serializations, without finding ``drop``'s, or
        (``drop_all``) without any serialization that is not a graph dependency."""
        preds = [gp + [a for a, f in lp if not (drop_all and f >= 0) and (drop is None or f != drop)]
                 for gp, lp in zip(self.graph_preds, self.lane_preds)]
        s = list_schedule(self.dur, preds)
        return max(s, self.area_us) if self.area_us is not None else s

    @property
    def filled(self) -> bool:
        return self.area_us is not None and self.area_us >= FILLED_SHARE * self.span_us


def span_stats(spans: np.ndarray) -> dict[str, Any]:
    """Median and spread of per-replay spans."""
    if not len(spans):
        return {"replays": 0, "median_us": None, "iqr_us": None}
    q1, med, q3 = np.percentile(spans, [25, 50, 75])
    return {"replays": int(len(spans)), "median_us": round(float(med), 3), "iqr_us": round(float(q3 - q1), 3),
            "min_us": round(float(spans.min()), 3), "max_us": round(float(spans.max()), 3)}


def compare_spans(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Judge two traces of the same graph by measured span per replay: B against A."""
    sa, sb = span_stats(a), span_stats(b)
    out: dict[str, Any] = {"a": sa, "b": sb}
    if not len(a) or not len(b):
        out["verdict"] = "no replays to compare"
        return out
    diff = sb["median_us"] - sa["median_us"]
    spread = max(sa["iqr_us"], sb["iqr_us"])
    out["difference_us"] = round(diff, 3)
    out["difference_share"] = round(diff / sa["median_us"], 4) if sa["median_us"] else None
    if abs(diff) <= spread or abs(diff) < 0.01 * sa["median_us"]:
        out["verdict"] = "same"  # within the run-to-run spread (IQR) or under 1%
    else:
        out["verdict"] = "b faster" if diff < 0 else "b slower"
    return out
