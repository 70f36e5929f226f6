"""The recorder on a CPU, driven with a stand-in for CUPTI and cupti-python (tests/fake_cupti_abi.py).

The stand-in delivers callbacks the way CUPTI does (struct pointers laid out as cupti_callbacks.h
says), the graph reads and export are replaced by stubs, and the test checks what the recorder
wrote: node source lines (the lines of *this* file that "created" the nodes), replay counts,
pools, index; and for whole programs (recorded by `cgtool record` in subprocesses with the
stand-in on their path) that crashes lose nothing already written.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cgtool.capture.record.options import RecordOptions

from fake_cupti_abi import (CbData as _CbData, Dom as _Dom, Drv as _Drv, FakeCupti, FakeLibcupti, Res as _Res,
                            Rt as _Rt, Site as _Site)


def _capture(f: FakeCupti, graph: int, handles: list[int], exec_: int) -> list[int]:
    """A stream capture of len(handles) nodes; returns the line each node was made on."""
    f.graphs[graph] = handles  # type: ignore[attr-defined]
    f.api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_ENTER)
    f.api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_EXIT)
    lines = []
    for h in handles:
        lines.append(sys._getframe().f_lineno + 1)
        f.graph_event(_Res.GRAPHNODE_CREATED, graph=graph, node=h)
    f.api(_Rt.cudaStreamEndCapture_v10000, _Site.API_ENTER)
    f.api(_Rt.cudaStreamEndCapture_v10000, _Site.API_EXIT)
    f.api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_ENTER)
    # instantiation clones nodes: those callbacks must be off now
    f.graph_event(_Res.GRAPHNODE_CREATED, graph=graph + 1, node=h + 99)
    f.graph_event(_Res.GRAPHEXEC_CREATED, graph=graph, exec_=exec_)
    f.api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_EXIT)
    return lines


def _replay(f: FakeCupti, exec_: int, corr: int) -> None:
    f.api(_Rt.cudaGraphLaunch_v10000, _Site.API_ENTER, exec_, corr)
    f.api(_Drv.cuGraphLaunch, _Site.API_ENTER, exec_, corr + 1, dom=_Dom.DRIVER_API)  # inside the runtime call
    f.api(_Rt.cudaGraphLaunch_v10000, _Site.API_EXIT, exec_, corr)


def test_recorder_writes_graphs_with_lines_and_counts(fake: FakeCupti, tmp_path: Path) -> None:
    from cgtool.capture.record.recorder import Recorder

    rec = Recorder(str(tmp_path), program=["prog.py"])
    rec.start()
    lines_a = _capture(fake, 100, [11, 12, 13], 5000)
    lines_b = _capture(fake, 200, [21, 22], 6000)
    assert rec.flush(), "the writer thread has both graphs on disk"
    assert (tmp_path / "graph_000.json").exists() and (tmp_path / "graph_001.json").exists()
    for k in range(4):
        _replay(fake, 5000, 10 + 2 * k)
    _replay(fake, 6000, 50)
    # a launch made straight through the driver (no runtime call around it) counts too
    fake.api(_Drv.cuGraphLaunch, _Site.API_ENTER, 6000, 60, dom=_Dom.DRIVER_API)
    rec.finish(0)

    idx = json.loads((tmp_path / "index.json").read_text())
    assert idx["finished"] and idx["exit_code"] == 0 and idx["recorder_errors"] == []
    # the input checks are on by default, but a program that imports no torch has no allocator to
    # watch: its index says nothing of them, as with --check-inputs 0
    assert rec.inputs is not None and rec.inputs.every == RecordOptions().check_inputs > 0
    assert "torch" not in sys.modules
    assert idx.get("input_checks") is None and [g.get("inputs") for g in idx["graphs"]] == [None, None]
    assert [g["replays"] for g in idx["graphs"]] == [4, 2]
    assert [g["nodes"] for g in idx["graphs"]] == [3, 2]
    assert [g["exec_graph_id"] for g in idx["graphs"]] == [5, 6]
    for i, lines in ((0, lines_a), (1, lines_b)):
        doc = json.loads((tmp_path / f"graph_00{i}.json").read_text())
        srcs = [n["source"] for n in doc["cgtool"]["nodes"]]
        assert [s["file"] for s in srcs] == [__file__] * len(lines)
        assert [s["line"] for s in srcs] == lines
        assert doc["cgtool"]["record"]["replays"] == idx["graphs"][i]["replays"]
        # the capture began in this test function, called from the test body
        assert doc["cgtool"]["record"]["captured_at"]["function"] == "_capture"


def test_compiled_callback_stores_the_same_nodes(fake: FakeCupti, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The C node callback (``_nodecb.c``) against the Python one: same lines, modules, ranges."""
    from cgtool.capture.record import _subscriber, attribution
    from cgtool.capture.record.recorder import Recorder

    if _subscriber.compiled_callback() is None:
        pytest.skip("the compiled callback is not built here (Python < 3.11 or no C compiler)")
    monkeypatch.setattr(_subscriber, "load_libcupti", lambda: FakeLibcupti(fake))

    class Attn:  # an nn.Module stand-in: `forward(self, ...)` with `_modules`
        _modules: dict[str, Any] = {}

        def forward(self, f: FakeCupti, graph: int, handles: list[int], exec_: int) -> list[int]:
            return _capture(f, graph, handles, exec_)

    class Mlp(Attn):  # its `self` is captured by a closure: a cell in the frame
        def forward(self, f: FakeCupti, graph: int, handles: list[int], exec_: int) -> list[int]:
            keep = lambda: self  # noqa: E731
            return keep()._capture_more(f, graph, handles, exec_)

        def _capture_more(self, f: FakeCupti, graph: int, handles: list[int], exec_: int) -> list[int]:
            return _capture(f, graph, handles, exec_)

    def outer(f: FakeCupti, graph: int, handles: list[int], exec_: int) -> list[int]:  # "the launcher"
        return Attn().forward(f, graph, handles, exec_) + Mlp().forward(f, graph + 1, [h + 50 for h in handles],
                                                                        exec_ + 1000)

    monkeypatch.setattr(attribution, "_STOP_KEEP", [])
    monkeypatch.setattr(attribution, "_STOP", set())
    docs = {}
    internal = _subscriber.compiled_callback().set_walk(True)  # CPython's frames read directly, where built
    for how in ("cupti-python", "c", "c+public", "c+stop"):
        if how == "c+stop":  # `outer` plays the launcher (runpy, the boot): the walk ends there
            attribution.stop_at(outer.__code__)
        _subscriber.compiled_callback().set_walk(how != "c+public")  # the public frame API's walk
        monkeypatch.setenv("CGTOOL_RECORD_SUBSCRIBER", how.split("+")[0])
        out = tmp_path / how
        out.mkdir()
        rec = Recorder(str(out), program=["prog.py"])
        rec.start()
        assert rec.subscriber == how.split("+")[0]
        attribution.ranges.names.append("my_range")
        try:
            lines = outer(fake, 100, [11, 12, 13], 5000)
        finally:
            attribution.ranges.names.pop()
        info = rec.tracker.nodes[100][11]
        # the compiled callback packs each node's info into bytes: nothing for the cyclic GC to count
        assert isinstance(info, bytes) == (how.split("+")[0] == "c")
        if isinstance(info, bytes):
            info = _subscriber.compiled_callback().unpack(info)
        codes = info[0][0]
        assert Attn.forward.__code__ in codes and (outer.__code__ in codes) == (how != "c+stop")
        # a destroyed graph's nodes are forgotten (handles are reused), the other graph's kept
        fake.graph_event(_Res.GRAPH_DESTROY_STARTING, graph=100)
        assert 100 not in rec.tracker.nodes and not {11, 12, 13} & set(rec.tracker.node_graph)
        assert set(rec.tracker.nodes[101]) == {61, 62, 63} and rec.tracker.node_graph[61] == 101
        if how.split("+")[0] == "c":  # done by the compiled callback, not the Python handler
            assert _subscriber.compiled_callback().handled_stats()[(3, 10)][0] == 1
            assert (3, 10) not in rec.tracker.cb_stats
        rec.finish(0)
        idx = json.loads((out / "index.json").read_text())
        assert idx["recorder_errors"] == [], idx["recorder_errors"]
        assert idx["callback_stats"]["3/13"]["calls"] == 6  # not the node made during instantiation
        # the instantiation's start: kept by the compiled callback (or the Python one), read at exec creation
        assert all(g["instantiate_s"] is not None and 0 <= g["instantiate_s"] < 5 for g in idx["graphs"])
        # the recorder's own time per graph inside the capture: the graph-exec callback's parts, and
        # (compiled callback) the node callbacks since the graph before, whose counts add up to all
        phases = {"reserved", "export", "pool_and_stack", "environment_and_record"}
        for g in idx["graphs"]:
            assert phases <= set(g["recorder_s"]) and all(0 <= g["recorder_s"][k] < 5 for k in phases), g
        if how.split("+")[0] == "c":
            assert sum(g["recorder_s"]["node_callback_calls"] for g in idx["graphs"]) == 6, idx["graphs"]
        else:
            assert all("node_callback_calls" not in g["recorder_s"] for g in idx["graphs"])
        st = idx["callback_stats"]
        if how.split("+")[0] == "c":  # capture begin's exit and end's enter, instantiations: never in Python
            assert (2, 418) not in rec.tracker.cb_stats and st["2/418"]["calls"] == 4, (how, st)  # counted in C
            assert st["2/315"]["calls"] == st["2/319"]["calls"] == 2, (how, st)
        else:
            assert st["2/418"]["calls"] == st["2/315"]["calls"] == st["2/319"]["calls"] == 4, (how, st)
        docs[how] = [n for g in ("graph_000.json", "graph_001.json")
                     for n in json.loads((out / g).read_text())["cgtool"]["nodes"]]
        srcs = [n["source"] for n in docs[how]]
        assert [s["line"] for s in srcs] == lines and {s["file"] for s in srcs} == {__file__}
    _subscriber.compiled_callback().set_walk(internal)
    assert [n["source"] for n in docs["c"]] == [n["source"] for n in docs["cupti-python"]]
    assert [n["source"] for n in docs["c+public"]] == [n["source"] for n in docs["cupti-python"]]
    for a, b in zip(docs["c+stop"], docs["c"]):  # the same line; the user stack ends below `outer`
        sa, sb = a["source"], b["source"]
        assert {k: v for k, v in sa.items() if k != "stack"} == {k: v for k, v in sb.items() if k != "stack"}
        assert sa["stack"] == [f for f in sb["stack"] if not f.endswith(" outer")][:len(sa["stack"])]
        assert not any(f.endswith(" outer") for f in sa["stack"]) and any(f.endswith(" outer") for f in sb["stack"])
    assert all(n["source"].get("record_function") == "my_range" for n in docs["c"]), docs["c"][0]["source"]
    assert [n["source"]["module"] for n in docs["c"]] == ["Attn"] * 3 + ["Mlp"] * 3, docs["c"][3]["source"]


