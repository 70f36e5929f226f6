"""The cover sums of `cgtool deps` (cgtool.inspect.analyzers.cover): the compiled and the numpy
version against Python loops that add the terms one at a time (``cost.mean_cover``'s loop and the
per-query loop the waits' "GPU was full" test was written as), to the bit, on random inputs and on
the recordings in tests/data; and against the integral by prefix sums they replaced
(``cost.mean_cover_many``), which agrees up to its own rounding."""

import numpy as np
import pytest

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import load_trace
from cgtool.inspect import cost
from cgtool.inspect.analyzers import cover, waits
from cgtool.inspect.deps import analyze, graphs_from_trace


def _built() -> bool:
    return cover._compiled() is not None


IMPLS = [pytest.param(False, id="numpy"),
         pytest.param(True, id="compiled",
                      marks=pytest.mark.skipif(not _built(), reason="_cover.c is not built (setup.py build_ext)"))]


def _items(rng: np.random.Generator, n_groups: int, sizes: tuple[int, int]):
    """Items in groups far apart in time (as replays are), in a shuffled order; some groups empty;
    covers with exact 0 and 1 among them; times on a 1 ns grid."""
    counts = rng.integers(sizes[0], sizes[1] + 1, n_groups)
    group = np.repeat(np.arange(n_groups), counts)
    n = len(group)
    start = np.round(rng.uniform(0, 100, n), 3) + group * 1e4
    end = start + np.round(rng.uniform(0.001, 30, n), 3)
    c = rng.choice([0.0, 1.0, 0.25, 0.5], n)
    c = np.where(rng.random(n) < 0.5, rng.uniform(0, 1, n), c)
    perm = rng.permutation(n)
    return start[perm], end[perm], c[perm], group[perm]


def _queries(rng: np.random.Generator, n_groups: int, q: int):
    gq = rng.integers(0, n_groups, q)
    lo = np.round(rng.uniform(-5, 110, q), 3) + gq * 1e4
    hi = lo + np.round(rng.uniform(-2, 40, q), 3)  # some empty or reversed windows
    return lo, hi, gq


@pytest.mark.parametrize("compiled", IMPLS)
@pytest.mark.parametrize("seed,sizes", [(0, (0, 5)), (1, (1, 40)), (2, (15, 20)), (3, (0, 300))])
def test_mean_cover_grouped_is_the_loop_to_the_bit(seed, sizes, compiled):
    rng = np.random.default_rng(seed)
    start, end, c, group = _items(rng, 30, sizes)
    lo, hi, gq = _queries(rng, 32, 400)  # two groups beyond the items: no items at all
    got = cover.mean_cover_grouped(lo, hi, gq, start, end, c, group, compiled=compiled)
    for k in range(len(lo)):
        sel = group == gq[k]
        want = cost.mean_cover(lo[k], hi[k], start[sel].tolist(), end[sel].tolist(), c[sel].tolist())
        assert got[k] == want, (k, got[k], want)


def test_a_wait_under_one_full_gpu_kernel_is_exactly_one():
    """The threshold is "more than the whole GPU": a wait under one kernel of cover 1 is 1.0, not
    a rounding above it (the integral of prefix sums gave 1 +- its rounding)."""
    start = np.array([0.0, 10.0, 2.5, 1e6 + 0.3])
    end = np.array([3.0, 1000.7, 900.1, 1e6 + 800.0])
    c = np.array([0.5, 1.0, 0.0, 1.0])
    group = np.array([0, 0, 0, 1])
    lo, hi, gq = np.array([17.3, 1e6 + 1.7]), np.array([833.9, 1e6 + 799.1]), np.array([0, 1])
    for compiled in [False] + ([True] if _built() else []):
        got = cover.mean_cover_grouped(lo, hi, gq, start, end, c, group, compiled=compiled)
        assert got.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_it_agrees_with_the_integral_it_replaced(seed):
    rng = np.random.default_rng(seed)
    start, end, c, group = _items(rng, 200, (1, 30))
    lo, hi, gq = _queries(rng, 200, 2000)
    new = cover.mean_cover_grouped(lo, hi, gq, start, end, c, group)
    old = cost.mean_cover_many(lo, hi, gq, start, end, c, group)
    assert new == pytest.approx(old, abs=1e-6)


def _full_by_loop(b, order, bounds, replay, ready, start, end, c):
    """The "GPU was full" test as a loop: per query, its replay's items in ``order``, B left out."""
    out = np.zeros(len(b), bool)
    for k, x in enumerate(b.tolist()):
        r = replay[x]
        items = order[bounds[r]:bounds[r + 1]]
        if np.isnan(c[items]).any():
            continue
        tot = 0.0
        for i in items.tolist():
            ov = min(end[i], start[x]) - max(start[i], ready[x])
            if ov > 0 and i != x:
                tot += ov * c[i]
        out[k] = tot / (start[x] - ready[x]) > 1.0
    return out


