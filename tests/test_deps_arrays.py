"""The array helpers `cgtool deps` uses for speed, against plain Python on the same rows: distinct
values (``_arrays.distinct``), dense ids and first rows (``_arrays.dense``), the repeat check of the
trace reader (``checks._may_repeat``), and the reader's window (``stream._Buf``) against the bytes
it was given."""

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cgtool.artifacts.trace.checks import _may_repeat
from cgtool.artifacts.trace.stream import WINDOW, _Buf
from cgtool.inspect.analyzers._arrays import dense, distinct

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
@given(_columns(max_cols=3))
def test_dense_ids_in_row_order_and_first_rows(cols):
    rows = list(zip(*(c.tolist() for c in cols)))
    if np.prod([float(c.max() - c.min() + 1) for c in cols]) >= 2**62:
        return  # too wide for one key: dense ranks such columns by np.unique (covered elsewhere)
    inv, first = dense(*cols)
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
