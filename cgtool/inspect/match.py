"""Matching the GPU events of graph launches to graph nodes when the trace has no node ids.

PyTorch's profiler up to 2.12 writes no ``graph node id``: the events of one replay are only known
to share the correlation id of their ``cudaGraphLaunch``. Which event ran which node is then a
constraint problem, solved here per *launch group* (the launches of one device whose executor
streams ran the same sequence of event kinds and names).

The model (the words of docs/deps.md and docs/architecture.md):

* an event can run a node only if it is of the node's kind and name, and of its launch shape
  (grid and block, shared memory, memcpy/memset size) wherever both the trace and the export
  record it;
* the executor maps each node to one of its streams when the graph is instantiated, and a stream
  runs its nodes in a fixed order: so every replay of a group runs the same node in the k-th slot
  of each stream (a *slot* is a (stream, position) pair);
* a chain link (a node whose single GPU predecessor has it as single GPU successor) runs on its
  predecessor's stream: the executor gives a branch one stream;
* an event cannot start before the events of all its node's GPU predecessors (nearest GPU
  ancestors, through empty/event nodes) ended, within ``tolerance_us`` — in every replay.

The stream assumptions hold in every CUPTI recording under tests/data (checked by the tests).

Slots are assigned in start order (a predecessor's slot always comes first), each to a node of its
class whose predecessors' slots have all ended (propagation: placing a node makes its successors
ready, and only ready nodes are candidates), with backtracking over the choices. Interchangeable chains (same
kernels, same predecessors of their first node and successors of their last: e.g. the identical
branches of a fork/join) are an automorphism of the graph: any assignment composed with a
permutation of them is another assignment with the same true/fake verdicts, so only one
representative per permutation orbit is searched (chains' first nodes taken in index order)
and the count is multiplied by the orbit size. The search is bounded in solutions and time.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cgtool.errors import InvalidInputError
from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.artifacts.names import demangle
from cgtool.artifacts.trace import KINDS, Trace, launch_shape
from cgtool.inspect.analyzers._arrays import dense  # a table where the keys fit, not np.unique's sorts
from cgtool.inspect.results import Certainty

#: Bounds of the search per launch group.
MAX_SOLUTIONS = 2000
TIME_LIMIT_S = 2.0


#: (kind, demangled name, launch shape or 0, shared memory or -1, bytes or -1)
Key = tuple[str, str, int, int, int]


def _compatible(ev: Key, node: Key) -> bool:
    """Can an event of key ``ev`` run a node of key ``node``? Unknown fields match anything. The
    profiler's shared memory is the kernel's total (static + dynamic), the export's only the
    dynamic part of the launch, so the event's may be larger."""
    return (ev[0] == node[0] and ev[1] == node[1] and (ev[2] == 0 or node[2] == 0 or ev[2] == node[2])
            and (ev[3] < 0 or node[3] < 0 or ev[3] >= node[3])
            and (ev[4] < 0 or node[4] < 0 or ev[4] == node[4]))


@dataclass
class GraphModel:
    """The GPU nodes of a graph as the matcher sees them."""

    g: GraphData
    gpu: list[int]  # GPU node indices, ascending
    key: dict[int, Key]
    preds: dict[int, tuple[int, ...]]  # nearest GPU ancestors
    succs: dict[int, tuple[int, ...]]  # nearest GPU descendants
    names: Counter[tuple[str, str]]  # (kind, name) multiset
    link: dict[int, int] = field(default_factory=dict)  # chain link -> its predecessor (same stream)
    head_rank: dict[int, tuple[int, int]] = field(default_factory=dict)  # chain head -> (group, index)
    orbit: int = 1  # product of the factorials of the interchangeable chain groups' sizes


def _node_key(g: GraphData, i: int) -> Key:
    n = g.nodes[i]
    x = g.node_extra(i)
    smem = x.get("shared_mem", x.get("shared_memory", -1))
    nbytes = x.get("bytes", -1)
    name = demangle(n.kernel_name or "") if n.node_type is NodeType.KERNEL else ""
    return (n.node_type.value, name, launch_shape(x.get("grid"), x.get("block")),
            int(smem) if isinstance(smem, int) else -1, int(nbytes) if isinstance(nbytes, int) else -1)