def _api_exit(f: FakeCupti, dom: _Dom, cbid: int, params: Any, ret: int) -> None:
    """An API's exit with its parameter struct and return value, as CUPTI hands them over."""
    rc = ctypes.c_int(ret)
    f.keep += [params, rc]
    f._deliver(dom, cbid, _CbData(int(_Site.API_EXIT), b"x", ctypes.addressof(params), ctypes.addressof(rc), None,
                                  None, 0, None, 0))


def test_compiled_callback_counts_replays_and_capture_memory(fake: FakeCupti, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With the compiled callback, replays are counted and memory taken during a capture is accounted
    for in C (cudaMalloc / cudaFree / cuMemCreate exits, failed calls left out): the index has the
    replays the program made and the bytes its capture took, whatever was allocated before."""
    from cgtool.capture.record import _subscriber
    from cgtool.capture.record.recorder import Recorder

    if _subscriber.compiled_callback() is None:
        pytest.skip("the compiled callback is not built here (Python < 3.11 or no C compiler)")
    monkeypatch.setattr(_subscriber, "load_libcupti", lambda: FakeLibcupti(fake))
    monkeypatch.setenv("CGTOOL_RECORD_SUBSCRIBER", "c")
    malloc, free_ = _subscriber.ALLOC_RUNTIME["cudaMalloc_v3020"], _subscriber.ALLOC_RUNTIME["cudaFree_v3020"]
    create = _subscriber.ALLOC_DRIVER["cuMemCreate"]
    ptrs = [ctypes.c_void_p(0xA000), ctypes.c_void_p(0xB000), ctypes.c_void_p(0xC000)]
    handle = ctypes.c_uint64(0x77)
    fake.keep += ptrs + [handle]

    def cuda_malloc(i: int, size: int, ret: int = 0) -> None:
        p = (ctypes.c_uint64 * 2)(ctypes.addressof(ptrs[i]), size)  # {void **devPtr; size_t size}
        _api_exit(fake, _Dom.RUNTIME_API, malloc, p, ret)

    rec = Recorder(str(tmp_path), program=["prog.py"])
    rec.start()
    assert rec.subscriber == "c"
    cuda_malloc(0, 1000)  # before the capture: not the capture's
    fake.graphs[100] = [11, 12]  # type: ignore[attr-defined]
    fake.api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_ENTER)
    fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=11)
    cuda_malloc(1, 4096)
    cuda_malloc(2, 999, ret=2)  # failed (cudaErrorMemoryAllocation): nothing taken
    _api_exit(fake, _Dom.DRIVER_API, create, (ctypes.c_uint64 * 2)(ctypes.addressof(handle), 2 << 20), 0)
    _api_exit(fake, _Dom.RUNTIME_API, free_, (ctypes.c_uint64 * 1)(0xA000), 0)  # gives back the 1000 bytes
    fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=12)
    fake.api(_Rt.cudaStreamEndCapture_v10000, _Site.API_EXIT)
    fake.api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_ENTER)
    fake.graph_event(_Res.GRAPHEXEC_CREATED, graph=100, exec_=5000)
    fake.api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_EXIT)
    for k in range(3):
        fake.api(_Drv.cuGraphLaunch, _Site.API_ENTER, 5000, 10 + k, dom=_Dom.DRIVER_API)
    fake.api(_Drv.cuGraphLaunch, _Site.API_ENTER, 7777, 20, dom=_Dom.DRIVER_API)  # a graph not recorded
    assert rec.tracker.cb_stats.get((_Dom.DRIVER_API, _Drv.cuGraphLaunch)) is None, "launches stay in C"
    rec.finish(0)
    idx = json.loads((tmp_path / "index.json").read_text())
    assert idx["recorder_errors"] == []
    g = idx["graphs"][0]
    assert g["replays"] == 3
    assert g["reserved_during_capture"] == 4096 + (2 << 20) - 1000
    assert idx["launch_callbacks"] == 4


def test_exec_handle_reuse_keeps_counts_apart(fake: FakeCupti, tmp_path: Path) -> None:
    from cgtool.capture.record.recorder import Recorder

    rec = Recorder(str(tmp_path), program=["prog.py"])
    rec.start()
    _capture(fake, 100, [11], 5000)
    _replay(fake, 5000, 1)
    _replay(fake, 5000, 3)
    fake.graph_event(_Res.GRAPHEXEC_DESTROY_STARTING, exec_=5000)
    _capture(fake, 300, [31], 5000)  # the driver hands out the same handle again
    _replay(fake, 5000, 5)
    rec.finish(1)
    idx = json.loads((tmp_path / "index.json").read_text())
    assert [g["replays"] for g in idx["graphs"]] == [2, 1]
    assert idx["exit_code"] == 1


def test_writer_holds_graphs_while_the_program_captures(fake: FakeCupti, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph is written once the program has stopped capturing for the quiet time, not during
    a burst of captures; a flush writes at once."""
    import time

    from cgtool.capture.record.recorder import Recorder

    rec = Recorder(str(tmp_path), RecordOptions.from_environment(writer_quiet_s=0.6), program=["prog.py"])
    rec.start()
    g0 = tmp_path / "graph_000.json"
    _capture(fake, 100, [11, 12], 5000)
    fake.api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_ENTER)  # the next capture is in progress
    time.sleep(0.9)  # longer than the quiet time after the first graph, but a capture is running
    assert not g0.exists(), "the writer waits while a capture is in progress"
    fake.api(_Rt.cudaStreamEndCapture_v10000, _Site.API_EXIT)
    t_end = time.perf_counter()
    deadline = t_end + 10
    while not g0.exists() and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert g0.exists(), "written once the program is quiet, without a flush"
    assert time.perf_counter() - t_end >= 0.5, "not before the quiet time has passed"
    _capture(fake, 200, [21], 6000)
    assert rec.flush(5.0) and (tmp_path / "graph_001.json").exists(), "a flush does not wait for quiet"
    rec.finish(0)


