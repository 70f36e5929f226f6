"""Every figure of `deps` against a brute-force computation from first principles.

Hand-made traces of one graph with a join of 2 (node 4 waits for 1 and 2) and a join of 3 (node 6
waits for 4, 9 and 3, the last through an empty node that has no event), plus an unrelated root,
replayed several times by a small simulator: each kernel starts when its predecessors and its lane
(hardware channel, or stream) allow, plus a random delay. What `deps` reports (readiness, spans,
critical paths, serializations with their gaps and waits, waits behind unrelated work, savings) is
compared with what the definitions in docs/deps.md and cgtool/inspect/cost.py give when computed
the slow way here: networkx paths, every pair of events, longest paths by recursion.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest

from cgtool.artifacts.trace import load_trace
from cgtool.inspect.deps import analyze, graphs_from_trace

TOL = 0.5  # µs
GID = 3
#: node -> (type, dependencies). 4 joins 2; 6 joins 3 (4, 9, and 3 through the empty node 5); 8 is unrelated.
NODES: dict[int, tuple[str, list[int]]] = {
    0: ("kernel", []), 1: ("kernel", [0]), 2: ("kernel", [0]), 3: ("kernel", [0]), 4: ("kernel", [1, 2]),
    5: ("empty", [3]), 6: ("kernel", [4, 5, 9]), 7: ("kernel", [6]), 8: ("kernel", []), 9: ("kernel", [0]),
}
KERNELS = [v for v, (t, _) in NODES.items() if t == "kernel"]
G = nx.DiGraph()
G.add_nodes_from(NODES)
G.add_edges_from((u, v) for v, (_, deps) in NODES.items() for u in deps)


def tid(v: int) -> int:
    return (GID << 32) | v


def export() -> dict[str, Any]:
    return {"exec_graph_id": GID, "nodes": [
        {"index": v, "node_type": t, "tools_id": tid(v), "graph_id": GID, "node_id": v,
         "kernel_name": f"k{v}" if t == "kernel" else None, "dependencies": deps,
         "dependents": sorted(G.successors(v))} for v, (t, deps) in NODES.items()]}


def simulate(seed: int, n_rep: int) -> list[dict[str, Any]]:
    """Events (node, replay, lane, start, end; times in whole ns) of ``n_rep`` replays: each kernel
    starts when its graph predecessors (through the empty node) have ended and its lane is free, plus
    a random delay (a start up to 0.4 µs early is within the tolerance), in a random topological order."""
    rng = random.Random(seed)
    lane = {v: rng.randrange(2) for v in KERNELS}
    out = []
    for r in range(n_rep):
        t0 = 1_000_000 * (r + 1)
        order = []
        left = {v: set(NODES[v][1]) for v in NODES}
        while left:
            v = rng.choice(sorted(u for u, d in left.items() if not d))
            order.append(v)
            del left[v]
            for d in left.values():
                d.discard(v)
        fin: dict[int, int] = {}
        free = {0: t0, 1: t0}
        for v in order:
            ready = max((fin[u] for u in NODES[v][1]), default=t0)
            if NODES[v][0] != "kernel":
                fin[v] = ready
                continue
            start = max(ready, free[lane[v]]) + rng.choice([0, 0, 300, 2_000, 7_000, rng.randrange(1, 9_000)])
            if start > t0 + 400 and rng.random() < 0.2:
                start -= 400  # early, within the tolerance
            end = start + rng.randrange(1_000, 20_000)
            fin[v] = end
            free[lane[v]] = max(free[lane[v]], end)
            out.append({"node": v, "replay": r, "lane": lane[v], "start": start, "end": end})
    return out


def write_trace(tmp_path: Path, evs: list[dict[str, Any]], *, channels: bool) -> Path:
    events = []
    for e in evs:
        args = {"device": 0, "stream": 7 + e["lane"], "correlation": 100 + e["replay"], "graph id": GID,
                "graph node id": tid(e["node"])}
        if channels:
            args.update(channel=e["lane"], channel_type=1)
        events.append({"ph": "X", "cat": "kernel", "name": f"k{e['node']}", "pid": 0, "tid": args["stream"],
                       "ts": e["start"] / 1000, "dur": (e["end"] - e["start"]) / 1000, "args": args})
    doc = {"traceEvents": events, "cgtool": {"schema_version": 1, "kind": "trace", "collector": "cupti",
                                             "graphs": [export()]}}
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    return p


# ----------------------------------------------------------------------------- the brute force
def us(ns: float) -> float:
    return ns / 1000


class Brute:
    """The figures of one trace, from the definitions, one event at a time."""

    def __init__(self, evs: list[dict[str, Any]]) -> None:
        self.evs = evs
        self.by_rep: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
        for e in evs:
            self.by_rep[e["replay"]][e["node"]] = e
        self.ready = {(e["replay"], e["node"]): self._ready(e["replay"], e["node"]) for e in evs}

    def _ready(self, r: int, v: int) -> float:
        """Its graph predecessors' end (an empty node ends when it is ready), or the replay's start."""
        reps = self.by_rep[r]
        t0 = min(e["start"] for e in reps.values())

        @lru_cache(None)
        def fin(u: int) -> float:
            return reps[u]["end"] if u in reps else ready(u)

        @lru_cache(None)
        def ready(u: int) -> float:
            preds = list(G.predecessors(u))
            return max(fin(p) for p in preds) if preds else t0

        return ready(v)

    def span(self, r: int) -> float:
        reps = self.by_rep[r].values()
        return max(e["end"] for e in reps) - min(e["start"] for e in reps)

    def critical(self, r: int) -> float:
        """The longest path through the graph, weighted by the measured durations (0 without an event)."""
        reps = self.by_rep[r]
        dur = {v: reps[v]["end"] - reps[v]["start"] if v in reps else 0 for v in NODES}
        best = 0
        for s in (v for v in NODES if not NODES[v][1]):
            for t in (v for v in NODES if G.out_degree(v) == 0):
                if s == t:
                    best = max(best, dur[s])
                for path in nx.all_simple_paths(G, s, t):
                    best = max(best, sum(dur[v] for v in path))
        return best

    def serializations(self, r: int, lane_of: Any, tol_ns: int = int(TOL * 1000)) -> list[tuple[int, int, str]]:
        """(A, B, true/fake) per B of the replay: A on B's lane, the one that ended last (ties: started
        last) with A.end <= B.start + tolerance and A.start < B.start."""
        reps = list(self.by_rep[r].values())
        out = []
        for b in reps:
            cands = [a for a in reps if a is not b and lane_of(a) == lane_of(b) and a["end"] <= b["start"] + tol_ns
                     and a["start"] < b["start"]]
            if cands:
                a = max(cands, key=lambda a: (a["end"], a["start"]))
                out.append((a["node"], b["node"], "true" if nx.has_path(G, a["node"], b["node"]) else "fake"))
        return out

    def inferred(self, r: int, tol_ns: int = int(TOL * 1000)) -> list[tuple[int, int, float]]:
        """(B, A, µs waited) for each B that started more than max(tolerance, 1 µs) after it was ready
        and an item with no path to B ended, while B waited, last before B started (+ tolerance)."""
        reps = list(self.by_rep[r].values())
        out = []
        for b in reps:
            ready = self.ready[(r, b["node"])]
            if b["start"] - ready <= max(tol_ns, 1000):
                continue
            before = sorted((a for a in reps if a["end"] <= b["start"] + tol_ns),
                            key=lambda a: (a["end"], a["start"]), reverse=True)
            for a in before:
                if a["end"] <= ready:
                    break
                if a is not b and a["start"] < b["start"] and not nx.has_path(G, a["node"], b["node"]):
                    out.append((b["node"], a["node"], us(b["start"] - ready)))
                    break
        return out

    def schedule(self, r: int, lane_edges: list[tuple[int, int]]) -> float:
        """The span of every event started as soon as its GPU ancestors in the graph and the events
        it is serialized behind (``lane_edges``) have ended: the longest path by durations."""
        reps = self.by_rep[r]
        preds = {v: {u for u in nx.ancestors(G, v) if u in reps} for v in reps}
        for a, b in lane_edges:
            preds[b].add(a)

        @lru_cache(None)
        def fin(v: int) -> float:
            return max((fin(u) for u in preds[v]), default=0) + reps[v]["end"] - reps[v]["start"]

        return max(fin(v) for v in reps)


def _findings_by_pair(res: Any) -> dict[tuple[int, int, str], Any]:
    return {(f.before & 0xFFFFFFFF, f.after & 0xFFFFFFFF, f.kind.value): f for f in res.findings}


SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_readiness_span_and_critical_path(tmp_path: Path, seed: int) -> None:
    evs = simulate(seed, 4)
    t = load_trace(write_trace(tmp_path, evs, channels=True))
    res = analyze(t, graphs_from_trace(t), tolerance_us=TOL)
    bf = Brute(evs)
    m = res.events
    # every event's readiness: its predecessors' end through the join of 2, the join of 3 and the empty node
    got = {(int(m.replay[i]), int(m.node[i])): float(m.ready[i]) for i in range(len(m.ev))}
    want = {(r, v): us(x) for (r, v), x in bf.ready.items()}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
    assert list(res.replay_table["span_us"]) == pytest.approx([us(bf.span(r)) for r in range(4)], abs=1e-3)
    crit = [us(bf.critical(r)) for r in range(4)]
    assert list(res.replay_table["critical_path_us"]) == pytest.approx(crit, abs=1e-3)
    assert res.critical_path_us == pytest.approx(float(np.median(crit)), abs=1e-3)
    assert res.critical_path_us == round(res.critical_path_us, 3)  # reported to the ns


def test_a_graph_without_events_changes_no_figure(tmp_path: Path) -> None:
    """A second export given (first) whose graph the trace never replays: the figures of the one it
    does replay are those of the analysis without it."""
    from cgtool.artifacts.graph import GraphData

    t = load_trace(write_trace(tmp_path, simulate(1, 4), channels=True))
    (g,) = graphs_from_trace(t)
    doc = export()
    doc["exec_graph_id"] = GID - 1
    for n in doc["nodes"]:
        n["graph_id"], n["tools_id"] = GID - 1, ((GID - 1) << 32) | n["node_id"]
    alone = analyze(t, [g], tolerance_us=TOL)
    both = analyze(t, [GraphData.from_json(doc), g], tolerance_us=TOL)
    for key in ("span_us", "critical_path_us", "fake_wait_us", "saving_us"):
        assert list(both.replay_table[key]) == list(alone.replay_table[key]), key
    assert list(both.events.ready) == list(alone.events.ready)
    assert [f.to_json() for f in both.findings] == [f.to_json() for f in alone.findings]


@pytest.mark.parametrize("seed", SEEDS)
def test_serializations_gaps_and_waits_on_channels(tmp_path: Path, seed: int) -> None:
    evs = simulate(seed, 4)
    t = load_trace(write_trace(tmp_path, evs, channels=True))
    res = analyze(t, graphs_from_trace(t), tolerance_us=TOL)
    bf = Brute(evs)
    want: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    gaps: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    per_rep_fake_wait = []
    per_rep = []
    for r in range(4):
        reps = bf.by_rep[r]
        tw = 0.0
        pairs = bf.serializations(r, lambda e: e["lane"])
        per_rep.append((sum(k == "true" for *_, k in pairs), sum(k == "fake" for *_, k in pairs)))
        for a, b, k in pairs:
            gaps[(a, b, k)].append(us(reps[b]["start"] - reps[a]["end"]))
            w = max(0.0, us(reps[b]["start"] - bf.ready[(r, b)])) if k == "fake" else 0.0
            want[(a, b, k)].append(w)
            tw += w
        per_rep_fake_wait.append(tw)
    got = _findings_by_pair(res)
    assert got.keys() == want.keys()
    for k, ws in want.items():
        f = got[k]
        assert f.count == len(ws), k
        assert f.gap_us == pytest.approx(sum(gaps[k]) / len(gaps[k]), abs=1e-6), k
        assert f.wait_us == pytest.approx(sum(ws), abs=1e-6), k
    assert [(int(a), int(b)) for a, b in zip(res.replay_table["true"], res.replay_table["fake"])] == per_rep
    assert list(res.replay_table["fake_wait_us"]) == pytest.approx(per_rep_fake_wait, abs=1e-3)


@pytest.mark.parametrize("seed", SEEDS)
def test_savings_are_the_schedule_without_the_fake_serializations(tmp_path: Path, seed: int) -> None:
    evs = simulate(seed, 4)
    t = load_trace(write_trace(tmp_path, evs, channels=True))
    res = analyze(t, graphs_from_trace(t), tolerance_us=TOL)
    bf = Brute(evs)
    est, save = [], []
    per_pair: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    for r in range(4):
        pairs = bf.serializations(r, lambda e: e["lane"])
        with_all = bf.schedule(r, [(a, b) for a, b, _ in pairs])
        without = bf.schedule(r, [(a, b) for a, b, k in pairs if k == "true"])
        est.append(us(with_all))
        save.append(us(max(0, with_all - without)))
        for a, b, k in pairs:
            if k == "fake":
                rest = [(x, y) for x, y, _ in pairs if (x, y) != (a, b)]
                per_pair[(a, b, k)].append(us(max(0, with_all - bf.schedule(r, rest))))
    assert list(res.replay_table["estimated_span_us"]) == pytest.approx(est, abs=1e-3)
    assert list(res.replay_table["saving_us"]) == pytest.approx(save, abs=1e-3)
    assert res.cost["saving_us"] == pytest.approx(float(np.mean(save)), abs=1e-3)
    assert res.cost["estimated_span_us"] == pytest.approx(float(np.mean(est)), abs=1e-3)
    spans = [us(bf.span(r)) for r in range(4)]
    assert res.cost["saving_share"] == pytest.approx(float(np.mean(save)) / float(np.mean(spans)), abs=1e-4)
    got = _findings_by_pair(res)
    for k, f in got.items():
        if k[2] == "fake":
            assert f.saving_us == pytest.approx(float(np.mean(per_pair[k])), abs=1e-6), k
        else:
            assert f.saving_us is None


@pytest.mark.parametrize("seed", SEEDS)
def test_waits_behind_unrelated_work_on_streams(tmp_path: Path, seed: int) -> None:
    """Without channels: serializations per stream, and waits behind unrelated work inferred from
    timing (no SM count in the export: the GPU's room is unknown, every late start is judged)."""
    evs = simulate(seed, 4)
    t = load_trace(write_trace(tmp_path, evs, channels=False))
    res = analyze(t, graphs_from_trace(t), tolerance_us=TOL)
    bf = Brute(evs)
    want: dict[tuple[int, int], list[float]] = defaultdict(list)
    waited, wait_us, est, save = [], [], [], []
    per_wait: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in range(4):
        found = bf.inferred(r)
        waited.append(len(found))
        wait_us.append(sum(w for *_, w in found))
        for b, a, w in found:
            want[(b, a)].append(w)
        pairs = bf.serializations(r, lambda e: e["lane"])
        # each serialization and each wait is an edge of its own: a wait's edge can double a fake
        # serialization's (on the same stream), and dropping one keeps the other
        lane_edges = [(a, b, "lane") for a, b, _ in pairs] + [(a, b, "wait") for b, a, _ in found]
        with_all = bf.schedule(r, [(a, b) for a, b, _ in lane_edges])
        without = bf.schedule(r, [(a, b) for a, b, k in pairs if k == "true"])
        est.append(us(with_all))
        save.append(us(max(0, with_all - without)))
        for b, a, _ in found:
            rest = [(x, y) for x, y, what in lane_edges if (x, y, what) != (a, b, "wait")]
            per_wait[(b, a)].append(us(max(0, with_all - bf.schedule(r, rest))))
    got = {(w.after & 0xFFFFFFFF, w.behind & 0xFFFFFFFF): w for w in res.inferred_waits}
    assert got.keys() == want.keys()
    for k, ws in want.items():
        assert got[k].count == len(ws) and got[k].wait_us == pytest.approx(sum(ws), abs=1e-6), k
        assert got[k].saving_us == pytest.approx(float(np.mean(per_wait[k])), abs=1e-6), k
    assert [w.wait_us for w in res.inferred_waits] == sorted((w.wait_us for w in res.inferred_waits), reverse=True)
    assert list(res.replay_table["waited"]) == waited
    assert list(res.replay_table["wait_us"]) == pytest.approx(wait_us, abs=1e-3)
    assert list(res.replay_table["estimated_span_us"]) == pytest.approx(est, abs=1e-3)
    assert list(res.replay_table["saving_us"]) == pytest.approx(save, abs=1e-3)
    assert res.cannot_tell_reason and "no launch grid or SM count" in res.cannot_tell_reason


def test_the_simulated_traces_hold_what_the_tests_need(tmp_path: Path) -> None:
    """The seeds give joins whose last predecessor is each of their predecessors, fake
    serializations that waited, and waits behind unrelated work: the comparisons above see them."""
    last_of_join: dict[int, set[int]] = defaultdict(set)
    fake_waits = inferred = 0
    for seed in SEEDS:
        evs = simulate(seed, 4)
        bf = Brute(evs)
        for r, reps in bf.by_rep.items():
            for j, preds in ((4, [1, 2]), (6, [4, 3, 9])):
                last_of_join[j].add(max(preds, key=lambda u: reps[u]["end"]))
            for a, b, k in bf.serializations(r, lambda e: e["lane"]):
                fake_waits += k == "fake" and reps[b]["start"] > bf.ready[(r, b)]
            inferred += len(bf.inferred(r))
    assert last_of_join[4] == {1, 2} and last_of_join[6] == {4, 3, 9}
    assert fake_waits >= 5 and inferred >= 5


def test_no_part_of_a_result_can_be_changed(tmp_path: Path) -> None:
    """``analyze`` builds its result once, with its final values (savings, certainties, notes): every
    part is frozen, so no later step (figures, views, the report, a caller of ``to_json``) can change
    what another one reads. One replay lost an event, so that the result holds every kind of part."""
    evs = simulate(1, 4)
    lost = next(e for e in evs if e["replay"] == 2 and e["node"] == 7)
    t = load_trace(write_trace(tmp_path, [e for e in evs if e is not lost], channels=True))
    res = analyze(t, graphs_from_trace(t), tolerance_us=TOL)
    (streams := tmp_path / "streams").mkdir()
    ts = load_trace(write_trace(streams, evs, channels=False))
    res_s = analyze(ts, graphs_from_trace(ts), tolerance_us=TOL)
    fake = next(f for f in res.findings if f.kind.value == "fake" and f.saving_us)
    wait = next(w for w in res_s.inferred_waits if w.saving_us)
    (inc,) = res.incomplete
    assert inc.missing == (tid(7),) and len(res.replays) == 3 and res.notes and res.suggestions
    before = json.dumps(res.to_json())
    changes = [
        lambda: setattr(res, "notes", ()), lambda: setattr(fake, "saving_us", 0.0),
        lambda: setattr(fake, "count", fake.count + 1), lambda: setattr(wait, "saving_us", 0.0),
        lambda: setattr(wait, "certainty", "exact"), lambda: setattr(res.replays[0], "span_us", 0.0),
        lambda: setattr(inc, "replays", 0), lambda: setattr(res.figures(), "fake", 0),
        lambda: setattr(res.events, "verdict", None),
    ]
    for change in changes:
        with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
            change()
    for seq in (res.findings, res.inferred_waits, res.graphs, res.notes, res.suggestions, res.match_groups,
                res.incomplete, inc.missing, inc.correlations, res.figures().graphs, res.events.lane):
        assert isinstance(seq, tuple)
    for mapping in (res.replay_table, res.cost, res.critical_paths, res.figures().certainty):
        with pytest.raises(TypeError):
            mapping["x"] = 0
    assert res.events is not None
    for arr in (res.replay_table["span_us"], res.replay_table["saving_us"], res.events.verdict, res.events.ready):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = -1
    # to_json gives copies: changing the document leaves the result as it was
    doc = res.to_json()
    doc["notes"].append("x")
    doc["cost"]["saving_us"] = -1.0
    doc["incomplete_replays"][0]["missing"].append(0)
    assert json.dumps(res.to_json()) == before


def test_the_certainty_of_each_serialization_over_several_launch_groups():
    """``certainty`` on hand-made launch groups of one graph (0 -> 1, and 2 unrelated): group 0 has no
    serialization, group 1 two assignments that agree, group 2 two that disagree, group 3 one
    assignment; group 1 counts more assignments than int64 holds. Each serialization's certainty is
    the brute force's over its group's assignments (networkx paths), and its count is the group's,
    capped at 2**62 (what an int64 column holds with room)."""
    from types import SimpleNamespace

    from cgtool.inspect.analyzers.serializations import CERTS, certainty
    from cgtool.inspect.match import LaunchGroup
    from cgtool.inspect.results import Certainty, EventMatch

    dag = nx.DiGraph([(0, 1)])
    dag.add_node(2)
    reach = SimpleNamespace(reachable_many=np.vectorize(lambda u, v: bool(nx.has_path(dag, int(u), int(v)))))
    prepared = {GID: SimpleNamespace(reach=reach)}
    sols = [np.array([[0, 1]]), np.array([[0, 1], [0, 1]]), np.array([[0, 1], [2, 1]]), np.array([[0, 1]])]
    counts = [1, 2**70, 500, 1]
    groups = tuple(LaunchGroup(GID, (k,), np.array([[2 * k], [2 * k + 1]]), s, n, True)
                   for k, (s, n) in enumerate(zip(sols, counts)))
    ev = np.arange(8)
    m = EventMatch(ev, np.array([0, 1] * 4), np.full(8, GID), 0, group=ev // 2, slot=ev % 2, groups=groups)
    a, b = np.array([2, 4, 6]), np.array([3, 5, 7])  # slot 0 -> slot 1 in groups 1, 2 and 3
    cert, n_assign = certainty(m, prepared, a, b)
    want_cert, want_n = [], []
    for x, y in zip(a.tolist(), b.tolist()):
        lg = groups[x // 2]
        verdicts = {nx.has_path(dag, int(s[x % 2]), int(s[y % 2])) for s in lg.solutions}
        c = (Certainty.UNIQUE if lg.assignments == 1 else Certainty.INVARIANT if len(verdicts) == 1
             else Certainty.UNDECIDED)
        want_cert.append(CERTS.index(c))
        want_n.append(min(lg.assignments, 2**62))
    assert cert.tolist() == want_cert and n_assign.tolist() == want_n
    assert want_n == [2**62, 500, 1] and [CERTS[c] for c in want_cert] == [
        Certainty.INVARIANT, Certainty.UNDECIDED, Certainty.UNIQUE]