def prepare(g: GraphData, order: list[int]) -> GraphModel:
    """The GPU projection of ``g`` (``order``: a topological order) and its interchangeable chains."""
    nodes = g.nodes
    gpu_anc: dict[int, frozenset[int]] = {}  # for every node: its nearest GPU ancestors (inclusive for GPU nodes)
    preds: dict[int, tuple[int, ...]] = {}
    for v in order:
        acc: set[int] = set()
        for u in nodes[v].dependencies:
            acc |= gpu_anc[u]
        if nodes[v].node_type.runs_on_gpu:
            preds[v] = tuple(sorted(acc))
            gpu_anc[v] = frozenset((v,))
        else:
            gpu_anc[v] = frozenset(acc)
    gpu = sorted(preds)
    succs: dict[int, list[int]] = {v: [] for v in gpu}
    for v in gpu:
        for u in preds[v]:
            succs[u].append(v)
    key = {v: _node_key(g, v) for v in gpu}
    m = GraphModel(g, gpu, key, preds, {v: tuple(s) for v, s in succs.items()},
                   Counter((key[v][0], key[v][1]) for v in gpu))
    for v in gpu:
        p = m.preds[v]
        if len(p) == 1 and len(m.succs[p[0]]) == 1:
            m.link[v] = p[0]
    _find_symmetric_chains(m, order)
    return m


def _find_symmetric_chains(m: GraphModel, order: list[int]) -> None:
    """Group maximal chains that an automorphism of the GPU DAG may permute."""
    def continues(v: int) -> bool:  # v is the next link of its single predecessor's chain
        return v in m.link

    groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for v in order:
        if v not in m.key or continues(v):
            continue
        chain = [v]
        while len(m.succs[chain[-1]]) == 1 and continues(m.succs[chain[-1]][0]):
            chain.append(m.succs[chain[-1]][0])
        sig = (tuple(m.key[x] for x in chain), m.preds[v], m.succs[chain[-1]])
        groups[sig].append(v)
    gi = 0
    for heads in groups.values():
        if len(heads) > 1:
            for k, h in enumerate(heads):
                m.head_rank[h] = (gi, k)
            m.orbit *= math.factorial(len(heads))
            gi += 1


@dataclass(frozen=True)
class LaunchGroup:
    """Launches whose streams ran the same event sequence, matched together (a part of the deps
    result: ``EventMatch.groups``)."""

    graph_id: int
    correlations: tuple[int, ...]  # one per replay (column of ``events``)
    events: np.ndarray  # [slots, replays] trace event index of each slot in each replay
    solutions: np.ndarray  # [k, slots] node index per slot, one row per searched assignment
    assignments: int  # consistent assignments in all (k times the interchangeable-chain orbit)
    complete: bool  # False: the search hit its bound; ``assignments`` is a lower bound

    @property
    def certainty(self) -> Certainty:
        return Certainty.UNIQUE if self.assignments == 1 and self.complete else Certainty.INVARIANT


@dataclass
class Matching:
    """The inferred match of a trace: the groups, and the launches that matched no assignment."""

    groups: list[LaunchGroup]
    unmatched: list[int]  # correlation ids of launches for which no assignment is consistent
    other: int  # GPU events outside any graph launch
    notes: list[str] = field(default_factory=list)
    other_graph_launches: list[int] = field(default_factory=list)  # launches of graphs not given: left out