# --------------------------------------------------------------------- crashes lose no graph
_CRASHING = """
import os, signal, sys, time
from cupti import cupti as fake, capture, replay
capture(fake, 100, [11, 12, 13], 5000)
capture(fake, 200, [21, 22], 6000)
for k in range(3):
    replay(fake, 5000, 10 + 2 * k)
replay(fake, 6000, 50)
how = sys.argv[1]
if how == "raise":
    raise RuntimeError("deliberate crash")
if how == "os_exit":
    os._exit(7)
if how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
"""


@pytest.mark.parametrize("how,code,index_code", [("raise", 1, 1), ("os_exit", 7, 7), ("sigterm", 143, 143)])
@pytest.mark.subprocess
def test_a_crash_after_two_graphs_keeps_both(tmp_path: Path, how: str, code: int, index_code: int,
                                             record_fake: Any) -> None:
    """The program dies right after its second graph (an exception, os._exit, SIGTERM) while the
    writer thread still holds both: the recording has both graphs, their replays and the exit code,
    and `cgtool record` exits with the program's code."""
    prog = tmp_path / "prog.py"
    prog.write_text(_CRASHING)
    p, out = record_fake(["python", prog, how], slow_writer_s=0.3, timeout=120)
    assert p.returncode == code, p.stderr
    tree = json.loads((out / "index.json").read_text())
    assert tree["exit_code"] == code
    (proc,) = [q for q in tree["processes"] if q["followed"]]
    idx = json.loads((out / proc["folder"] / "index.json").read_text())
    assert idx["finished"] and idx["exit_code"] == index_code
    assert [g["nodes"] for g in idx["graphs"]] == [3, 2]
    assert [g["replays"] for g in idx["graphs"]] == [3, 1]
    for g in idx["graphs"]:
        doc = json.loads((out / proc["folder"] / g["file"]).read_text())
        assert doc["cgtool"]["record"]["replays"] == g["replays"]


