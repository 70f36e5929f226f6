"""NCCL kernels inside graph replays, per rank of a per-rank trace set (``cgtool deps DIR``).

Per rank and graph, over its traced replays (the GPU items of one replay share the graph launch's
correlation id):

* ``nccl_share``: the time covered by NCCL kernels (the union of their intervals) over the replay's
  span (first item's start to last item's end);
* ``nccl_overlap``: the part of that NCCL time during which another (non-NCCL) kernel of the same
  replay ran on the same GPU;
* ``wait_us``: how long this rank's last collective of the replay ran beyond the shortest one among
  the ranks, for the same replay: the time it waited for the last rank to arrive.

Across ranks, ``start_skew_us``: the spread of the ranks' replay starts. Timestamps of different
processes are not on one clock (tests/data/tp_mlp_2gpu: two ranks of one host whose first replays
sit apart in a way no all-reduce allows; docs/workloads.md), so each rank's times are taken relative
to the end of its replay's last NCCL kernel, which an all-reduce ends at nearly the same moment on
every rank; the skew is then the spread of ``replay start - collective end``. Replays are matched across ranks by
their order; where ranks traced different numbers of replays, or a replay holds no NCCL kernel, the
cross-rank figures are unknown with the reason (null in JSON). Means over replays; the per-replay
values travel in JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cgtool.artifacts.trace import Trace


def is_nccl(name: str) -> bool:
    return "nccl" in name.lower()


def union_length(iv: Sequence[tuple[float, float]]) -> float:
    """Total length covered by the intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(iv):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _merge(iv: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def intersection_length(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Length of (union of a) ∩ (union of b)."""
    x, y = _merge(a), _merge(b)
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            total += hi - lo
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class ReplayNccl:
    """One replay on one rank (µs)."""

    correlation: int
    start: float
    end: float
    nccl_us: float  # union of the NCCL kernels' intervals
    overlap_us: float  # of which other kernels of the replay ran too
    last_start: float | None  # the last NCCL kernel (by end): its start and end
    last_end: float | None
    nccl_kernels: int

    @property
    def span_us(self) -> float:
        return self.end - self.start


@dataclass
class RankNccl:
    """One rank's replays of one graph, in start order."""

    rank: int
    graph_id: int
    replays: list[ReplayNccl]
    wait_us: list[float | None] = field(default_factory=list)  # per replay, filled across ranks

    def figures(self) -> dict[str, Any]:
        with_nccl = [r for r in self.replays if r.nccl_kernels]
        shares = [r.nccl_us / r.span_us for r in with_nccl if r.span_us > 0]
        overlaps = [r.overlap_us / r.nccl_us for r in with_nccl if r.nccl_us > 0]
        waits = [w for w in self.wait_us if w is not None]
        return {
            "replays": len(self.replays),
            "nccl_kernels_per_replay": with_nccl[0].nccl_kernels if with_nccl else 0,
            "span_us": _mean([r.span_us for r in self.replays]),
            "nccl_us": _mean([r.nccl_us for r in with_nccl]),
            "nccl_share": _mean(shares),
            "nccl_overlap": _mean(overlaps),
            "wait_us": _mean(waits),
            "per_replay": [{"correlation": r.correlation, "span_us": round(r.span_us, 4),
                            "nccl_us": round(r.nccl_us, 4), "overlap_us": round(r.overlap_us, 4),
                            "wait_us": None if w is None else round(w, 4)}
                           for r, w in zip(self.replays, self.wait_us or [None] * len(self.replays))],
        }


def _mean(xs: Sequence[float]) -> float | None:
    return float(statistics.fmean(xs)) if xs else None


def rank_replays(trace: Trace, rank: int) -> list[RankNccl]:
    """Per graph of the trace that has NCCL kernels: its replays on this rank."""
    if not len(trace):
        return []
    nccl_name = np.array([is_nccl(n) for n in trace.names] or [False], dtype=bool)
    gpu = trace.graph_id > 0 if trace.has_graph_ids else np.isin(trace.correlation, list(trace.launches))
    out = []
    for gid in sorted({int(g) for g in np.unique(trace.graph_id[gpu])}):
        sel = np.flatnonzero(gpu & (trace.graph_id == gid))
        if not nccl_name[trace.name[sel]].any():
            continue
        replays = []
        for corr in np.unique(trace.correlation[sel]):
            idx = sel[trace.correlation[sel] == corr]
            st, en = trace.start[idx], trace.end[idx]
            kernel = trace.kind[idx] == 0
            nc = nccl_name[trace.name[idx]] & kernel
            n_iv = list(zip(st[nc].tolist(), en[nc].tolist()))
            o_iv = list(zip(st[kernel & ~nc].tolist(), en[kernel & ~nc].tolist()))
            last = int(np.argmax(np.where(nc, en, -np.inf))) if nc.any() else None
            replays.append(ReplayNccl(
                int(corr), float(st.min()), float(en.max()), union_length(n_iv), intersection_length(n_iv, o_iv),
                float(st[last]) if last is not None else None, float(en[last]) if last is not None else None,
                int(nc.sum())))
        replays.sort(key=lambda r: r.start)
        out.append(RankNccl(rank, gid, replays))
    return out


@dataclass(frozen=True)
class CollectiveFigures:
    """The figures of every rank, and across ranks (per graph position: the k-th NCCL graph of each rank)."""

    ranks: dict[int, list[RankNccl]]
    skew: list[dict[str, Any]]  # per graph position: start_skew_us per replay, mean, max; or why unknown

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "per replay (kernels sharing the launch's correlation id): NCCL kernels' union over the "
                      "replay's span; the part of it overlapped by the replay's other kernels; across ranks, "
                      "times relative to the end of each rank's last NCCL kernel of the replay",
            "ranks": {str(r): [dict(graph_id=g.graph_id, **g.figures()) for g in gs] for r, gs in self.ranks.items()},
            "across_ranks": self.skew,
        }

    @property
    def empty(self) -> bool:
        return not any(self.ranks.values())


def collective_figures(traces: Mapping[int, Trace]) -> CollectiveFigures:
    """The NCCL figures of a per-rank trace set (rank -> its trace)."""
    ranks = {r: rank_replays(t, r) for r, t in sorted(traces.items())}
    skew: list[dict[str, Any]] = []
    n_graphs = min((len(v) for v in ranks.values()), default=0)
    for k in range(n_graphs):
        gs = [ranks[r][k] for r in ranks]
        counts = {g.rank: len(g.replays) for g in gs}
        entry: dict[str, Any] = {"graph_position": k, "graph_ids": {str(g.rank): g.graph_id for g in gs}}
        if len(gs) < 2:
            entry.update(start_skew_us=None, reason="one rank only")
        elif len(set(counts.values())) != 1:
            entry.update(start_skew_us=None, reason=f"the ranks traced different numbers of replays: {counts}")
        else:
            per: list[float | None] = []
            for i in range(next(iter(counts.values()))):
                rs = [g.replays[i] for g in gs]
                if any(r.last_end is None for r in rs):
                    per.append(None)
                    for g in gs:
                        g.wait_us.append(None)
                    continue
                rel = [r.start - r.last_end for r in rs]  # type: ignore[operator]
                per.append(max(rel) - min(rel))
                durs = [r.last_end - r.last_start for r in rs]  # type: ignore[operator]
                for g, d in zip(gs, durs):
                    g.wait_us.append(d - min(durs))
            known = [x for x in per if x is not None]
            entry.update(start_skew_us=[None if x is None else round(x, 4) for x in per],
                         mean_start_skew_us=_mean(known), max_start_skew_us=max(known) if known else None)
        skew.append(entry)
    return CollectiveFigures(ranks, skew)


def of_rank_files(files: Mapping[int, Any], max_bytes: int | None = None) -> CollectiveFigures | None:
    """The figures of per-rank trace files (rank -> path); None when no rank's graphs hold an NCCL kernel."""
    from cgtool.artifacts.trace import load_trace

    kw = {} if max_bytes is None else {"max_bytes": max_bytes}
    figs = collective_figures({r: load_trace(p, **kw) for r, p in files.items()})
    return None if figs.empty else figs
