"""What the fake serializations cost: sampled replays re-scheduled with and without them
(``cgtool.inspect.cost``: a list schedule from the measured durations, bounded below by the GPU's
capacity). On a trace without channels, what is re-scheduled without are the waits inferred from
timing (``waits``): the figure is then an estimate of what those waits would cost if they were
fake serializations, and says so.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from cgtool.inspect import cost as costmod
from cgtool.inspect.analyzers._arrays import distinct
from cgtool.inspect.analyzers.matching import PreparedGraph
from cgtool.inspect.results import DepKind, EventMatch, Finding, InferredWait


#: Re-scheduling is Python work per replay: at most this many replays (evenly spaced) and findings.
ESTIMATE_REPLAYS = 32
ESTIMATE_FINDINGS = 20


def estimate(prepared: dict[int, PreparedGraph], m: EventMatch, start: np.ndarray, end: np.ndarray, replay: np.ndarray,
             span: np.ndarray, a: np.ndarray, b: np.ndarray, kind: np.ndarray, pair: np.ndarray,
             findings: list[Finding], waits: list[InferredWait], cover: np.ndarray,
             wait_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], est: np.ndarray, saving: np.ndarray,
             filled: np.ndarray) -> dict[str, Any]:
    """Re-schedule sampled replays with and without fake serializations (cgtool.inspect.cost)."""
    n_rep = len(span)
    if n_rep == 0:
        return {}
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
    for t, vals in per_tag.items():
        if t < n_find:
            findings[t].saving_us = float(np.mean(vals))
        else:
            waits[t - n_find].saving_us = float(np.mean(vals))
    done = ~np.isnan(saving)
    mean_span = float(span[done].mean()) if done.any() else 0.0
    mean_saving = float(saving[done].mean()) if done.any() else 0.0
    return {
        "replays_estimated": int(done.sum()),
        "estimated_span_us": round(float(est[done].mean()), 3) if done.any() else None,
        "saving_us": round(mean_saving, 3),
        "saving_share": round(mean_saving / mean_span, 4) if mean_span else None,
        "filled_replays": int(filled[done].sum()),
        "gpu_filled": bool(done.any() and filled[done].mean() >= 0.5),
        "area_known": not sm_unknown,
    }


