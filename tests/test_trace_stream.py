"""The streaming trace reader (issue 18) against an independent reading with the json module.

Windows of a few hundred bytes make every trace take many chunks, so cuts between events, cuts
that fall inside strings or nested values (and must be retried), and the array's end inside a
chunk all happen on small files."""

from __future__ import annotations

import gzip
import json
import math
import re

import pytest

from cgtool.artifacts import trace as T
from cgtool.artifacts.trace import decode as TD, stream as TS
from cgtool.errors import InvalidInputError

GPU = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}


def brute(doc: dict) -> dict:
    """The GPU columns cgtool keeps, read with json: (kind, name, start, end, stream, corr) per event."""
    rows = [(GPU[e["cat"]], e["name"], e["ts"], round(e["ts"] + e["dur"], 3), e["args"]["stream"],
             e["args"]["correlation"], k)
            for k, e in enumerate(doc["traceEvents"]) if e.get("cat") in GPU and e.get("ph") == "X"]
    ls = [e for e in doc["traceEvents"]
          if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaGraphLaunch")]
    launches = {e["args"]["correlation"]: e["ts"] for e in ls}
    ends = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in ls if isinstance(e.get("dur"), (int, float))}
    return {"rows": rows, "launches": launches, "launch_ends": ends, "n": len(doc["traceEvents"])}


def columns(t: T.Trace) -> dict:
    rows = list(zip(t.kind.tolist(), [t.names[i] for i in t.name.tolist()], t.start.tolist(), t.end.tolist(),
                    t.stream.tolist(), t.correlation.tolist(), t.seq.tolist()))
    return {"rows": rows, "launches": t.launches, "launch_ends": t.launch_ends, "n": t.n_events}


