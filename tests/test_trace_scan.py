"""The compiled scan of a trace's JSON text (``scan`` in cgtool/artifacts/_columns.c) against the
msgspec path it stands in for (``CGTOOL_TRACE_SCAN=0``).

The scan's contract: for any run of events it gives either exactly the msgspec path's columns or
None (the run then goes through msgspec, which gives the answer or the error). So every document,
valid or not, must load to the same columns, names, launches and error message both ways; and on
the documents profilers write the scan must take every chunk (else it would be a slow no-op).
Numbers are checked against Python's own float() of their text."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cgtool.artifacts import trace as T
from cgtool.artifacts.trace import decode as TD, stream as TS
from cgtool.errors import InvalidInputError

pytestmark = pytest.mark.skipif(TD._fast_columns() is None or not hasattr(TD._fast_columns(), "scan"),
                                reason="the compiled scan is not built here")

COLS = ("kind", "name", "start", "end", "device", "stream", "correlation", "graph_id", "tools_id", "channel",
        "channel_type", "seq", "shape", "shared_memory", "nbytes")


def load(p: Path, scan: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Everything the reader gives (columns with dtypes, names, launches...), or its error message."""
    monkeypatch.setenv("CGTOOL_TRACE_SCAN", "1" if scan else "0")
    try:
        t = T.load_trace(p)
    except InvalidInputError as e:
        return ("error", str(e))
    return ({k: (str(getattr(t, k).dtype), getattr(t, k).tolist()) for k in COLS},
            list(t.names), dict(t.launches), t.n_events, list(t.channel_types), str(t.node_id_form), t.cgtool,
            dict(t.launch_ends))


class Counting:
    """The compiled module, counting the runs its scan took and left to msgspec."""

    def __init__(self, real: Any) -> None:
        self.real, self.taken, self.left, self.decoded = real, 0, 0, 0

    def __getattr__(self, k: str) -> Any:
        return getattr(self.real, k)

    def scan(self, *a: Any) -> Any:
        r = self.real.scan(*a)
        if r is None:
            self.left += 1
        else:
            self.taken += 1
        return r


def both_ways(p: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Counting]:
    """The reading with the scan (counting its runs, and the runs msgspec then decoded: a cut the
    streaming reader tries inside an event is left by both, and is not counted there) and without."""
    counting = Counting(TD._fast_columns())
    real_decode = TD._decode_chunk

    def decode(*a: Any) -> Any:
        r = real_decode(*a)
        counting.decoded += 1
        return r

    monkeypatch.setattr(TD, "_FAST", counting)
    monkeypatch.setattr(TD, "_decode_chunk", decode)
    scanned = load(p, True, monkeypatch)
    monkeypatch.setattr(TD, "_decode_chunk", real_decode)
    monkeypatch.setattr(TD, "_FAST", counting.real)
    assert scanned == load(p, False, monkeypatch), p
    return scanned, counting