# --------------------------------------------------------------------------- kernel coverage
class _Kind(enum.IntEnum):
    KERNEL = 3
    CONCURRENT_KERNEL = 10
    MEMCPY = 1
    MEMSET = 2
    RUNTIME = 5


def test_coverage_sums_kernel_time_in_and_out_of_graphs(fake: FakeCupti, tmp_path: Path) -> None:
    """--coverage: kernel records with a graph id count as inside replays, the rest outside."""
    import random

    from cgtool.capture.record.recorder import Recorder

    fake.ActivityKind = _Kind  # type: ignore[attr-defined]
    fake.activity_register_callbacks = lambda req, done: setattr(fake, "done", done)  # type: ignore[attr-defined]
    fake.activity_enable = fake.activity_disable = lambda k: None  # type: ignore[attr-defined]
    fake.activity_flush_all = lambda flag: None  # type: ignore[attr-defined]
    t_first = 600_000  # the CUPTI clock when the first graph is instantiated
    fake.get_timestamp = lambda: t_first  # type: ignore[attr-defined]
    rec = Recorder(str(tmp_path), RecordOptions.from_environment(coverage=True), program=["prog.py"])
    rec.start()
    rng = random.Random(1)
    recs = []
    t = 0
    fake.done([types.SimpleNamespace(kind=_Kind.CONCURRENT_KERNEL, start=1, end=11, graph_id=0,  # type: ignore[attr-defined]
                                     correlation_id=1)])  # a buffer before any graph
    _capture(fake, 100, [11, 12], 5000)  # exec graph id 5
    for _ in range(500):
        d = rng.randint(1, 5000)
        gid = rng.choice([0, 0, 5, 9])  # 9: a graph instantiated while not recorded
        kind = rng.choice([_Kind.CONCURRENT_KERNEL, _Kind.MEMCPY])
        recs.append(types.SimpleNamespace(kind=kind, start=t, end=t + d, graph_id=gid, correlation_id=1))
        t += d
    fake.done(recs[:250])  # type: ignore[attr-defined]
    fake.done(recs[250:])  # type: ignore[attr-defined]
    rec.finish(0)
    idx = json.loads((tmp_path / "index.json").read_text())
    kernels = [r for r in recs if r.kind == _Kind.CONCURRENT_KERNEL]
    in5 = sum(r.end - r.start for r in kernels if r.graph_id == 5)
    in9 = sum(r.end - r.start for r in kernels if r.graph_id == 9)
    out = sum(r.end - r.start for r in kernels if r.graph_id == 0) + 10  # + the one before any graph
    cov = idx["coverage"]
    assert cov["kernel_ns_in_graphs"] == in5 + in9 and cov["kernel_ns_outside_graphs"] == out
    assert cov["kernel_ns_of_unrecorded_graphs"] == in9
    assert cov["share_in_graphs"] == pytest.approx((in5 + in9) / (in5 + in9 + out))
    assert cov["kernels_in_graphs"] + cov["kernels_outside_graphs"] == len(kernels) + 1
    assert idx["graphs"][0]["kernel_ns"] == in5
    after = sum(r.end - r.start for r in kernels if r.graph_id == 0 and r.start >= t_first)
    assert 0 < after < out and cov["kernel_ns_outside_graphs_since_first_graph"] == after
    assert cov["share_in_graphs_since_first_graph"] == pytest.approx((in5 + in9) / (in5 + in9 + after))
    assert json.loads((tmp_path / "graph_000.json").read_text())["cgtool"]["record"]["kernel_ns"] == in5


