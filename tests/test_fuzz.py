"""Property-based fuzzing (hypothesis) of the analysis commands with mutated real recordings.

Each example takes a recording from tests/data (a graph export, a cgtool trace, a kineto trace, a
bench result), changes one to three places in its JSON (a value replaced by a hostile one, a key
deleted, a list item duplicated or dropped) or its bytes (cut, flipped, gzip framing), and runs
the command that reads it. Whatever the input, the contract holds: exit code 0, 1, 2 or 4, no
traceback, a refusal is one paragraph starting ``cgtool:``, no raw control character on the
terminal, the input is not modified, and a run ends in bounded time.

A bounded slice runs in the normal suite (profile ``ci``); ``python3 scripts/fuzz.py`` runs the
long profile."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from test_hostile import bc, check_contract

settings.register_profile("ci", max_examples=int(os.environ.get("CGTOOL_FUZZ_EXAMPLES", "25")), deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                          derandomize=True, database=None)
settings.register_profile("long", max_examples=int(os.environ.get("CGTOOL_FUZZ_EXAMPLES", "2000")), deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("CGTOOL_FUZZ_PROFILE", "ci"))

#: Seconds one command may take on a mutated small recording.
RUN_LIMIT_S = 20.0

SOURCES: dict[str, tuple[Any, bool]] = {
    "graph": (json.loads(bc.GRAPH.read_text()), False),
    "trace": (json.loads(gzip.decompress(bc.TRACE.read_bytes())), True),
    "kineto": (json.loads(gzip.decompress(bc.KINETO.read_bytes())), True),
    "bench": (json.loads(bc.BENCH.read_text()), False),
}

_text = st.one_of(
    st.sampled_from(["", "[bold]x[/]", "[/]", "\x1b]0;t\x07", "\x1b[2J", "\x00", "a\nb", "\u202e", "ü" * 3,
                     "x" * 5000, "kernel", "_Z3fooPf", "void f<int>(int)", "NaN", "8", "-1"]),
    st.text(max_size=40),
)
_number = st.one_of(
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63) - 1,
                     0.0, -0.0, 1e308, -1e308, 1e-320, 0.5]),
    st.integers(), st.floats(allow_nan=False, allow_infinity=False),
)
_leaf = st.one_of(st.none(), st.booleans(), _number, _text)
_value = st.recursive(_leaf, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                    st.dictionaries(_text, kids, max_size=3)), max_leaves=6)


def _paths(doc: Any, limit: int = 4000) -> list[tuple[Any, ...]]:
    """Paths to every value in ``doc`` (breadth first, at most ``limit``)."""
    out: list[tuple[Any, ...]] = []
    todo: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while todo and len(out) < limit:
        path, v = todo.pop(0)
        out.append(path)
        if isinstance(v, dict):
            todo += [((*path, k), x) for k, x in v.items()]
        elif isinstance(v, list):
            todo += [((*path, i), x) for i, x in enumerate(v)]
    return out


class Case(tuple):  # type: ignore[type-arg]
    """(kind, bytes, gzipped), shown briefly in hypothesis's report (the failing file is kept)."""

    def __repr__(self) -> str:
        return f"Case({self[0]!r}, {len(self[1])} bytes, gz={self[2]})"


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    kind = draw(st.sampled_from(sorted(SOURCES)))
    doc = copy.deepcopy(SOURCES[kind][0])
    gz = SOURCES[kind][1]
    paths = _paths(doc)
    deep: list[int] = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths[1:]))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            key = path[-1]
            op = draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "deep"]))
            if op == "replace":
                parent[key] = draw(_value)
            elif op == "delete":
                del parent[key]
            elif op == "duplicate" and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(parent[key]))
            elif op == "deep":  # put in as text below (json.dumps itself stops at ~1000 levels)
                deep.append(draw(st.sampled_from([50, 300, 3000])))
                parent[key] = f"@@deep{len(deep) - 1}@@"
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed this path
    raw = json.dumps(doc).encode()
    for i, d in enumerate(deep):
        raw = raw.replace(f'"@@deep{i}@@"'.encode(), b"[" * d + b"1" + b"]" * d)
    framing = draw(st.sampled_from(["as is"] * 6 + ["cut", "flip", "two members", "junk after", "plain"]))
    if framing == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif framing == "flip":
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1:]
    if gz and framing != "plain":
        if framing == "two members":
            data = gzip.compress(raw[: len(raw) // 2], mtime=0) + gzip.compress(raw[len(raw) // 2:], mtime=0)
        else:
            data = gzip.compress(raw, mtime=0) + (b"\x00junk" if framing == "junk after" else b"")
    else:
        data = raw
    return Case((kind, data, gz))


def _commands(kind: str, p: Path, out: Path) -> list[list[Any]]:
    if kind == "graph":
        return [["topo", p, "--json", out, "--force"], ["dot", p], ["diff", p, bc.GRAPH]]
    if kind == "trace":
        return [["deps", p, "--annotate", out, "--force"]]
    if kind == "kineto":
        return [["deps", p, "--graph", bc.KINETO_GRAPH]]
    return [["bench", "--compare", bc.BENCH, p, "--json", out, "--force"]]


_counter = iter(range(1 << 30))


@given(case=mutated())
def test_mutated_recordings_keep_the_contract(case, run_cli, tmp_path):
    kind, data, gz = case
    k = next(_counter)
    p = tmp_path / f"in{k}.json{'.gz' if gz else ''}"
    p.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    out = tmp_path / f"out{k}.json"
    for args in _commands(kind, p, out):
        before = set(tmp_path.iterdir())
        t0 = time.monotonic()
        rc, o, e = run_cli(*args)
        took = time.monotonic() - t0
        try:
            check_contract(rc, o, e)
        except AssertionError as err:
            keep = Path(os.environ.get("CGTOOL_FUZZ_KEEP", tmp_path)) / f"failing{k}{p.suffix}"
            keep.write_bytes(data)
            raise AssertionError(f"cgtool {' '.join(map(str, args))} (input kept in {keep}): {err}") from None
        assert took < RUN_LIMIT_S, (args, took)
        assert hashlib.sha256(p.read_bytes()).hexdigest() == digest, "the input was modified"
        assert set(tmp_path.iterdir()) - before <= {out}, "a file other than the output was written"


@pytest.mark.parametrize("width", [1, 3, 12])
@given(data=st.data())
@settings(max_examples=15)
def test_reachability_index_kinds_agree_with_networkx(width, data):
    """Every index kind (chains, bitsets, per-query search) answers as networkx does."""
    import networkx as nx

    from cgtool.artifacts.graph import from_edges
    from cgtool.inspect import reach

    n = data.draw(st.integers(1, 40))
    edges = sorted(set(data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=width * n))))
    edges = [(a, b) for a, b in edges if a < b]
    g = from_edges(n, edges)
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(edges)
    truth = {a: nx.descendants(G, a) for a in range(n)}
    old = (reach.DENSE_MIN_ENTRIES, reach.DENSE_ENTRIES_PER_NODE, reach.BITSET_MAX_BYTES)
    try:
        for kind, dense, per, bits in (("chains", 1 << 22, 64, 1 << 29), ("bitsets", 0, 0, 1 << 29),
                                       ("search", 0, 0, 0)):
            reach.DENSE_MIN_ENTRIES, reach.DENSE_ENTRIES_PER_NODE, reach.BITSET_MAX_BYTES = dense, per, bits
            r = reach.Reachability(g)
            assert r.kind == kind
            for a in range(n):
                for b in range(n):
                    assert r.reachable(a, b) == (b in truth[a]), (kind, a, b)
            import numpy as np

            aa, bb = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
            assert r.reachable_many(aa, bb).tolist() == [b in truth[a] for a, b in zip(aa.tolist(), bb.tolist())]
    finally:
        reach.DENSE_MIN_ENTRIES, reach.DENSE_ENTRIES_PER_NODE, reach.BITSET_MAX_BYTES = old
