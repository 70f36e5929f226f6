"""Inputs that must not pass without a word, and messages about inputs: a GPU event without "ph",
events of GPU categories of other phases, a node whose graph_id is not its export's exec_graph_id,
a string among the timings or the replay check, field names with spaces, a UTF-8 byte order mark,
a 401-digit number, control characters, and the size cap (its advice and a memory bound)."""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GRAPH = DATA / "forkjoin" / "graph.json"
TRACE = DATA / "forkjoin_trace" / "trace.json.gz"
BENCH = DATA / "bench" / "h200_samples.json"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: The reader's paths: the compiled scan, msgspec with the compiled columns, msgspec alone.
READERS = [{}, {"CGTOOL_TRACE_SCAN": "0"}, {"CGTOOL_TRACE_COMPILED": "0"}]


def _trace() -> dict[str, Any]:
    return json.loads(gzip.decompress(TRACE.read_bytes()))


def _gpu_positions(doc: dict[str, Any]) -> list[int]:
    return [i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") in GPU_CATS]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CGTOOL_")}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), COLUMNS="120", **extra)
    return env


def cgtool(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None,
           preexec: Any = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cgtool", *map(str, args)], capture_output=True, text=True,
                          env=env or _env(), cwd=cwd, timeout=300, preexec_fn=preexec)


# ------------------------------------------------------------------------ phases of GPU events

