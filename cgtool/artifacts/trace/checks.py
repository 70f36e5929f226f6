"""The checks of a trace's columns and its ``cgtool`` block, made once every event is read: events that
contradict each other are refused, graph ids missing from part of them are warned about."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from cgtool.artifacts.graph import LOW32
from cgtool.artifacts.trace.model import _OVERHEAD_KEYS, _bad
from cgtool.errors import InputWarning
from cgtool.text import short_value


def _check_meta(meta: dict[str, Any], src: str) -> None:
    """The known keys of a trace's ``cgtool`` block have the types cgtool writes."""
    gs = meta.get("graphs")
    if gs is not None and not (isinstance(gs, list) and all(isinstance(g, dict) for g in gs)):
        raise _bad(src, f"cgtool.graphs should be a list of graph exports (objects), not {_short(gs)}. "
                   "Record the trace again.")
    mc = meta.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if mc is not None and not ((isinstance(mc, int) and not isinstance(mc, bool) and 0 < mc < 1 << 16)
                               or (isinstance(mc, str) and mc.isdigit() and len(mc) < 6)):
        raise _bad(src, f"cgtool.CUDA_DEVICE_MAX_CONNECTIONS should be a number of connections (or null), not "
                   f"{_short(mc)}. Record the trace again.")
    for key in ("replays", "dropped_records"):
        v = meta.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 63):
            raise _bad(src, f"cgtool.{key} should be a non-negative integer, not {_short(v)}.")
    ov = meta.get("tracer_overhead")
    if ov is not None:
        bad = not isinstance(ov, dict) or any(
            not isinstance(ov.get(k), (int, float)) or isinstance(ov.get(k), bool) or not math.isfinite(ov[k])
            or (k != "per_item_us" and ov[k] < 0) for k in _OVERHEAD_KEYS)
        if bad:
            raise _bad(src, f"cgtool.tracer_overhead should be an object of finite numbers ({', '.join(_OVERHEAD_KEYS)}; "
                       f"only per_item_us may be negative), not {_short(ov)}. Record the trace again.")


def _short(v: Any) -> str:
    return short_value(v)


def _check_events(src: str, seq: np.ndarray, names: list[str], name: np.ndarray, kind: np.ndarray,
                  start: np.ndarray, end: np.ndarray, stream: np.ndarray, device: np.ndarray, corr: np.ndarray,
                  tools: np.ndarray, gid: np.ndarray, launches: dict[int, float]) -> None:
    """Refuse GPU events that contradict each other; warn when graph ids are missing from part of them."""
    n = len(start)
    if n < 2:
        return
    # The same event listed twice (a file concatenated with itself, an edit): every column equal.
    # Only events sharing a start with another can be one, so the full sort runs on those alone
    # (in file order: the sort is stable, so they keep the order a sort of every event gives).
    by_start = np.sort(start)
    tie = by_start[1:] == by_start[:-1]
    if tie.any():
        tied = np.zeros(n, dtype=bool)
        tied[1:] |= tie
        tied[:-1] |= tie
        cand = np.flatnonzero(np.isin(start, by_start[tied]))
    else:
        cand = np.zeros(0, np.int64)
    order = cand[np.lexsort((name[cand], stream[cand], device[cand], corr[cand], end[cand], start[cand]))]
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
    for col in (start, end, stream, device, corr, name, kind, tools):
        sc = col[order]
        same &= sc[1:] == sc[:-1]
    if same.any():
        k = int(np.flatnonzero(same)[0])
        a, b = sorted((int(seq[order[k]]), int(seq[order[k + 1]])))
        raise _bad(src, f"traceEvents[{a}] and traceEvents[{b}] are the same GPU event ({names[int(name[order[k]])][:40]!r} "
                   f"at {float(start[order[k]])} µs), listed twice; a profiler lists each once, so the file was "
                   f"concatenated or edited ({int(same.sum())} such duplicates). Record the trace again.")
    # One graph node runs once per launch: a (launch, node) pair seen twice makes replays meaningless.
    on = tools > 0
    if on.any() and _may_repeat(corr[on], tools[on] >> 32, tools[on] & LOW32):
        c_on, t_on = corr[on], tools[on]
        o = np.lexsort((t_on, c_on))
        c_on, t_on = c_on[o], t_on[o]
        dup = (c_on[1:] == c_on[:-1]) & (t_on[1:] == t_on[:-1])
        if dup.any():
            runs = np.flatnonzero(np.r_[True, ~dup, True])
            counts = np.diff(runs)  # multiplicity of each distinct (correlation, node) pair, in sorted order
            i = int(runs[int(np.flatnonzero(counts > 1)[0])])
            c, t = int(c_on[i]), int(t_on[i])
            raise _bad(src, f"graph node {t} (graph {t >> 32}, node {t & LOW32}) runs {int(counts.max())} times "
                       f"under one correlation id ({c}); a node runs once per launch, so launches share a "
                       "correlation id (the file was edited or merged). Record the trace again.")
    # Events of graph launches without graph ids, beside others that carry them: dropped from the graph view.
    if on.any() and launches:
        in_launch = np.isin(corr, np.fromiter(launches, np.int64, len(launches)))
        lost = in_launch & (gid == 0)
        if lost.any() and (in_launch & on).any():
            warnings.warn(InputWarning(
                f"{src}: {int(lost.sum())} of {int(in_launch.sum())} GPU events launched by cudaGraphLaunch carry "
                "no graph id while the others do; they are counted as work outside graphs (dropped from the "
                "graph analysis). The trace may have been edited or recorded with a partial profiler."),
                stacklevel=2)


def _may_repeat(*cols: np.ndarray) -> bool:
    """False where no row of the integer columns repeats; True where one may (then the caller's
    exact check, which sorts the rows, decides and names the first repeat). The rows are one int64
    key in mixed radix, counted in a table where the key's range is a few times the rows, else
    sorted. Hand-written for speed: the lexsort of every pair was most of the checks' time
    (docs/performance.md#hand-written-code), and a valid trace repeats no pair."""
    n = len(cols[0])
    key: np.ndarray | None = None
    room = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        width = hi - lo + 1
        if room * width >= 2**62:  # too wide for one key: let the exact check decide
            return True
        key = (c - lo) if key is None else key * width + (c - lo)
        room *= width
    assert key is not None
    if room <= 4 * n + 4096:
        return bool(np.bincount(key, minlength=room).max() > 1)
    s = np.sort(key)
    return bool((s[1:] == s[:-1]).any())


def _ctype(v: int | str, names: list[str]) -> int:
    if isinstance(v, int):
        return v
    if v not in names:
        names.append(v)
    return 1000 + names.index(v)