@pytest.mark.parametrize("compiled", IMPLS)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gpu_was_full_is_the_loop(seed, compiled, monkeypatch):
    rng = np.random.default_rng(seed)
    start, end, c, replay = _items(rng, 40, (1, 25))
    c[rng.random(len(c)) < 0.01] = np.nan  # a kernel of unknown cover: its replay is never full
    c = np.where(rng.random(len(c)) < 0.7, 1.0, c)  # mostly full-GPU kernels: both answers occur
    ready = start - np.round(rng.uniform(0.5, 60, len(start)), 3)
    order = np.lexsort((start, end, replay))
    bounds = np.searchsorted(replay[order], np.arange(int(replay.max()) + 2))
    b = rng.choice(len(start), 500)
    if not compiled:
        monkeypatch.setattr(cover, "_FAST", False)
    got = waits.gpu_was_full_many(b, order, bounds, replay, ready, start, end, c)
    want = _full_by_loop(b, order, bounds, replay, ready, start, end, c)
    assert got.tolist() == want.tolist() and want.any() and not want.all()


def test_the_compiled_sums_refuse_what_they_cannot_read():
    if not _built():
        pytest.skip("_cover.c is not built (setup.py build_ext)")
    fast = cover._compiled()
    f, i = np.zeros(2), np.zeros(2, np.int64)
    with pytest.raises(TypeError, match="float64"):
        fast.sums(f.astype(np.float32), f, i, np.array([0, 1]), f, f, f, None, np.zeros(2))
    with pytest.raises(ValueError, match="lengths"):
        fast.sums(f, f, i, np.array([0, 1]), f, np.zeros(3), f, None, np.zeros(2))
    with pytest.raises(ValueError, match="group"):
        fast.sums(f, f, np.array([0, 5]), np.array([0, 2]), f, f, f, None, np.zeros(2))
    with pytest.raises(ValueError, match="bounds"):
        fast.sums(f, f, i, np.array([0, 7]), f, f, f, None, np.zeros(2))


#: Recordings whose deps reach the cover sums: torch.profiler traces (the "GPU was full" test; full
#: and not full both occur in forkjoin_small_kineto_mc2) and `cgtool trace`s (waited with room).
CASES = [("forkjoin_small_kineto_mc2", True), ("forkjoin_small_kineto_mc1", True), ("forkjoin_tiny_kineto_mc1", True),
         ("forkjoin_small_kineto_mc2", False), ("forkjoin_kineto_mc1", False), ("forkjoin_tiny_kineto_mc2", False)]


@pytest.mark.parametrize("case,kineto", CASES)
def test_deps_on_recordings_is_the_same_with_the_loops(data_dir, case, kineto, monkeypatch):
    """`cgtool deps`' whole result on a recording: compiled, numpy, and the two Python loops."""
    path = data_dir / case / ("trace.json.gz" if kineto else "cupti_trace.json.gz")
    t = load_trace(path)
    gs = [GraphData.load(data_dir / case / "graph.json")] if kineto else graphs_from_trace(t)
    queries = []

    def counting(fn):
        def run(*a, **kw):
            queries.append(len(a[0]))
            return fn(*a, **kw)
        return run

    results = []
    with monkeypatch.context() as m:
        m.setattr(waits, "mean_cover_grouped", counting(waits.mean_cover_grouped))
        m.setattr(waits, "gpu_was_full_many", counting(waits.gpu_was_full_many))
        results.append(analyze(t, gs).to_json())
    assert sum(queries) > 0  # the recording reaches the cover sums
    with monkeypatch.context() as m:
        m.setattr(cover, "_FAST", False)
        results.append(analyze(t, gs).to_json())
    with monkeypatch.context() as m:
        def loop_mean(lo, hi, gq, start, end, c, group):
            return np.array([cost.mean_cover(lo[k], hi[k], start[group == gq[k]].tolist(),
                                             end[group == gq[k]].tolist(), c[group == gq[k]].tolist())
                             for k in range(len(lo))])

        m.setattr(waits, "mean_cover_grouped", loop_mean)
        m.setattr(waits, "gpu_was_full_many", _full_by_loop)
        results.append(analyze(t, gs).to_json())
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("seed,spread", [(0, 3), (1, 50), (2, 10**9)])
def test_dense_ids_are_numpys_unique(seed, spread):
    """``dense`` ranks small keys through a table, others by np.unique: the same ids and first rows
    as np.unique of the combined key, either way (``spread`` 10**9: the sorting branch)."""
    from cgtool.inspect.analyzers._arrays import dense

    rng = np.random.default_rng(seed)
    n = 5000
    cols = (rng.integers(0, 3, n), rng.integers(-spread, spread, n), np.sort(rng.integers(7, 7 + spread, n)))
    ids, first = dense(*cols)
    rows = list(zip(*(c.tolist() for c in cols)))
    rank = {r: i for i, r in enumerate(sorted(set(rows)))}  # ids in increasing (lexicographic) order
    first_row: dict[tuple[int, ...], int] = {}
    for i, r in enumerate(rows):
        first_row.setdefault(r, i)
    assert ids.tolist() == [rank[r] for r in rows]
    assert first.tolist() == [first_row[r] for r in sorted(rank)]


@pytest.mark.parametrize("seed,hi", [(0, 10), (1, 3000), (2, 10**12)])
def test_unique_ids_is_numpys_unique(seed, hi):
    from cgtool.inspect.analyzers._arrays import unique_ids

    v = np.random.default_rng(seed).integers(0, hi, 2000)
    u, inv = unique_ids(v)
    want_u, want_inv = np.unique(v, return_inverse=True)
    assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()