# ---------------------------------------------------------------------- record_function names
def test_nodes_name_the_open_record_function_range(fake: FakeCupti, tmp_path: Path) -> None:
    """A range class wrapped when its module is imported (after recording started) names the nodes
    made inside it; nested ranges give the innermost; nodes outside any range get none."""
    from cgtool.capture.record import attribution
    from cgtool.capture.record.recorder import Recorder

    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "fake_profiler_mod.py").write_text(
        "class record_function:\n"
        "    def __init__(self, name):\n        self.name = name\n        self.entered = 0\n"
        "    def __enter__(self):\n        self.entered += 1\n        return self\n"
        "    def __exit__(self, *exc):\n        return False\n")
    sys.path.insert(0, str(mod_dir))
    try:
        attribution.after_import("fake_profiler_mod", lambda m: attribution.wrap_record_function(m.record_function))
        rec = Recorder(str(tmp_path / "rec"), program=["prog.py"])
        os.makedirs(rec.out_dir)
        rec.start()
        import fake_profiler_mod as fp  # noqa: E402  (imported after recording began, as a program does)

        fake.graphs[100] = [1, 2, 3]  # type: ignore[attr-defined]
        fake.api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_ENTER)
        with fp.record_function("attn") as r:
            fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=1)
            with fp.record_function("softmax"):
                fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=2)
        fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=3)
        assert r.entered == 1  # torch's own __enter__ still ran
        fake.api(_Rt.cudaStreamEndCapture_v10000, _Site.API_EXIT)
        fake.graph_event(_Res.GRAPHEXEC_CREATED, graph=100, exec_=5000)
        rec.finish(0)
    finally:
        sys.path.remove(str(mod_dir))
        sys.modules.pop("fake_profiler_mod", None)
    doc = json.loads((tmp_path / "rec" / "graph_000.json").read_text())
    assert [n["source"]["record_function"] for n in doc["cgtool"]["nodes"]] == ["attn", "softmax", None]
    assert attribution.current_range() is None


