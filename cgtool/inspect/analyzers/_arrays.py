"""Array helpers the analyzers share."""

from __future__ import annotations

import numpy as np

from cgtool.errors import InvalidInputError


def dense(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense id per row, index of each id's first row) for the combination of integer columns.

    Each column is ranked on its own, then the ranks are combined in mixed radix into one int64
    key (a 1-D unique is far faster than numpy's row-wise unique)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.zeros(len(cols[0]), dtype=np.int64)
    room = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        width = hi - lo + 1
        if width == 1:  # one value (the device, the graph of a one-graph trace): the key stays
            continue
        if room * width < 2**62:  # combine the values directly
            if room == 1:
                key = c.astype(np.int64)
                key -= lo
            else:  # in place, each step within int64: key * width - lo + c
                key *= width
                key -= lo
                key += c
            room *= width
        else:  # rank first (one more sort) to keep the key small
            u, r = np.unique(c, return_inverse=True)
            if room * len(u) >= 2**62:  # the key so far to its ranks too (the same order, a smaller room)
                done, inv_key = np.unique(key, return_inverse=True)
                key, room = inv_key.reshape(-1), len(done)
            key = key * len(u) + r.reshape(-1)
            room *= len(u)
            if room >= 2**62:  # pragma: no cover - would need billions of distinct values
                raise InvalidInputError("Too many distinct replays or lanes to index.")
    n = len(key)
    if room <= 4 * n + 4096:
        # The keys fit a table a few times the rows: rank them through it (one pass each way)
        # instead of sorting them; the same ids and first rows as np.unique's.
        seen = np.zeros(room, dtype=bool)
        seen[key] = True
        rank = np.cumsum(seen, dtype=np.int64) - 1  # ids in increasing key order
        inv = rank[key]
        first = np.full(int(rank[-1]) + 1, n, dtype=np.int64)
        np.minimum.at(first, inv, np.arange(n, dtype=np.int64))
        return inv, first
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for integers: through a table of their range where it is a few times
    the values at most, else by a sort. np.unique itself (numpy 2) goes through
    ``np.ma.is_masked``, whose first use imports numpy.ma, a cost of every `cgtool deps` run
    (docs/performance.md#hand-written-code), and its hash table is no faster on ids."""
    if not len(values):
        return values[:0].copy()
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * len(values) + 4096:
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[values - lo] = True
        return (np.flatnonzero(present) + lo).astype(values.dtype, copy=False)
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a 1-D array, by the same steps (a partition at the middle
    and, for floats, at the end; the mean of the middle one or two; NaN where the end is NaN)
    without np.median's masked-array check, whose first use imports numpy.ma (see ``distinct``)."""
    a = np.asarray(values).reshape(-1)
    n = len(a)
    if not n:
        return float(np.median(a))  # NaN, with numpy's warning
    kth = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2]
    inexact = a.dtype.kind in "fc"
    if inexact:
        kth.append(-1)
    part = np.partition(a, kth)
    mid = float(np.mean(part[n // 2 - 1:n // 2 + 1] if n % 2 == 0 else part[n // 2:n // 2 + 1]))
    return float(part[-1]) if inexact and np.isnan(part[-1]) else mid


def unique_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` (inverse flat) for ids that are small non-negative
    integers (dense replay ids): through a table of the ids' range, without np.unique's sort."""
    if not len(values) or int(values.min()) < 0 or int(values.max()) > 4 * len(values) + 4096:
        u, inv = np.unique(values, return_inverse=True)
        return u, inv.reshape(-1)
    present = np.zeros(int(values.max()) + 1, dtype=bool)
    present[values] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present), rank[values]


def latest_before(start: np.ndarray, end: np.ndarray, group: np.ndarray, tol: float) -> np.ndarray:
    """For each item B: the item A of the same group that ended last with A.end <= B.start + tol
    and A.start < B.start (ties on the end: the one that started last); -1 where none."""
    n = len(start)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    base = float(start.min())
    s_ns = np.rint((start - base) * 1000).astype(np.int64)
    e_ns = np.rint((end - base) * 1000).astype(np.int64)
    tol_ns = int(round(tol * 1000))
    width = int(max(e_ns.max(), s_ns.max())) + tol_ns + 2
    if (int(group.max()) + 1) * width >= 2**62:  # pragma: no cover - would need years of trace
        raise InvalidInputError("The trace spans too long a time to analyse in one piece; split it.")
    # Sorted by (group, end, start): one argsort of the (group, end) key, which gives that order
    # unless two items of a group end at the same ns (then the three-key lexsort): one sort
    # instead of three (docs/performance.md#hand-written-code).
    key_all = group * width + e_ns
    order = np.argsort(key_all, kind="stable")
    key = key_all[order]
    if len(key) > 1 and bool((key[1:] == key[:-1]).any()):
        order = np.lexsort((s_ns, e_ns, group))
        key = key_all[order]
    query = group * width + s_ns + tol_ns
    k = np.searchsorted(key, query, side="right") - 1
    idx = np.arange(n)
    todo = idx
    while len(todo):
        kk = k[todo]
        ok_k = kk >= 0
        cand = np.where(ok_k, order[np.maximum(kk, 0)], 0)
        same = ok_k & (group[cand] == group[todo])
        good = same & (cand != todo) & (s_ns[cand] < s_ns[todo])
        out[todo[good]] = cand[good]
        retry = same & ~good
        k[todo[retry]] -= 1
        todo = todo[retry]
    return out
