"""Waits behind unrelated work, inferred from timing (traces without hardware channels).

Without channel data a trace cannot show which items shared a hardware channel, so fake
serializations across streams are not visible. What it can show is a node that started later than
its graph predecessors allowed (**late**): it sat ready. Each late start is sorted into one of:

* **behind unrelated work**: an item with no path to B ended just before B started, while B was
  waiting, and the GPU had room meanwhile — what a fake serialization looks like in the timing;
* **cannot tell**: the GPU was full meanwhile (the kernels running covered at least all of its
  SMs), so a wait for room on the GPU and a wait behind a shared channel look the same; or B
  started while its graph launch was still submitting the graph's work (before the host's
  ``cudaGraphLaunch`` call returned, plus ``SUBMIT_LATENCY_US``), so a wait for the launch to reach
  B and a wait behind a shared channel look the same. A launch-bound replay (many small kernels)
  starts its branches one after another as the launch submits them, at every
  CUDA_DEVICE_MAX_CONNECTIONS setting alike (docs/deps.md, "How sure").

How well this agrees with the exact answer (the same run traced with channels) is measured per
recording in docs/deps.md (``scripts/detection_quality.py``); the wording of ``deps`` follows it.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field

import numpy as np

from cgtool.artifacts.graph import NodeType
from cgtool.inspect.analyzers._arrays import dense
from cgtool.inspect.analyzers.cover import mean_cover_grouped, overlap_sums
from cgtool.inspect.analyzers.matching import PreparedGraph
from cgtool.inspect.results import Certainty, EventMatch, InferredWait

#: A start counts as late when it is this many µs (or the tolerance, if larger) after the node was ready.
LATE_US = 1.0

#: Why late starts on a full GPU are not judged (the "cannot tell" of the output).
FULL_GPU_REASON = ("the GPU was full while they waited (the kernels running covered all of its SMs): a wait for "
                   "room on the GPU and a wait behind a shared hardware channel look the same in the timing")
LAUNCH_REASON = ("the graph's launch was still submitting its work when they started (the host's cudaGraphLaunch "
                 "had not returned): a wait for the launch to reach them and a wait behind a shared hardware "
                 "channel look the same in the timing")
#: How long after its launch's host call returned a graph's last submitted work may start and still
#: count as submitted late: above the latest start of a launch-bound fork/join's last branch on the
#: H100 recordings in tests/data (docs/deps.md, "Traces without channels").
SUBMIT_LATENCY_US = 5.0
UNKNOWN_COVER_REASON = ("the export records no launch grid or SM count, so whether the GPU had room cannot be "
                        "told: late starts are counted as waits behind unrelated work")


#: What the detection is worth, from the table in docs/deps.md (same-run CUPTI traces with their
#: channels and node ids removed, against their own exact answer). Shown beside every inference.
DETECTION_QUALITY = ("inferred from timing: on same-run CUPTI truth (docs/deps.md, 'How sure') timing alone found "
                     "0% of the time fake serializations waited at 1 and 2 connections and left 100% under "
                     "'cannot tell'; at the default setting it reported at most 0.0 µs per replay that were not "
                     "fake. Treat the waits as leads, not findings")
#: Where the exact answer is.
EXACT_ANSWER = ("`cgtool trace` the same workload (its traces carry hardware channels); a trace of "
                "CUDA_DEVICE_MAX_CONNECTIONS=1 (recorded, or --max-connections 1) is read exactly; or judge "
                "the settings by measured span: `cgtool deps A --compare B`")


@dataclass(frozen=True)
class Waits:
    """The late starts of the matched events, sorted into the two kinds, with their pairs."""

    waits: tuple[InferredWait, ...]  # behind unrelated work, one per distinct (graph, B, A), longest first
    b: np.ndarray  # positions of B of each wait occurrence
    a: np.ndarray  # positions of the item it waited behind
    index: np.ndarray  # index into ``waits`` of each occurrence
    cannot_b: np.ndarray  # positions of the late starts that cannot be told
    wait_of: np.ndarray = field(default_factory=lambda: np.zeros(0))  # µs waited, per position (0 if not late)
    reason: str | None = None
    launch_b: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # of cannot_b: during the launch


def coverage(prepared: dict[int, PreparedGraph], m: EventMatch) -> np.ndarray:
    """Per matched event: the share of the GPU its kernel covers, min(1, blocks / SMs); 0 for
    copies and fills; NaN where the export lacks the grid or the SM count."""
    cover = np.full(len(m.ev), np.nan)
    for gid, pg in prepared.items():
        sm = (pg.g.meta.get("environment") or {}).get("sm_count")
        if not isinstance(sm, int) or sm <= 0:
            continue
        per_node = np.full(len(pg.g.nodes), np.nan)
        for nd in pg.g.nodes:
            grid = pg.g.node_extra(nd.index).get("grid")
            if nd.node_type is not NodeType.KERNEL:
                per_node[nd.index] = 0.0
            elif isinstance(grid, list) and grid:
                per_node[nd.index] = min(1.0, float(np.prod(grid)) / sm)
        sel = m.graph == gid
        cover[sel] = per_node[m.node[sel]]
    return cover


def waited_with_room(b: np.ndarray, ready: np.ndarray, start: np.ndarray, end: np.ndarray, replay: np.ndarray,
                     cover: np.ndarray, tol: float) -> np.ndarray:
    """Of the events at positions ``b``: which sat ready longer than the tolerance (and 1 µs)
    while the GPU had room (the other kernels running covered at most the whole GPU, on average;
    replays with a kernel of unknown cover count as having room): ``cover.mean_cover_grouped``, the
    loop of ``cost.mean_cover`` to the bit."""
    late: np.ndarray = np.asarray(start[b] - ready[b] > max(tol, LATE_US))
    if not late.any():
        return late
    known = np.ones(int(replay.max()) + 1, dtype=bool)
    known[replay[np.isnan(cover)]] = False
    q = b[late]
    mean = mean_cover_grouped(ready[q], start[q], replay[q], start, end, np.nan_to_num(cover), replay)
    full = known[replay[q]] & (mean > 1.0)
    late[np.flatnonzero(late)[full]] = False
    return late


def inferred_waits(prepared: dict[int, PreparedGraph], m: EventMatch, start: np.ndarray, end: np.ndarray,
                   ready: np.ndarray, replay: np.ndarray, tol: float, cover: np.ndarray,
                   launch_end: np.ndarray | None = None) -> Waits:
    """Without channel data: B started later than its predecessors allowed; name the unrelated
    item (no path to B) that ended last before B started, while B was waiting. A wait during
    which the other kernels running covered more than the whole GPU (``cover`` summed over the
    wait, on average) is one the timing cannot tell from a wait for room on the GPU, and a start
    no later than ``SUBMIT_LATENCY_US`` after the host call of B's launch returned (``launch_end``,
    per event; NaN or None: unknown, not judged so) one it cannot tell from a wait for the launch
    to submit B: both go into ``cannot_b`` (the latter also into ``launch_b``).

    Vectorized over the late items (every step as in a loop over them, in the same order, so the
    sums round the same): per item, a walk back through its replay's items by end time."""
    late = np.flatnonzero(start - ready > max(tol, LATE_US))
    empty = np.zeros(0, np.int64)
    wait_of = np.where(start - ready > max(tol, LATE_US), start - ready, 0.0)
    reason = UNKNOWN_COVER_REASON if np.isnan(cover).any() else None
    if not len(late):
        return Waits((), empty, empty, empty, empty, wait_of, reason)
    order = np.lexsort((start, end, replay))
    rep_sorted, end_sorted = replay[order], end[order]
    bounds = np.searchsorted(rep_sorted, np.arange(int(replay.max()) + 2))
    r = replay[late]
    lo = bounds[r]
    # k: the last position (in ``order``) of B's replay whose item ended by B's start + tol. One
    # merged sort of items and queries (items first among equal times, as searchsorted "right").
    q = start[late] + tol
    merged = np.lexsort((np.r_[np.zeros(len(order), np.int8), np.ones(len(late), np.int8)],
                         np.r_[end_sorted, q], np.r_[rep_sorted, r]))
    is_q = merged >= len(order)
    qpos = np.flatnonzero(is_q)
    k = np.empty(len(late), np.int64)
    k[merged[qpos] - len(order)] = qpos - np.arange(len(qpos)) - 1
    found = np.full(len(late), -1, np.int64)
    active = np.arange(len(late))
    graph, node = m.graph, m.node
    while len(active):
        ka = k[active]
        inside = ka >= lo[active]
        ai = order[np.where(inside, ka, 0)]
        bi = late[active]
        done = ~inside | (end[ai] <= ready[bi])
        cand = ~done & (ai != bi) & (start[ai] < start[bi])
        related = np.zeros(len(active), bool)
        for gid, pg in prepared.items():
            sel = np.flatnonzero(cand & (graph[bi] == gid))
            if len(sel):
                related[sel] = pg.reach.reachable_many(node[ai[sel]], node[bi[sel]])
        hit = cand & ~related
        found[active[hit]] = ai[hit]
        go = ~done & ~hit
        k[active[go]] -= 1
        active = active[go]
    f = np.flatnonzero(found >= 0)
    qb, qa = late[f], found[f]
    full = gpu_was_full_many(qb, order, bounds, replay, ready, start, end, cover)
    submitting = np.zeros(len(qb), bool)
    if launch_end is not None:
        with np.errstate(invalid="ignore"):
            submitting = start[qb] <= launch_end[qb] + SUBMIT_LATENCY_US  # NaN (unknown): False
    told = full | submitting
    cannot, launch_b = qb[told], qb[submitting]
    why = [r for r, hit in ((LAUNCH_REASON, submitting.any()), (FULL_GPU_REASON, (full & ~submitting).any())) if hit]
    if why:
        reason = "; or ".join(why)
    kb, ka_ = qb[~told], qa[~told]
    if not len(kb):
        return Waits((), empty, empty, empty, cannot, wait_of, reason, launch_b)
    gcode = np.searchsorted(np.array(sorted(prepared), dtype=np.int64), graph[kb])
    key, first = dense(gcode, node[kb], node[ka_])
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # ids in order of first occurrence
    key = rank[key]
    first = np.sort(first)
    counts = np.bincount(key, minlength=len(first))
    total = np.bincount(key, weights=start[kb] - ready[kb], minlength=len(first))
    waits = []
    for j, c, t in zip(first.tolist(), counts.tolist(), total.tolist()):
        gid = int(graph[kb[j]])
        pg = prepared[gid]
        nb, na = int(node[kb[j]]), int(node[ka_[j]])
        waits.append(InferredWait(gid, pg.g.nodes[nb].tools_id, pg.g.nodes[na].tools_id, count=c, wait_us=t,
                                  after_name=pg.name(nb), behind_name=pg.name(na), certainty=wait_certainty(m, gid)))
    by_wait = sorted(range(len(waits)), key=lambda i: -waits[i].wait_us)
    index = np.empty(len(waits), np.int64)
    index[by_wait] = np.arange(len(waits))
    return Waits(tuple(waits[i] for i in by_wait), kb, ka_, index[key], cannot, wait_of, reason, launch_b)


