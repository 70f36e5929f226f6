"""How much of the GPU other items covered while an item waited: sums of cover x overlap.

For each query (a wait [lo, hi) of an item in a group, a replay), the sum over the group's items of
``cover * overlap`` where the overlap is positive, the terms added one at a time in the items'
order: exactly as ``cgtool.inspect.cost.mean_cover``'s loop adds them, so a threshold ("the other
kernels covered more than the whole GPU") is decided as the loop decides it, to the bit.

``overlap_sums`` runs compiled (``_cover.c``, why in its header) where built, else in numpy (one pass
per operation over (queries x items a group) blocks): both give the loop's bits (tests/test_cover.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Elements of a (queries x group size) block the numpy version works on at a time.
BLOCK = 1 << 15

_FAST: Any = None


def _compiled() -> Any:
    """The compiled sums (``_cover.c``), or None where it is not built."""
    global _FAST
    if _FAST is None:
        try:
            from cgtool.inspect.analyzers import _cover  # type: ignore[attr-defined]

            _FAST = _cover
        except ImportError:
            _FAST = False
    return _FAST or None


def overlap_sums(lo: np.ndarray, hi: np.ndarray, qgroup: np.ndarray, bounds: np.ndarray, s: np.ndarray,
                 e: np.ndarray, c: np.ndarray, skip: np.ndarray | None = None, *,
                 compiled: bool | None = None) -> np.ndarray:
    """Per query k: the sum over positions p of group ``qgroup[k]`` (``bounds[g]`` to ``bounds[g + 1]``
    - 1, in order; ``skip[k]`` left out) of ``c[p] * ov``, where ``ov = min(e[p], hi[k]) - max(s[p],
    lo[k])`` is positive, added one at a time from 0.0. Times are finite. ``compiled``: None for the
    compiled version where built, True or False to choose (tests compare the two)."""
    lo, hi, s, e, c = (np.ascontiguousarray(x, dtype=np.float64) for x in (lo, hi, s, e, c))
    qgroup, bounds = (np.ascontiguousarray(x, dtype=np.int64) for x in (qgroup, bounds))
    sk = None if skip is None else np.ascontiguousarray(skip, dtype=np.int64)
    out = np.zeros(len(lo))
    fast = _compiled() if compiled is not False else None
    if compiled and fast is None:
        raise RuntimeError("the compiled cover sums (cgtool/inspect/analyzers/_cover.c) are not built")
    if fast is not None:
        fast.sums(lo, hi, qgroup, bounds, s, e, c, sk, out)
        return out
    counts = np.diff(bounds)
    size = counts[qgroup]
    row = np.zeros(len(counts), np.int64)
    for w in np.unique(size).tolist():
        if w <= 0:
            continue
        sel = np.flatnonzero(size == w)
        groups = np.flatnonzero(counts == w)
        row[groups] = np.arange(len(groups))
        pos = bounds[groups][:, None] + np.arange(w)  # the groups of this size as rows
        S, E, C = s[pos], e[pos], c[pos]
        step = max(1, BLOCK // w)
        for a in range(0, len(sel), step):
            k = sel[a:a + step]
            r = row[qgroup[k]]
            ov = np.minimum(E[r], hi[k][:, None])
            ov -= np.maximum(S[r], lo[k][:, None])
            keep = ov > 0
            if sk is not None:
                j = sk[k] - bounds[qgroup[k]]
                inside = (j >= 0) & (j < w)
                keep[np.flatnonzero(inside), j[inside]] = False
            ov *= C[r]
            # Terms left out add +0.0, which leaves a sum unchanged; cumsum adds in order (a
            # reduction would add pairwise and round otherwise).
            out[k] = np.cumsum(np.where(keep, ov, 0.0), axis=1)[:, -1]
    return out


def mean_cover_grouped(lo: np.ndarray, hi: np.ndarray, group_q: np.ndarray, start: np.ndarray, end: np.ndarray,
                       cover: np.ndarray, group: np.ndarray, *, compiled: bool | None = None) -> np.ndarray:
    """``cost.mean_cover`` for many queries, to the bit: query k asks about [lo[k], hi[k]) among the
    items of group ``group_q[k]`` (items: the ``start``/``end``/``cover``/``group`` arrays, taken in
    their index order within a group); 0 where hi <= lo."""
    out = np.zeros(len(lo))
    if not len(lo) or not len(start):
        return out
    n_groups = int(max(group.max(), group_q.max())) + 1
    counts = np.bincount(group, minlength=n_groups)
    if len(group) > 1 and not bool(np.all(group[1:] >= group[:-1])):
        o = np.argsort(group, kind="stable")  # stable: each group's items stay in index order
        start, end, cover = start[o], end[o], cover[o]
    bounds = np.zeros(n_groups + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    tot = overlap_sums(lo, hi, group_q, bounds, start, end, cover, compiled=compiled)
    span = hi - lo
    ok = span > 0
    out[ok] = tot[ok] / span[ok]
    return out