def test_every_recording_reads_the_same_and_the_scan_takes_every_chunk(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(TS, "WINDOW", 4096)  # many chunks per file
    paths = sorted(data_dir.glob("*/*trace.json.gz")) + sorted(data_dir.glob("record_*/trace.json.gz"))
    assert len(paths) > 10
    for p in paths:
        got, c = both_ways(p, monkeypatch)
        assert got[0] != "error" and len(got[0]["start"][1]) > 0, p
        assert c.decoded == 0 and c.taken > 0, (p, c.taken, c.decoded)


def awkward_doc() -> dict:
    """Valid and unusual, all of it inside what the scan takes: raw UTF-8 names and keys, numbers
    with exponents and many digits, nested unknown args, escapes in unused strings, null args,
    channel types as names, launch shapes of every form, instant events of GPU categories."""
    evs: list[dict] = [{"ph": "M", "name": "process_name", "args": {"name": "é \u4e2d \"q\" \\ \t"}}]
    for k in range(200):
        if k % 10 == 0:
            evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch_v10000", "ts": 10.0 * k - 1,
                        "dur": 1, "args": {"correlation": 1 + k // 10, "cbid": 311}})
        a: dict[str, Any] = {"device": 0, "stream": 7 + k % 3, "correlation": 1 + k // 10}
        if k % 4 == 0:
            a.update({"graph id": 2, "graph node id": (2 << 32) | k, "channel": k % 5, "channel_type": 1})
        elif k % 4 == 1:
            a.update({"grid": [k % 7 + 1, 2, 1], "block": [128, 1, 1], "shared memory": 1024 * (k % 3),
                      "channel_type": ["compute", "async copy"][k // 4 % 2]})
        elif k % 4 == 2:
            a.update({"grid": [], "block": None, "bytes": 1 << 20, "nested": {"x": [1.5e-3, -0.0, True, None]}})
        evs.append({"ph": "X", "cat": ["kernel", "gpu_memcpy", "gpu_memset", "Kernel"][k % 4],
                    "name": ["sm90_gemm", "ké_ernel", "k\u4e2d", "x"][k % 4], "ts": 10.0 * k + k / 1000,
                    "dur": 1.25 + k % 5, "args": a, "ünused": "a\\nb\\u00e9"})
        if k % 17 == 0:
            evs.append({"ph": "i", "cat": "kernel", "name": "marker", "ts": 1, "args": None})
    return {"traceEvents": evs, "cgtool": {"replays": 1}}


@pytest.mark.parametrize("layout", ["compact", "spaced", "indented"])
def test_awkward_but_valid_documents_are_scanned_whole(tmp_path, monkeypatch, layout):
    doc = awkward_doc()
    text = {"compact": lambda: json.dumps(doc, separators=(",", ":"), ensure_ascii=False),
            "spaced": lambda: json.dumps(doc, ensure_ascii=False).replace("1.25", "125e-2"),
            "indented": lambda: json.dumps(doc, indent="\t", ensure_ascii=False)}[layout]()
    p = tmp_path / "t.json"
    p.write_text(text, encoding="utf-8")
    monkeypatch.setattr(TS, "WINDOW", 1500)
    got, c = both_ways(p, monkeypatch)
    assert got[0] != "error", got
    assert c.decoded == 0 and c.taken > 3
    assert got[4] == ["compute", "async copy"] and "ké_ernel" in got[1]


# ------------------------------------------------------------------ random documents, valid or not
_INT = st.sampled_from([0, 1, 2, 7, 7, 7, 13, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -1, 1.0, 2.5, "7", None,
                        True, [], {}])
_ID = st.one_of(st.integers(0, 40), _INT)
_DIMS = st.one_of(st.lists(st.integers(-3, 2000), max_size=4), st.none(),
                  st.sampled_from([[2**63], [2**64], [1.0], ["x"], "bad", [[1]], list(range(20))]))
_ARGS = st.one_of(
    st.fixed_dictionaries({"stream": st.one_of(st.integers(0, 3), _INT), "correlation": st.one_of(st.integers(1, 30), _INT)},
                          optional={"device": _ID, "graph id": _ID, "graph node id": _ID, "channel": _ID,
                                    "channel_type": st.one_of(_ID, st.sampled_from(["compute", "copy"])),
                                    "grid": _DIMS, "block": _DIMS, "shared memory": _INT, "bytes": _INT,
                                    "other": st.recursive(st.none() | st.integers() | st.text(max_size=4),
                                                          lambda c: st.lists(c, max_size=3)
                                                          | st.dictionaries(st.text(max_size=3), c, max_size=3),
                                                          max_leaves=6)}),
    st.sampled_from([None, [1], "x", 3]))
_EVENT = st.fixed_dictionaries(
    {},
    optional={"ph": st.sampled_from(["X", "X", "X", "i", "B", 1, None]),
              "cat": st.sampled_from(["kernel", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op",
                                      "Kernel", "sp\u00e9cial", "", 3]),
              "name": st.sampled_from(["k0", "k1", "cudaGraphLaunch", "cudaGraphLaunchKernel", "k\u00e9",
                                       "a\"b", "x\\y", "", 5]),
              "ts": st.one_of(st.floats(0, 1e6), st.integers(0, 10**6), st.sampled_from([None, "1", 1e300, -5.0])),
              "dur": st.one_of(st.floats(0, 100), st.sampled_from([0, None, -1, 1e13])),
              "args": _ARGS})


_GOOD_ARGS = st.fixed_dictionaries(
    {"stream": st.integers(0, 3), "correlation": st.integers(1, 10**6)},
    optional={"device": st.integers(0, 3), "channel": st.integers(0, 8),
              "graph node id": st.builds(lambda g, k: (g << 32) | k, st.integers(1, 3), st.integers(0, 99)),
              "channel_type": st.one_of(st.integers(0, 3), st.sampled_from(["compute", "copy", "é"])),
              "grid": st.one_of(st.none(), st.lists(st.integers(0, 4096), max_size=3)),
              "block": st.one_of(st.none(), st.lists(st.integers(0, 1024), max_size=3)),
              "shared memory": st.integers(0, 1 << 16), "bytes": st.integers(0, 1 << 40),
              "other": st.recursive(st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
                                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                                    max_leaves=6)})
#: Valid events (most documents of these load): the scan must give msgspec's columns.
_GOOD_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i"]), "ts": st.floats(0, 1e9), "dur": st.floats(0, 1e3),
     "cat": st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "cuda_runtime", "cpu_op",
                             "python_function", "spécial"]),
     "name": st.one_of(st.sampled_from(["k0", "k1", "cudaGraphLaunch", "cudaGraphLaunch_v10000", "ké中", ""]),
                       st.text(max_size=12))},
    optional={"args": _GOOD_ARGS, "pid": st.integers(), "tid": st.one_of(st.integers(), st.text(max_size=5))})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evs=st.one_of(st.lists(_GOOD_EVENT, min_size=1, max_size=25), st.lists(_EVENT, min_size=1, max_size=25)),
       ascii=st.booleans(),
       sep=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]), window=st.sampled_from([200, 700, 1 << 20]),
       dup=st.booleans())