@pytest.mark.parametrize("reader", READERS, ids=["scan", "msgspec", "python"])
def test_a_gpu_event_without_ph_is_refused(tmp_path, reader, run_cli):
    doc = _trace()
    at = _gpu_positions(doc)[7]
    del doc["traceEvents"][at]["ph"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    rc, _, err = run_cli("deps", p, env=_env(**reader))
    assert rc == 4, err
    assert f'traceEvents[{at}] ({doc["traceEvents"][at]["cat"]}' in err and 'no "ph"' in err


@pytest.mark.subprocess
def test_a_gpu_event_without_ph_is_refused_by_the_two_process_reader(tmp_path, monkeypatch):
    from cgtool.artifacts.trace import stream as T
    from cgtool.errors import InvalidInputError

    doc = _trace()
    at = _gpu_positions(doc)[-3]  # in the second half: the worker's
    doc["traceEvents"][at]["ph"] = ""
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(T, "WINDOW", 4096)
    monkeypatch.setattr(T, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setenv("CGTOOL_TRACE_WORKERS", "2")
    with pytest.raises(InvalidInputError, match=re.escape(f"traceEvents[{at}]")):
        T.load_trace(p)


def _with_other_phases(tmp_path: Path) -> tuple[Path, Path, int, int]:
    """A trace with instants and begin/end marks of GPU categories added beside its GPU work (copies
    of some kernel events with another phase), and the same trace without them. The marks are added,
    not made from the work: a replay that loses a kernel event is refused as incomplete."""
    doc = _trace()
    pos = _gpu_positions(doc)
    events = doc["traceEvents"]
    marks = []
    for k, i in enumerate(pos[3::9]):
        m = copy.deepcopy(events[i])
        m["ph"] = "iBE"[k % 3]
        marks.append((i, m))
    without = copy.deepcopy(doc)
    q = tmp_path / "without.json"
    q.write_text(json.dumps(without))
    for shift, (i, m) in enumerate(marks):  # each mark right after the event it copies
        events.insert(i + 1 + shift, m)
    p = tmp_path / "phases.json"
    p.write_text(json.dumps(doc))
    return p, q, len(marks), marks[0][0] + 1


@pytest.mark.parametrize("reader", READERS, ids=["scan", "msgspec", "python"])
def test_gpu_events_of_other_phases_are_counted_and_left_out(tmp_path, reader, run_cli):
    p, q, n, first = _with_other_phases(tmp_path)
    rc, out, err = run_cli("deps", p, "--json", "-", env=_env(**reader))
    assert rc == 0, err
    assert f"warning: {p}: {n} events of GPU categories (the first at traceEvents[{first}])" in err
    rc_q, out_q, err_q = run_cli("deps", q, "--json", "-", env=_env(**reader))
    assert rc_q == 0 and "warning" not in err_q
    strip = lambda d: {k: v for k, v in d.items() if k not in ("trace", "source")}  # noqa: E731
    assert strip(json.loads(out)) == strip(json.loads(out_q))


@pytest.mark.subprocess
def test_other_phases_in_the_second_half_are_counted_by_the_two_process_reader(tmp_path, monkeypatch):
    from cgtool.artifacts.trace import stream as T

    p, _, n, first = _with_other_phases(tmp_path)
    monkeypatch.setattr(T, "WINDOW", 4096)
    monkeypatch.setattr(T, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setenv("CGTOOL_TRACE_WORKERS", "2")
    joined = []
    real_join = T._Worker.join
    monkeypatch.setattr(T._Worker, "join", lambda self, acc: joined.append(1) or real_join(self, acc))
    with pytest.warns(Warning, match=re.escape(f"{n} events of GPU categories (the first at traceEvents[{first}])")):
        T.load_trace(p)
    assert joined


# ------------------------------------------------------------------------------- graph exports

def _graph() -> dict[str, Any]:
    return json.loads(GRAPH.read_text())


@pytest.mark.parametrize("args", [["topo", "{g}"], ["dot", "{g}"], ["diff", "{g}", str(GRAPH)], ["diff", str(GRAPH), "{g}"],
                                  ["deps", str(DATA / "forkjoin_trace_mc1" / "trace.json.gz"), "--graph", "{g}"]])
def test_a_node_of_another_graph_is_refused(run_cli, tmp_path, args):
    g = _graph()
    k = 5
    g["nodes"][k]["graph_id"] = g["exec_graph_id"] + 1
    g["nodes"][k]["tools_id"] = (g["exec_graph_id"] + 1) << 32 | g["nodes"][k]["node_id"]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    rc, _, err = run_cli(*[a.replace("{g}", str(p)) for a in args])
    assert rc == 4, err
    assert f"nodes[{k}].graph_id is {g['exec_graph_id'] + 1}" in err and "exec_graph_id" in err


@pytest.mark.parametrize("where, value, field", [
    (("timings", "capture_s"), "fast", "cgtool.timings.capture_s"),
    (("timings", "instantiate s"), "1 ms", 'cgtool.timings["instantiate s"]'),
    (("timings", "capture_s"), -1.0, "cgtool.timings.capture_s"),
    (("check", "max_abs_diff"), "0.5", "cgtool.check.max_abs_diff"),
    (("check", "ok"), "yes", "cgtool.check.ok"),
    (("check", "worst_output"), 3, "cgtool.check.worst_output"),
])
def test_a_value_the_summary_would_leave_out_is_refused(run_cli, tmp_path, where, value, field):
    g = _graph()
    g["cgtool"].setdefault(where[0], {})[where[1]] = value
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    rc, _, err = run_cli("topo", p)
    assert rc == 4 and field in err and repr(value) in err, err


def test_null_timings_and_check_are_unknown_not_refused(run_cli, tmp_path):
    g = _graph()
    g["cgtool"]["timings"]["capture_s"] = None
    g["cgtool"]["check"] = {"ok": None, "max_abs_diff": None, "worst_output": None}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    rc, _, err = run_cli("topo", p)
    assert rc == 0, err


# ----------------------------------------------------------------------------------- messages

def test_a_field_name_with_spaces_is_named_whole(tmp_path, run_cli):
    doc = _trace()
    at = _gpu_positions(doc)[4]
    doc["traceEvents"][at]["args"]["graph node id"] = "seven"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    for reader in READERS:
        rc, _, err = run_cli("deps", p, env=_env(**reader))
        assert rc == 4 and f'traceEvents[{at}].args["graph node id"]' in err and "'seven'" in err, err


@pytest.mark.parametrize("what", ["graph", "graph.gz", "trace", "trace.gz", "bench"])
def test_a_utf8_byte_order_mark_is_accepted(run_cli, tmp_path, what):
    src = {"graph": GRAPH, "trace": TRACE, "bench": BENCH}[what.split(".")[0]]
    raw = gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
    p = tmp_path / ("x.json.gz" if what.endswith(".gz") else "x.json")
    p.write_bytes(gzip.compress(b"\xef\xbb\xbf" + raw) if what.endswith(".gz") else b"\xef\xbb\xbf" + raw)
    plain = tmp_path / "plain.json"
    plain.write_bytes(raw)
    cmd = {"graph": ["topo"], "trace": ["deps"], "bench": ["bench", "--compare", BENCH]}[what.split(".")[0]]
    rc, out, err = run_cli(*cmd, p, "--json", "-")
    rc0, out0, _ = run_cli(*cmd, plain, "--json", "-")
    assert rc == rc0 == 0, err
    norm = lambda s: re.sub(r'"[^"]*(x\.json\.gz|x\.json|plain\.json)"', '"F"', s)  # noqa: E731
    assert norm(out) == norm(out0)


def test_a_byte_order_mark_inside_the_document_is_still_refused(run_cli, tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b'{"exec_graph_id": 1, \xef\xbb\xbf"nodes": []}')
    rc, _, err = run_cli("topo", p)
    assert rc == 4, err


@pytest.mark.parametrize("kind", ["bench", "graph", "trace", "timings"])
def test_a_401_digit_number_is_shown_by_its_size(run_cli, tmp_path, kind):
    big = 10**400
    if kind == "bench":
        b = json.loads(BENCH.read_text())
        next(iter(b["workloads"].values()))["gpu_us"][0] = big
        p, args = tmp_path / "b.json", ["bench", "--compare", "{p}", BENCH]
        p.write_text(json.dumps(b))
    elif kind == "graph":
        g = _graph()
        g["nodes"][0]["tools_id"] = big
        p, args = tmp_path / "g.json", ["topo", "{p}"]
        p.write_text(json.dumps(g))
    elif kind == "timings":
        g = _graph()
        g["cgtool"]["timings"]["capture_s"] = big
        p, args = tmp_path / "g.json", ["topo", "{p}"]
        p.write_text(json.dumps(g))
    else:
        doc = _trace()
        doc["traceEvents"][_gpu_positions(doc)[2]]["args"]["stream"] = big
        p, args = tmp_path / "t.json", ["deps", "{p}"]
        p.write_text(json.dumps(doc))
    rc, _, err = run_cli(*[str(p) if a == "{p}" else a for a in args])
    assert rc == 4, err
    assert "an integer of 401 digits" in err and "0" * 60 not in err, err


CONTROLS = {"BEL": "\x07", "BS": "\x08", "VT": "\x0b", "FF": "\x0c", "CR": "\r", "ESC": "\x1b", "NUL": "\x00",
            "DEL": "\x7f", "CSI": "\x9b"}


def test_every_control_character_is_shown_the_same_way(run_cli, tmp_path):
    """Each control character in a kernel name shows as its \\xNN escape in the tables, where rich
    alone deletes BEL, BS, VT, FF and CR and keeps the rest."""
    g = _graph()
    escaped = {}
    for k, (tag, ch) in enumerate(CONTROLS.items()):
        g["nodes"][k]["kernel_name"] = f"k{tag}{ch}end"
        escaped[tag] = f"k{tag}\\x{ord(ch):02x}end"
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    rc, out, err = run_cli("topo", p, "--json", tmp_path / "t.json")
    assert rc == 0, err
    for ch in CONTROLS.values():
        assert ch not in out and ch not in err
    import io

    from rich.table import Table

    from cgtool.cli._common import _Console

    t = Table()
    t.add_column("name")
    for name in (f"k{tag}{ch}end" for tag, ch in CONTROLS.items()):
        t.add_row(name)
    buf = io.StringIO()
    _Console(file=buf, width=40, markup=False, highlight=False).print(t)
    shown = buf.getvalue()
    for tag, esc in escaped.items():
        assert esc in shown, (tag, shown)
    widths = {len(line) for line in shown.splitlines()}
    assert len(widths) == 1, shown  # the layout measured the escapes: every row as wide as the frame


# ----------------------------------------------------------------------------- the size cap

def _meminfo_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs Linux's /proc/meminfo")
def test_the_cap_message_suggests_what_this_machine_can_hold(run_cli, tmp_path):
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b'{"nodes": ' + b" " * (300 << 20), compresslevel=1))  # 300 MiB > the 256 MiB floor
    rc, _, err = run_cli("topo", p)
    assert rc == 4 and "20000000000" not in err, err
    m = re.search(r"--max-bytes (\d+) now", err)
    if m is None:
        assert "too little" in err, err
        return
    assert int(m.group(1)) <= _meminfo_available() // 2, (m.group(1), _meminfo_available())  # with room for change


@pytest.fixture(scope="module")
def space_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """'{"nodes": ' then 3 GiB of spaces, gzipped (3 MB)."""
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    member = co.compress(b" " * (32 << 20)) + co.flush()  # 96 members of 32 MiB: one compressed
    p = tmp_path_factory.mktemp("bomb") / "spaces.json.gz"
    p.write_bytes(gzip.compress(b'{"nodes": ', mtime=0) + member * 96)
    return p


@pytest.mark.slow  # a whitespace bomb read under an address-space limit, as the gzip bombs of test_hostile
@pytest.mark.subprocess
def test_a_raised_cap_keeps_a_memory_bound(space_bomb, tmp_path):
    """Following the advice with a much larger cap, reading a whitespace bomb whole stops at what the
    memory can hold (here an address-space limit of 1.5 GiB: reading stops near 430 MiB, well past
    the 256 MiB default cap, half the work of a 3 GiB limit), with a paragraph, not the kernel's
    out-of-memory killer or a MemoryError."""
    limit = 3 << 29

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = cgtool("topo", space_bomb, "--max-bytes", "20000000000", cwd=tmp_path, preexec=cap)
    assert r.returncode == 4, r.stderr
    assert "more than this machine can hold to read it" in r.stderr and "Traceback" not in r.stderr
    assert "out of memory" not in r.stderr  # stopped by the bound, not by a failed allocation