def _event_keys(trace: Trace) -> tuple[np.ndarray, list[Key]]:
    """(key id of each event, the distinct keys): the key of an event is its kind, demangled
    name (kernels), launch shape, shared memory (kernels) and size (copies and fills)."""
    dn: dict[str, int] = {}
    dn_of = np.array([dn.setdefault(demangle(x), len(dn)) for x in trace.names], dtype=np.int64)
    dn_names = list(dn)
    kernel = trace.kind == 0
    name = np.where(kernel, dn_of[trace.name] if len(dn_of) else -1, -1)
    smem = np.where(kernel, trace.shared_memory, -1)
    nbytes = np.where(kernel, -1, trace.nbytes)
    kid, first = dense(trace.kind.astype(np.int64), name, trace.shape, smem, nbytes)
    keys = [(KINDS[int(trace.kind[i])], dn_names[int(name[i])] if name[i] >= 0 else "", int(trace.shape[i]),
             int(smem[i]), int(nbytes[i])) for i in first.tolist()]
    return kid, keys


@dataclass
class _Members:
    """Launches with the same per-stream sequence of event keys: their events as [slots, launches]."""

    correlations: list[int]
    events: np.ndarray  # [slots, launches] trace event index; slots in (stream, time) order
    streams: list[int]  # the stream of each slot
    keys: list[Key]  # the key of each slot

    def one(self, j: int) -> "_Members":
        return _Members([self.correlations[j]], self.events[:, j:j + 1], self.streams, self.keys)


def match_launches(trace: Trace, models: dict[int, GraphModel], *, tolerance_us: float = 0.5,
                   max_solutions: int = MAX_SOLUTIONS, time_limit_s: float = TIME_LIMIT_S) -> Matching:
    """Match every graph launch of ``trace`` (no node ids) to one of ``models``."""
    launches = trace.launches
    # Events of graph launches in time order (start, end, position in the file); a launch is a
    # (device, correlation) pair, its lanes the streams, each in time order.
    order = np.lexsort((trace.seq, trace.end, trace.start))
    ids = np.fromiter(launches, np.int64, len(launches))
    inl = np.isin(trace.correlation[order], ids)
    other = int(len(order) - inl.sum())
    ev = order[inl]
    if not len(ev):
        raise InvalidInputError(
            f"{trace.source} has no graph work: no GPU event carries a graph id and none belongs to "
            "a cudaGraphLaunch. Profile the graph replays (`cgtool trace`), not eager work."
        )
    lid, first = dense(trace.device[ev], trace.correlation[ev])
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # launches in order of their first event
    lrank = rank[lid]
    ev = ev[np.lexsort((np.arange(len(ev)), trace.stream[ev], lrank))]
    bounds = np.searchsorted(np.sort(lrank), np.arange(len(first) + 1))
    kid, keys = _event_keys(trace)
    stream = trace.stream[ev]
    pairs = np.stack([stream, kid[ev]], axis=1)
    dev = trace.device[ev[bounds[:-1]]].tolist()
    corr = trace.correlation[ev[bounds[:-1]]].tolist()
    # Launches with the same per-stream sequence of event keys form one group.
    groups: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for j, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        groups[(dev[j], pairs[lo:hi].tobytes())].append(j)
    out = Matching([], [], other)
    unknown: list[tuple[list[int], int]] = []  # launches of no given graph: (correlations, events each)
    for js in groups.values():
        lo, n = bounds[js], int(bounds[js[0] + 1] - bounds[js[0]])
        evs = ev[lo[None, :] + np.arange(n)[:, None]]
        col = evs[:, 0]
        members = _Members([corr[j] for j in js], evs, trace.stream[col].tolist(), [keys[k] for k in kid[col].tolist()])
        names = Counter((k[0], k[1]) for k in members.keys)
        cands = [gid for gid, m in models.items() if m.names == names]
        if not cands:  # the launches of a graph not given (a trace may replay several): left out
            unknown.append((members.correlations, sum(names.values())))
            continue
        found: list[LaunchGroup] = []
        for gid in cands:
            found += _solve_group(models[gid], gid, members, trace, tolerance_us, max_solutions,
                                  time_limit_s, out.unmatched)
        gids = sorted({lg.graph_id for lg in found})
        if len(gids) > 1:
            raise InvalidInputError(
                f"{trace.source}: graph launch (correlation {members.correlations[0]}) matches several graphs "
                f"{gids} equally; without graph ids in the trace the match is ambiguous. Pass only "
                "the graph that was replayed, or record with `cgtool trace` (it writes node ids)."
            )
        if len(cands) > 1:  # a launch unmatched under one candidate graph may match another
            done = {c for lg in found for c in lg.correlations}
            out.unmatched = [c for c in out.unmatched if c not in done]
        out.groups += found
    if not out.groups and unknown:
        c, n_ev = unknown[0][0][0], unknown[0][1]
        raise InvalidInputError(
            f"{trace.source}: the {n_ev} GPU events of graph launch (correlation {c}) "
            f"match no given graph by kernel names and counts (graphs: {sorted(models)}), nor does any other "
            "launch. The trace has no graph node ids, so cgtool matches by name, launch shape, stream and "
            "time: pass the export of the graph that was replayed (--graph), from the same capture."
        )
    if unknown:
        n = sum(len(cs) for cs, _ in unknown)
        out.other_graph_launches = sorted(c for cs, _ in unknown for c in cs)
        out.notes.append(f"{n} graph launch(es) match none of the given graphs by kernel names and counts (the "
                         f"trace replays other graphs too) and were left out (correlation ids "
                         f"{out.other_graph_launches[:5]}).")
    if not out.groups:
        raise InvalidInputError(
            f"{trace.source}: no graph launch has an assignment of its events to the nodes of "
            f"graph(s) {sorted(models)} that respects the graph's order in time (tolerance "
            f"{tolerance_us} µs): the kernel names agree but the order does not. Pass the export of "
            "the graph that was replayed (same capture), or a larger --tolerance."
        )
    out.unmatched = sorted(set(out.unmatched))
    if out.unmatched:
        out.notes.append(
            f"{len(out.unmatched)} graph launch(es) had no assignment consistent with the graph's order "
            f"in time and were left out (correlation ids {out.unmatched[:5]}).")
    return out