def test_random_documents_read_the_same_both_ways(tmp_path, monkeypatch, evs, ascii, sep, window, dup):
    text = json.dumps({"traceEvents": evs}, ensure_ascii=ascii, separators=sep)
    if dup:  # a field given twice in one object (msgspec keeps the last): the scan leaves those to it
        text = text.replace('"args"' + sep[1] + '{"stream"', '"args"' + sep[1] + '{"stream"' + sep[1] + '5' + sep[0]
                            + '"stream"', 1)
    p = tmp_path / "t.json"
    p.write_text(text, encoding="utf-8")
    monkeypatch.setattr(TS, "WINDOW", window)
    both_ways(p, monkeypatch)


_DIGITS = st.text("0123456789", min_size=1, max_size=24)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ip=_DIGITS, frac=st.one_of(st.none(), _DIGITS), exp=st.one_of(st.none(), st.integers(-40, 40)),
       neg=st.booleans(), e_char=st.sampled_from(["e", "E", "e+"]))
def test_times_are_read_as_python_reads_their_text(tmp_path, monkeypatch, ip, frac, exp, neg, e_char):
    """A kernel's ts and dur written in any JSON form: the scan reads the float Python's float()
    reads from that text (correctly rounded), and agrees with msgspec."""
    ip = ip.lstrip("0") or "0"
    num = ("-" if neg else "") + ip + (f".{frac}" if frac else "")
    if exp is not None:
        num += (e_char if exp >= 0 else "e") + str(exp)
    dur = num.lstrip("-")
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": %s, "dur": %s, '
            '"args": {"stream": 7, "correlation": 1}}]}' % (num, dur))
    p = tmp_path / "t.json"
    p.write_text(text)
    got, _ = both_ways(p, monkeypatch)
    ts, d = float(num), float(dur)
    if got[0] == "error":
        assert not (abs(ts) < T.MAX_ABS_TS_US and 0 <= d < T.MAX_DUR_US) or math.isinf(ts) or math.isinf(d)
    else:
        assert got[0]["start"][1] == [ts]
        assert got[0]["end"][1] == [float(np.round(ts + d, 3))]


_OK = '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2, "args": {"stream": 7, "correlation": 1}}'


@pytest.mark.parametrize("event", [
    '{"ph": "i", "name": "m", "args": {"note": "\\ud800"}}',  # a lone surrogate escape (msgspec: "truncated")
    '{"ph": "i", "name": "m", "args": {"note": "\\udc00\\ud800"}}',
    '{"ph": "i", "name": "m", "args": {"note": "a\x01b"}}',  # a raw control character
    '{"ph": "i", "name": "m", "note": "\xff\xfe"}',  # invalid UTF-8 in an unused string (msgspec takes it)
    '{"ph": "i", "name": "m", "args": {"n": 01}}', '{"ph": "i", "name": "m", "args": {"n": -}}',
    '{"ph": "i", "name": "m", "args": {"n": 1.}}', '{"ph": "i", "name": "m", "args": {"n": .5}}',
    '{"ph": "i", "name": "m", "args": {"n": NaN}}', '{"ph": "i", "name": "m", "args": {"n": [1,]}}',
    '{"ph": "i", "name": "m", "args": {"n": tru}}', '{"ph": "i", "name": "m", "args": {"n": 1e}}',
    '{"ph": "i", "name": "m", "args": {"n": ' + "[" * 100 + "]" * 100 + '}}',
    '{"ph": "i", "name": "m", "args": {"n": ' + "[" * 3000 + "]" * 3000 + '}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e400, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e-400, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 12345678901234567890123, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 1, "grid": [-9223372036854775808, 3], "block": [1]}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 1, "grid": [9223372036854775808], "block": [1]}}',
    '{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "ker\\u006eel", "name": "k", "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 1, "args": {"str\\u0065am": 8, "stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "ts": 3, "dur": 1, "args": {"stream": 7, "correlation": 1}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 1, "device": -0}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 2, "dur": 1, "args": {"correlation": 1}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 2, "dur": 1, "args": [1]}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 1, "args": {"correlation": 2}}',
    '{}', '{"ph": "X", "cat": "kernel"}',
])
def test_edge_cases_read_the_same_both_ways(tmp_path, monkeypatch, event):
    """Text at the edges of JSON and of the fields' types, beside a valid kernel: each reads as
    msgspec reads it (the same columns, or the same error)."""
    p = tmp_path / "t.json"
    p.write_bytes(('{"traceEvents": [%s, %s, %s]}' % (_OK, event, _OK.replace("1.5", "9.5"))).encode("utf-8", "surrogateescape")
                  if "\xff" not in event else
                  b'{"traceEvents": [' + _OK.encode() + b", " + event.encode("latin-1") + b"]}")
    both_ways(p, monkeypatch)