def total_in_order(values: np.ndarray) -> float:
    """The sum of ``values`` added one at a time in order (as a loop adds: the same rounding)."""
    return float(functools.reduce(operator.add, values.tolist(), 0.0))


def gpu_was_full_many(b: np.ndarray, order: np.ndarray, bounds: np.ndarray, replay: np.ndarray, ready: np.ndarray,
                      start: np.ndarray, end: np.ndarray, cover: np.ndarray) -> np.ndarray:
    """Whether the GPU was full while each item at positions ``b`` waited: the other items'
    cover times overlap with the wait, summed (term by term in the order of the replay's items
    in ``order``: ``cover.overlap_sums``), over the wait's length, above 1. Replays with an item of
    unknown cover: not full."""
    out = np.zeros(len(b), bool)
    if not len(b):
        return out
    r = replay[b]
    nan_rep = np.zeros(len(bounds), bool)
    nan_rep[replay[np.isnan(cover)]] = True
    q = np.flatnonzero(~nan_rep[r])  # a replay with a kernel of unknown cover: not full
    if not len(q):
        return out
    bq, rq = b[q], r[q]
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order))  # each item's place in ``order``: B itself is left out
    tot = overlap_sums(ready[bq], start[bq], rq, bounds, start[order], end[order], cover[order], at[bq])
    out[q] = tot / (start[bq] - ready[bq]) > 1.0
    return out


def wait_certainty(m: EventMatch, graph_id: int) -> str:
    """How sure the node match behind a wait in graph ``graph_id`` is (the wait itself is inferred from timing)."""
    if m.group is None:
        return Certainty.EXACT.value
    gs = [lg for lg in m.groups if lg.graph_id == graph_id]
    if all(lg.certainty is Certainty.UNIQUE for lg in gs):
        return Certainty.UNIQUE.value
    # Several assignments: interchangeable chains keep every wait as it is; other alternatives may not.
    return Certainty.INVARIANT.value if all(len(lg.solutions) == 1 for lg in gs) else Certainty.UNDECIDED.value
