"""The array helpers `cgtool deps` uses for speed, against plain Python (or numpy) on the same rows:
distinct values (``_arrays.distinct``), dense ids and first rows (``_arrays.dense``), the median,
the repeat check of the trace reader (``checks._may_repeat``), and the reader's window
(``stream._Buf``) against the bytes it was given."""

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cgtool.artifacts.trace.checks import _may_repeat
from cgtool.artifacts.trace.stream import WINDOW, _Buf
from cgtool.inspect.analyzers._arrays import dense, distinct, latest_before, median

# Ranges that take the table paths (narrow) and the sort paths (wide), negative values included.
_SPANS = st.sampled_from([1, 2, 7, 1000, 10**7, 2**40])


@st.composite
def _columns(draw, max_cols: int = 4):
    n = draw(st.integers(1, 80))
    cols = []
    for _ in range(draw(st.integers(1, max_cols))):
        span, lo = draw(_SPANS), draw(st.integers(-50, 10**6))
        cols.append(np.array(draw(st.lists(st.integers(lo, lo + span - 1), min_size=n, max_size=n)), np.int64))
    return cols


@settings(max_examples=300, deadline=None)
@given(_columns(max_cols=1))
def test_distinct_is_the_sorted_set(cols):
    (c,) = cols
    got = distinct(c)
    assert got.dtype == c.dtype
    assert got.tolist() == sorted(set(c.tolist()))


def test_distinct_of_nothing_and_of_narrow_types():
    assert distinct(np.zeros(0, np.int64)).tolist() == []
    c = np.array([5, 3, 5, -2], np.int32)
    assert distinct(c).dtype == np.int32 and distinct(c).tolist() == [-2, 3, 5]


@settings(max_examples=300, deadline=None)
@given(_columns(max_cols=5))
def test_dense_ids_in_row_order_and_first_rows(cols):
    rows = list(zip(*(c.tolist() for c in cols)))
    inv, first = dense(*cols)  # narrow columns combined as they are, wide ones ranked first
    keys = sorted(set(rows))  # ids in increasing (lexicographic) row order
    assert inv.tolist() == [keys.index(r) for r in rows]
    assert first.tolist() == [rows.index(k) for k in keys]


@settings(max_examples=300, deadline=None)
@given(_columns(max_cols=3))
def test_may_repeat_never_misses_a_repeated_row(cols):
    rows = list(zip(*(c.tolist() for c in cols)))
    repeated = len(set(rows)) != len(rows)
    got = _may_repeat(*cols)
    assert got or not repeated  # False only where no row repeats
    if np.prod([float(c.max() - c.min() + 1) for c in cols]) < 2**61:  # one key fits: the answer is exact
        assert got == repeated


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=0, max_size=3 * WINDOW // 1000).map(lambda b: b * 1000),
       st.lists(st.integers(0, 5 * WINDOW), max_size=8), st.booleans())
def test_buf_window_holds_the_stream_from_its_offset(data, cuts, direct):
    """Filled and cut at any points, the window is always the stream's bytes from ``off`` on,
    read straight into it (a plain file) or from pieces (gzip)."""
    src = io.BytesIO(data)
    buf = _Buf(iter(()), readinto=src.readinto) if direct else _Buf(
        iter([data[i:i + WINDOW] for i in range(0, len(data), WINDOW)]))
    for c in cuts:
        buf.fill(c)
        assert bytes(buf.b) == data[buf.off:buf.off + len(buf.b)]
        assert len(buf.b) >= min(c, len(data) - buf.off)
        buf.drop(min(c // 2, len(buf.b)))
        assert bytes(buf.b) == data[buf.off:buf.off + len(buf.b)]
    assert buf.rest() == data[buf.off:]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=False, width=64),
                          st.integers(-10**6, 10**6).map(float)), min_size=1, max_size=40))
def test_median_is_numpys_to_the_bit(xs):
    x = np.array(xs, np.float64)
    want = float(np.median(x))
    got = median(x)
    assert got == want or (np.isnan(got) and np.isnan(want))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.integers(0, 2)), min_size=1, max_size=40),
       st.sampled_from([0.0, 0.001, 2.0]))
def test_latest_before_is_the_last_ender_before_each_start(items, tol):
    """On a ns grid (ties on the end and on the start included): per item B, the item A of its
    group that ended last (then started last, then came last) with A.end <= B.start + tol and
    A.start < B.start, by brute force."""
    start = np.array([s for s, _, _ in items], np.float64) / 1000 * 7
    end = np.round(start + np.array([d for _, d, _ in items]) / 1000 * 5, 3)
    group = np.array([g for _, _, g in items], np.int64)
    ns = lambda x: int(round(x * 1000))  # noqa: E731
    want = []
    for b in range(len(items)):
        cands = [a for a in range(len(items)) if a != b and group[a] == group[b]
                 and ns(end[a] - start.min()) <= ns(start[b] - start.min()) + ns(tol)
                 and ns(start[a] - start.min()) < ns(start[b] - start.min())]
        want.append(max(cands, key=lambda a: (ns(end[a] - start.min()), ns(start[a] - start.min()), a))
                    if cands else -1)
    assert latest_before(start, end, group, tol).tolist() == want