def kernel(k: int, **args: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"k{k % 3}", "pid": 0, "tid": 7, "ts": 10.0 * k, "dur": 4.5,
            "args": {"device": 0, "stream": 7 + k % 2, "correlation": 1 + k // 10, **args}}


def tricky_doc() -> dict:
    """Separators inside strings and nested lists of objects; "traceEvents" in a value before
    the real key; the cgtool block after the events full of separators and closing brackets."""
    evs = []
    for k in range(300):
        if k % 10 == 0:
            evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 10.0 * k - 1, "dur": 1,
                        "args": {"correlation": 1 + k // 10}})
        extra = {}
        if k % 7 == 0:
            extra["note"] = 'a "},{" and "}]" in a string }, {'
        if k % 11 == 0:
            extra["list"] = [{"a": 1}, {"b": [{"c": 2}, {"d": 3}]}]
        evs.append(kernel(k, **extra))
        if k % 13 == 0:
            evs.append({"ph": "i", "cat": "cpu_instant_event", "name": "x", "ts": 1,
                        "args": {"nested": [{"x": [1, {"y": 2}]}, {"z": "\"traceEvents\": ["}]}})
    return {"title": 'not here: "traceEvents": [1, 2]', "deviceProperties": [{"id": 0}, {"id": 1}],
            "traceEvents": evs, "cgtool": {"graphs": [], "other": [{"a": [{"b": 1}, {"c": 2}]}, {"d": []}]},
            "traceName": "}]"}


@pytest.mark.parametrize("window", [64, 300, 1000, 1 << 20])
@pytest.mark.parametrize("layout", ["compact", "kineto", "spaced"])
def test_streaming_reads_what_json_reads(tmp_path, monkeypatch, window, layout):
    doc = tricky_doc()
    if layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    elif layout == "kineto":  # one event per line, as torch.profiler writes
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        text = ('{\n  "schemaVersion": 1,\n  "traceEvents": [\n  ' + ",\n  ".join(json.dumps(e) for e in doc["traceEvents"])
                + "\n  ],\n  " + json.dumps(head)[1:-1] + "\n}\n")
    else:
        text = json.dumps(doc, indent=3)
    p = tmp_path / "t.json"
    p.write_text(text)
    monkeypatch.setattr(TS, "WINDOW", window)
    used = []
    real = TS._load_whole
    monkeypatch.setattr(TS, "_load_whole", lambda *a: used.append(1) or real(*a))
    t = T.load_trace(p)
    assert not used, "the streaming reader fell back to the whole-document reader"
    assert columns(t) == brute(json.loads(text))
    assert t.cgtool == json.loads(text)["cgtool"]
    g = tmp_path / "t.json.gz"
    g.write_bytes(gzip.compress(text.encode()))
    assert columns(T.load_trace(g)) == brute(json.loads(text))


def test_streaming_and_whole_document_readers_agree_on_real_traces(data_dir, monkeypatch):
    monkeypatch.setattr(TS, "WINDOW", 2048)
    for p in sorted(data_dir.glob("*/*trace.json.gz")):
        data = bytearray(gzip.decompress(p.read_bytes()))
        whole = TD._load(data, str(p))
        streamed = T.load_trace(p)
        assert columns(streamed) == columns(whole), p
        for col in ("device", "graph_id", "tools_id", "channel", "channel_type", "shape", "shared_memory", "nbytes"):
            assert getattr(streamed, col).tolist() == getattr(whole, col).tolist(), (p, col)
        assert streamed.node_id_form == whole.node_id_form and streamed.cgtool == whole.cgtool


@pytest.mark.parametrize("bad, says", [
    (lambda s: s[: len(s) // 2], "truncated"),  # ends inside the events
    (lambda s: s.replace('"dur": 4.5', '"dur": 4.5,,', 1), "not valid JSON"),
    (lambda s: s.replace('"stream": 8', '"stream": "8"', 1), "args.stream"),
    (lambda s: s + " {}", "not valid JSON"),  # trailing data after the document
])
def test_errors_are_the_whole_document_readers(tmp_path, monkeypatch, bad, says):
    text = bad(json.dumps(tricky_doc(), indent=1))
    p = tmp_path / "t.json"
    p.write_text(text)
    monkeypatch.setattr(TS, "WINDOW", 256)
    with pytest.raises(InvalidInputError) as streamed:
        T.load_trace(p)
    with pytest.raises(InvalidInputError) as whole:
        TD._load(bytearray(text.encode()), str(p))
    assert str(streamed.value) == str(whole.value) and says in str(streamed.value)


def test_a_second_traceevents_key_is_read_as_the_whole_document_reader_reads_it(tmp_path, monkeypatch):
    doc = tricky_doc()
    text = json.dumps(doc)[:-1] + ', "traceEvents": [' + json.dumps(kernel(5)) + "]}"
    p = tmp_path / "t.json"
    p.write_text(text)
    monkeypatch.setattr(TS, "WINDOW", 256)
    t = T.load_trace(p)
    assert len(t) == 1 and t.n_events == 1 and math.isclose(float(t.start[0]), 50.0)


def shape_key(grid: list, block: list) -> int:
    """launch_shape, computed here from its definition (a mixed-radix code of grid and block)."""
    key = 1
    for v in (*grid, *block):
        key = (key * 1_000_003 + v) % (1 << 62)
    return key or 1


def test_launch_shapes_read_in_the_first_pass_are_the_second_passes(tmp_path, monkeypatch):
    """Events without node ids carry their launch shapes into the columns; once a chunk had such
    events, the next chunks decode the shapes with the args (one pass). Chunks with a malformed
    shape somewhere, or events with node ids, give what the per-event reading gives."""
    evs, want = [], []
    for k in range(400):
        e = kernel(k, grid=[k % 5 + 1, 1, 1], block=[128, 1, 1], **{"shared memory": 16 * (k % 4)})
        if k % 9 == 0:
            e["cat"], e["name"] = "gpu_memcpy", "Memcpy HtoD"
            e["args"] = {"device": 0, "stream": 7, "correlation": 1 + k // 10, "bytes": 1000 + k}
        if k % 50 == 17:
            e["args"]["grid"] = "bad"  # malformed: unknown shape for this event, the chunk read event by event
        if 200 <= k < 230:
            e["args"]["graph node id"] = (3 << 32) | k  # with a node id: no shape kept
        evs.append(e)
        a = e["args"]
        if "graph node id" in a or a.get("grid") == "bad":  # a malformed value: the event's shape args unknown
            want.append((0, -1, -1))
        elif e["cat"] == "gpu_memcpy":
            want.append((0, -1, a["bytes"]))
        else:
            want.append((shape_key(a["grid"], a["block"]), a["shared memory"], -1))
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}, indent=1))
    monkeypatch.setattr(TS, "WINDOW", 2000)
    monkeypatch.setenv("CGTOOL_TRACE_SCAN", "1")  # the compiled scan of the text, where it is built
    t = T.load_trace(p)
    assert list(zip(t.shape.tolist(), t.shared_memory.tolist(), t.nbytes.tolist())) == want
    monkeypatch.setenv("CGTOOL_TRACE_SCAN", "0")  # msgspec's two passes
    shaped = []
    real = TD._columnize
    monkeypatch.setattr(TD, "_columnize", lambda evs, blob, acc, sh=False: shaped.append(sh) or real(evs, blob, acc, sh))
    t = T.load_trace(p)
    assert list(zip(t.shape.tolist(), t.shared_memory.tolist(), t.nbytes.tolist())) == want
    assert any(shaped) and not all(shaped)


def _all_columns(t: T.Trace) -> dict:
    out = columns(t)
    out["names"] = list(t.names)
    for col in ("device", "graph_id", "tools_id", "channel", "channel_type", "shape", "shared_memory", "nbytes"):
        out[col] = getattr(t, col).tolist()
    return out


def test_compiled_columns_equal_the_python_passes(data_dir, monkeypatch, tmp_path):
    """The reader's columns through the compiled one-pass columnizer (cgtool/artifacts/_columns.c)
    and through the Python passes it stands in for, on every real trace here (cgtool's, the
    torch.profiler's, record's) and on the tricky document (instant events, launches, names,
    channel types as names): the same columns, names and launches, chunk by chunk."""
    if TD._fast_columns() is None:
        pytest.skip("the compiled columns are not built here")
    monkeypatch.setenv("CGTOOL_TRACE_SCAN", "0")  # msgspec's decoding (the scan is tests/test_trace_scan.py's)
    monkeypatch.setattr(TS, "WINDOW", 4096)
    paths = sorted(data_dir.glob("*/*trace.json.gz")) + sorted(data_dir.glob("record_*/trace.json.gz"))
    doc = tricky_doc()
    for e in doc["traceEvents"][:3]:
        if e.get("cat") == "kernel":
            e["args"]["channel_type"] = "compute"  # a name, not an int: the Python column for it
    tricky = tmp_path / "tricky.json"
    tricky.write_text(json.dumps(doc))
    paths.append(tricky)
    assert len(paths) > 10
    real = TD._fast_columns()
    taken = []

    class Counting:  # the compiled columns, counting the chunks they took (None: the Python passes)
        def gpu_columns(self, *a):
            r = real.gpu_columns(*a)
            taken.append(r is not None)
            return r

    for p in paths:
        monkeypatch.setattr(TD, "_FAST", Counting())
        compiled = _all_columns(T.load_trace(p))
        monkeypatch.setattr(TD, "_FAST", False)
        python = _all_columns(T.load_trace(p))
        assert compiled == python, p
    assert sum(taken) > 0.9 * len(taken), "the compiled pass took nearly every chunk"


@pytest.mark.subprocess
def test_the_model_types_import_without_the_readers():
    """``from cgtool.artifacts.trace import Trace`` loads the model alone; the readers come with
    their first use."""
    import subprocess
    import sys

    code = ("import json, sys; import cgtool.artifacts.trace as T; from cgtool.artifacts.trace import Trace, KINDS; "
            "a = sorted(m for m in sys.modules if m.startswith('cgtool.artifacts.trace')); T.load_trace; "
            "b = sorted(m for m in sys.modules if m.startswith('cgtool.artifacts.trace')); print(json.dumps([a, b]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = json.loads(out)
    assert before == ["cgtool.artifacts.trace", "cgtool.artifacts.trace.model"]
    assert {"cgtool.artifacts.trace.stream", "cgtool.artifacts.trace.decode"} <= set(after)


def test_skip_ws_finds_what_the_pattern_finds():
    """``_skip_ws`` (the pattern for the first 4 KiB, then ``bytes.translate`` a MiB at a time)
    against one search of the whole buffer for a byte that is not JSON whitespace, across its
    block edges."""
    import random

    from cgtool.artifacts.trace.stream import _skip_ws

    rnd = random.Random(1)
    for _ in range(120):
        n = rnd.choice([0, 1, 4095, 4096, 4097, (1 << 20) + 4095, (1 << 20) + 4096, (2 << 20) + 4100])
        buf = bytearray(b" " * n)
        for k in rnd.sample(range(n), min(n, 20)):
            buf[k] = rnd.choice(b"\t\r\n ")
        i = rnd.choice([0, rnd.randrange(n + 1)])
        at = i + rnd.choice([rnd.randrange(n + 1), 4095, 4096, (1 << 20) + 4095, (1 << 20) + 4096])
        if at < n and rnd.random() < 0.8:  # else whitespace to the end
            buf[at] = ord("x")
        m = re.compile(rb"[^ \t\r\n]").search(buf, i)
        assert _skip_ws(memoryview(bytes(buf)), i) == (n if m is None else m.start()), (n, i)