# --------------------------------------------------------------- `cgtool capture` bundles too
def test_capture_exports_carry_the_same_source_blocks(fake: FakeCupti) -> None:
    """NodeSources (used by `cgtool capture`/`export`/`trace`) attributes the nodes made while it is
    on, in the export's node order, and says why when it could not."""
    from cgtool.capture.node_sources import NodeSources

    fake.graphs[100] = [13, 11, 12]  # type: ignore[attr-defined]  (export order differs from creation order)
    lines = {}
    with NodeSources() as s:
        for h in (11, 12, 13):
            lines[h] = sys._getframe().f_lineno + 1
            fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=h)
    fake.graph_event(_Res.GRAPHNODE_CREATED, graph=100, node=99)  # after the capture: not seen
    assert fake.cb is None  # unsubscribed on exit
    data: dict[str, Any] = {"nodes": [{}, {}, {}], "cgtool": {"nodes": [{}, {}, {}]}}
    assert s.annotate(100, data) == 3
    srcs = [e["source"] for e in data["cgtool"]["nodes"]]
    assert [x["line"] for x in srcs] == [lines[13], lines[11], lines[12]]
    assert all(x["file"] == __file__ and x["function"] == "test_capture_exports_carry_the_same_source_blocks"
               for x in srcs)
    assert data["cgtool"]["sources"]["nodes_with_source"] == 3
    other: dict[str, Any] = {"cgtool": {"nodes": []}}
    assert s.annotate(200, other) == 0 and other["cgtool"]["sources"]["from"] is None


def test_capture_without_cupti_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from cgtool.capture import _deps
    from cgtool.capture.node_sources import NodeSources

    monkeypatch.setattr(_deps, "optional_cupti", lambda: None)
    with NodeSources() as s:
        pass
    data: dict[str, Any] = {"cgtool": {"nodes": [{}]}}
    assert s.annotate(1, data) == 0
    assert "cupti-python" in data["cgtool"]["sources"]["note"]
