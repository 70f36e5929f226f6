"""What the fake serializations cost: sampled replays re-scheduled with and without them
(``cgtool.inspect.cost``: a list schedule from the measured durations, bounded below by the GPU's
capacity). On a trace without channels, what is re-scheduled without are the waits inferred from
timing (``waits``): the figure is then an estimate of what those waits would cost if they were
fake serializations, and says so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from cgtool.inspect import cost as costmod
from cgtool.inspect.analyzers._arrays import distinct
from cgtool.inspect.analyzers.matching import PreparedGraph
from cgtool.inspect.results import DepKind, EventMatch, Finding, InferredWait


#: Re-scheduling is Python work per replay: at most this many replays (evenly spaced) and findings.
ESTIMATE_REPLAYS = 32
ESTIMATE_FINDINGS = 20


@dataclass(frozen=True)
class Estimate:
    """What re-scheduling sampled replays gave; ``deps.analyze`` builds its result from it. Per
    replay (dense replay id), NaN (``filled``: False) where the replay was not re-scheduled."""

    cost: Mapping[str, Any]  # the deps document's "cost" (empty: nothing estimated)
    span_us: np.ndarray  # the list schedule's span with the observed serializations
    saving_us: np.ndarray  # how much shorter the schedule is without any fake serialization (or inferred wait)
    filled: np.ndarray  # the kernels' area is close to the span: the GPU was full
    finding_saving_us: Mapping[int, float]  # index into the findings -> mean saving without that one
    wait_saving_us: Mapping[int, float]  # index into the inferred waits -> mean saving without that one


def nothing(n_rep: int) -> Estimate:
    """No estimate (``analyze(..., estimate=False)``): every figure unknown."""
    return Estimate({}, np.full(n_rep, np.nan), np.full(n_rep, np.nan), np.zeros(n_rep, dtype=bool), {}, {})


def estimate(prepared: dict[int, PreparedGraph], m: EventMatch, start: np.ndarray, end: np.ndarray, replay: np.ndarray,
             span: np.ndarray, a: np.ndarray, b: np.ndarray, kind: np.ndarray, pair: np.ndarray,
             findings: Sequence[Finding], waits: Sequence[InferredWait], cover: np.ndarray,
             wait_pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Estimate:
    """Re-schedule sampled replays with and without fake serializations (cgtool.inspect.cost): per
    replay, and per finding and wait for the ``ESTIMATE_FINDINGS`` of each that waited longest."""
    n_rep = len(span)
    if n_rep == 0:
        return nothing(0)
    est, saving = np.full(n_rep, np.nan), np.full(n_rep, np.nan)  # per replay, filled in for those re-scheduled
    filled = np.zeros(n_rep, dtype=bool)
    # Serializations that order events: true and fake lane pairs, and (streams) inferred waits.
    # Each is tagged with the finding it belongs to (fake ones) or -1 (true: implied by the graph).
    n_find = len(findings)
    w_b, w_a, w_id = wait_pairs
    fake_tag = np.where(kind == 1, pair, -1) if len(b) else np.zeros(0, np.int64)
    undecided_tag = kind == 2
    all_b = np.concatenate([b, w_b])
    all_a = np.concatenate([a, w_a])
    all_tag = np.concatenate([np.where(undecided_tag, -1, fake_tag), w_id + n_find])
    pick = distinct(np.linspace(0, n_rep - 1, min(n_rep, ESTIMATE_REPLAYS)).round().astype(np.int64))
    in_pick = np.isin(replay[all_b], pick)
    by_b: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for bb, aa, tt in zip(all_b[in_pick].tolist(), all_a[in_pick].tolist(), all_tag[in_pick].tolist()):
        by_b[bb].append((aa, tt))
    order = np.lexsort((end, start, replay))
    bounds = np.searchsorted(replay[order], np.arange(n_rep + 1))
    # Candidates for per-finding estimates: the fake findings and waits that waited longest.
    fake_ids = sorted((k for k, f in enumerate(findings) if f.kind is DepKind.FAKE),
                     key=lambda k: -findings[k].wait_us)[:ESTIMATE_FINDINGS]
    wait_ids = sorted(range(len(waits)), key=lambda k: -waits[k].wait_us)[:ESTIMATE_FINDINGS]
    tags = fake_ids + [n_find + k for k in wait_ids]
    per_tag: dict[int, list[float]] = defaultdict(list)
    sm_unknown = False
    for r in pick.tolist():
        pos = order[bounds[r]:bounds[r + 1]]
        if not len(pos):
            continue
        gid = int(m.graph[pos[0]])
        pg = prepared[gid]
        model = pg.model
        where = {int(p): k for k, p in enumerate(pos.tolist())}
        node_pos = {int(m.node[p]): k for k, p in enumerate(pos.tolist())}
        dur = (end[pos] - start[pos]).tolist()
        gpreds = [[node_pos[u] for u in model.preds.get(int(m.node[p]), ()) if u in node_pos] for p in pos.tolist()]
        lpreds = [[(where[aa], tt) for aa, tt in by_b.get(int(p), ()) if aa in where] for p in pos.tolist()]
        cv = cover[pos]
        area = None
        if np.isnan(cv).any():
            sm_unknown = True
        else:
            area = costmod.gpu_area(start[pos].tolist(), end[pos].tolist(), cv.tolist())
        rm = costmod.ReplayModel(dur, gpreds, lpreds, area, float(span[r]))
        with_all = rm.span()
        est[r] = with_all
        saving[r] = max(0.0, with_all - rm.span(drop_all=True))
        filled[r] = rm.filled
        present = {tt for lp in lpreds for _, tt in lp}
        for t in tags:
            if t in present:
               per_tag[t].append(max(0.0, with_all - rm.span(drop=t)))
    mean_of = {t: float(np.mean(vals)) for t, vals in per_tag.items()}
    done = ~np.isnan(saving)
    mean_span = float(span[done].mean()) if done.any() else 0.0
    mean_saving = float(saving[done].mean()) if done.any() else 0.0
    cost = {
        "replays_estimated": int(done.sum()),
        "estimated_span_us": round(float(est[done].mean()), 3) if done.any() else None,
        "saving_us": round(mean_saving, 3),
        "saving_share": round(mean_saving / mean_span, 4) if mean_span else None,
        "filled_replays": int(filled[done].sum()),
        "gpu_filled": bool(done.any() and filled[done].mean() >= 0.5),
        "area_known": not sm_unknown,
    }
    return Estimate(cost, est, saving, filled, {t: v for t, v in mean_of.items() if t < n_find},
                    {t - n_find: v for t, v in mean_of.items() if t >= n_find})