def _solve_group(m: GraphModel, gid: int, members: _Members, trace: Trace, tol: float, max_solutions: int,
                 time_limit_s: float, unmatched: list[int]) -> list[LaunchGroup]:
    """Solve the launches together; if that fails, one by one (a launch that fails alone is unmatched)."""
    lg = _search(m, gid, members, trace, tol, max_solutions, time_limit_s)
    if lg is not None:
        return [lg]
    if len(members.correlations) == 1:
        unmatched.append(members.correlations[0])
        return []
    out = []
    for j, c in enumerate(members.correlations):
        one = _search(m, gid, members.one(j), trace, tol, max_solutions, time_limit_s)
        if one is None:
            unmatched.append(c)
        else:
            out.append(one)
    return out


def _search(m: GraphModel, gid: int, members: _Members, trace: Trace, tol: float, max_solutions: int,
            time_limit_s: float) -> LaunchGroup | None:
    ev = members.events
    n_slots = ev.shape[0]
    start, end = trace.start[ev], trace.end[ev]
    order = np.lexsort((end[:, 0], start[:, 0])).tolist()
    # ok[j][k]: slot j ended before slot k started, in every replay (the time constraint).
    okm: np.ndarray = np.asarray((end[:, None, :] <= start[None, :, :] + tol).all(axis=2))
    slot_key = members.keys
    slot_stream = members.streams
    link = m.link
    node_keys = sorted(set(m.key.values()))
    cand_keys = {k: [nk for nk in node_keys if _compatible(k, nk)] for k in set(slot_key)}
    preds, succs, head_rank, key_of = m.preds, m.succs, m.head_rank, m.key
    # Propagation: only nodes whose GPU predecessors are all placed are candidates ("ready").
    pending = {v: len(preds[v]) for v in m.gpu}
    ready: dict[Key, set[int]] = {nk: set() for nk in node_keys}
    for v in m.gpu:
        if not pending[v]:
            ready[key_of[v]].add(v)
    n_groups = 1 + max((g for g, _ in head_rank.values()), default=-1)
    next_head = [0] * n_groups
    slot_of: dict[int, int] = {}
    assign = [-1] * n_slots
    sols: list[list[int]] = []
    t_end = time.perf_counter() + time_limit_s
    complete = True
    okcols: list[list[bool] | None] = [None] * n_slots
    # Room on each stream: a chain runs on one stream, so once a chain's first node is placed on a
    # stream, the rest of the chain needs as many of that stream's later slots. A partial assignment
    # that commits a stream to more nodes than slots it has left has no completion: cut where it is
    # made, not positions later (interchangeable chains started on one stream otherwise fill the
    # search's time bound on small traces). Only assignments without completions are cut.
    rest: dict[int, int] = {}  # a chain's first node -> the nodes of the chain after it
    for v in m.gpu:
        if v not in link:
            n, u = 0, v
            while len(succs[u]) == 1 and link.get(succs[u][0]) == u:
                u, n = succs[u][0], n + 1
            rest[v] = n
    left_on: list[dict[int, int]] = [{} for _ in range(n_slots)]  # position -> stream -> slots after it
    after: Counter[int] = Counter()
    for q in range(n_slots - 1, -1, -1):
        left_on[q] = dict(after)
        after[slot_stream[order[q]]] += 1
    committed: Counter[int] = Counter()  # stream -> unplaced nodes of chains started on it

    def candidates(p: int) -> list[int]:
        k = order[p]
        col = okcols[k]
        if col is None:
            col = okcols[k] = [bool(x) for x in okm[:, k].tolist()]
        out = []
        for v in sorted(v for nk in cand_keys[slot_key[k]] for v in ready[nk]):
            hr = head_rank.get(v)
            if hr is not None and next_head[hr[0]] != hr[1]:
                continue  # symmetry: interchangeable chains start in index order
            u0 = link.get(v)
            if u0 is not None and (u0 not in slot_of or slot_stream[slot_of[u0]] != slot_stream[k]):
                continue  # a chain runs on one stream
            ok = True
            for u in preds[v]:
                j = slot_of.get(u)
                if j is None or not col[j]:
                    ok = False
                    break
            if ok:
                s = slot_stream[k]
                need = committed[s] + (rest[v] if u0 is None else -1)
                if need <= left_on[p].get(s, 0):
                    out.append(v)
        return out

    def place(p: int, v: int) -> None:
        committed[slot_stream[order[p]]] += rest[v] if v not in link else -1
        slot_of[v] = order[p]
        assign[order[p]] = v
        hr = head_rank.get(v)
        if hr is not None:
            next_head[hr[0]] += 1
        ready[key_of[v]].discard(v)
        for w in succs[v]:
            pending[w] -= 1
            if not pending[w]:
                ready[key_of[w]].add(w)

    def unplace(p: int) -> None:
        v = assign[order[p]]
        committed[slot_stream[order[p]]] -= rest[v] if v not in link else -1
        del slot_of[v]
        assign[order[p]] = -1
        hr = head_rank.get(v)
        if hr is not None:
            next_head[hr[0]] -= 1
        for w in succs[v]:
            if not pending[w]:
                ready[key_of[w]].discard(w)
            pending[w] += 1
        ready[key_of[v]].add(v)

    # Iterative depth-first search: stack[p] holds the untried candidates of position p.
    stack: list[list[int]] = []
    p = 0
    if n_slots:
        stack.append(candidates(0)[::-1])
    steps = 0
    while stack:
        steps += 1
        if steps & 1023 == 0 and time.perf_counter() > t_end:
            complete = False
            break
        p = len(stack) - 1
        if assign[order[p]] >= 0:
            unplace(p)
        if not stack[-1]:
            stack.pop()
            continue
        place(p, stack[-1].pop())
        if p + 1 == n_slots:
            sols.append(list(assign))
            if len(sols) >= max_solutions:
                complete = False
                break
            continue
        stack.append(candidates(p + 1)[::-1])
    if not n_slots:
        sols = [[]]
    if not sols:
        return None
    arr = np.array(sols, dtype=np.int64).reshape(len(sols), n_slots)
    return LaunchGroup(gid, tuple(members.correlations), ev, arr, len(sols) * m.orbit, complete)
