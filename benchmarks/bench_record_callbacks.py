"""The Python side of `cgtool record`'s callbacks, timed on any machine (no GPU, no CUPTI).

    python benchmarks/bench_record_callbacks.py [--graphs 20] [--nodes 130] [--depth 24] [--launches 2000]

A stand-in for cupti-python delivers callbacks the way CUPTI does (struct pointers laid out as
cupti_callbacks.h says) through a ctypes CFUNCTYPE, as the recorder's own subscriber receives them,
from a stack of DEPTH frames (user frames, and "library" frames compiled under the standard
library's path standing in for torch). The graph export is a stub that costs nothing, so the figures
are the recorder's own work: per node created, per graph instantiated (the callback thread's share
and, with a writer thread, the time until the graph is on disk), per graph launch, and the end of the
run. What CUPTI, the driver and the export cost comes on top (benchmarks/bench_record.py measures the
whole on a GPU).
"""
from __future__ import annotations

import argparse
import ctypes
import enum
import json
import os
import statistics
import sys
import sysconfig
import tempfile
import time
import types
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


sys.path.insert(0, os.path.join(ROOT, "tests"))
from fake_cupti_abi import CbData as _CbData, Dom as _Dom, Drv as _Drv, GraphData as _GraphData, Res as _Res, ResData as _ResData, Rt as _Rt, Site as _Site  # noqa: E402


_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)


class FakeCupti:
    """What the recorder uses of cupti-python; ``subscribe`` hands back the callback to drive."""

    CallbackIdResource = _Res
    CallbackDomain = _Dom
    ApiCallbackSite = _Site
    runtime_api_trace_cbid = _Rt
    driver_api_trace_cbid = _Drv

    def __init__(self) -> None:
        self.cb: Any = None
        self.enabled: set[tuple[int, int]] = set()

    def subscribe(self, cb: Any, userdata: Any) -> int:
        # The recorder's handler behind a real ctypes trampoline, as its ctypes subscriber has it.
        self.cb = cb
        return 1

    def enable_callback(self, on: int, sub: int, dom: int, cbid: int) -> None:
        (self.enabled.add if on else self.enabled.discard)((int(dom), int(cbid)))

    def unsubscribe(self, sub: int) -> None:
        pass

    def get_graph_id(self, g: int) -> int:
        return 7


# "torch": frames whose file is under the standard library (classified as library code).
_LIB = """
def lib_call(f, n, *a):
    if n <= 0:
        return f(*a)
    return lib_call(f, n - 1, *a)

def fire(trampoline, dom, cbid, addr):
    trampoline(None, dom, cbid, addr)

def make_trampoline(CB, box):
    return CB(lambda u, d, c, p: box[0](d, c, p or 0))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=130)
    ap.add_argument("--depth", type=int, default=24, help="frames between the program's entry and CUDA")
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--json", default=None, help="write the figures here too")
    a = ap.parse_args()

    fake = FakeCupti()
    pkg = types.ModuleType("cupti")
    pkg.cupti = fake  # type: ignore[attr-defined]
    sys.modules["cupti"] = pkg
    os.environ["CGTOOL_RECORD_SUBSCRIBER"] = "cupti-python"
    import cgtool.capture._fastcuda as fc
    import cgtool.capture.export as ex
    import cgtool.capture.graphread as gr

    graphs: dict[int, list[int]] = {}

    def graph_data(graph: int, exec_: int, handles_out: list[int] | None = None, **_: Any) -> dict[str, Any]:
        n = len(graphs[graph])
        if handles_out is not None:
            handles_out.extend(graphs[graph])
        eid = exec_ // 1000
        return {"exec_graph_id": eid,
                "nodes": [{"index": i, "node_type": "kernel", "tools_id": (eid << 32) | i, "graph_id": eid,
                           "node_id": i, "kernel_name": f"void at::native::kernel_{i}<float>()",
                           "dependencies": [i - 1] if i else [], "dependents": [i + 1] if i + 1 < n else []}
                          for i in range(n)],
                "cgtool": {"schema_version": 2, "id_source": "cupti", "timings": {"export_s": 0.0},
                           "nodes": [{"grid": [1, 1, 1], "block": [128, 1, 1], "shared_mem": 0} for _ in range(n)],
                           "environment": {}}}

    gr.read_quick = lambda graph, exec_, **kw: None  # type: ignore[assignment]
    gr.read_graph = lambda graph, exec_, **kw: types.SimpleNamespace(  # type: ignore[assignment]
        handles=list(graphs[graph]), exec_id=exec_ // 1000, args=(graph, exec_))
    ex.build = lambda raw, **kw: ex.Export(graph_data(*raw.args), {})  # type: ignore[attr-defined]

    ex.graph_data = graph_data  # type: ignore[assignment]
    ex.environment = lambda *a, **k: {}  # type: ignore[assignment]
    ex.host_environment = lambda: {}  # type: ignore[assignment]
    fc.load = lambda: types.SimpleNamespace(nodes=lambda g: list(graphs[g]))  # type: ignore[assignment]

    if "torch" not in sys.modules:  # the end-of-run ledger asks torch; a program under record has it loaded
        fake_torch = types.ModuleType("torch")
        fake_torch.cuda = types.SimpleNamespace(is_initialized=lambda: False)  # type: ignore[attr-defined]
        sys.modules["torch"] = fake_torch
    from cgtool.capture.record import recorder as recmod

    lib: dict[str, Any] = {}
    exec(compile(_LIB, os.path.join(sysconfig.get_paths()["stdlib"], "_fake_torch_frames.py"), "exec"), lib)
    lib_call = lib["lib_call"]

    out = tempfile.mkdtemp(prefix="cgtool-cb-bench-")
    rec = recmod.Recorder(out, program=["prog.py"])
    rec.start()
    # Delivered straight to the recorder's handler through a ctypes trampoline (what its ctypes
    # subscriber does), not via the wrapper objects cupti-python's subscribe would build. First
    # with a handler that does nothing: the bench's own delivery cost, subtracted below.
    box: list[Any] = [lambda d, c, p: None]
    trampoline = lib["make_trampoline"](_CB, box)
    keep: list[Any] = []

    fire = lib["fire"]
    lib_depth = a.depth // 2

    def deliver(dom: int, cbid: int, struct: Any) -> None:
        if (int(dom), int(cbid)) in fake.enabled:  # CUDA calls come from torch: library frames first
            lib_call(fire, lib_depth, trampoline, int(dom), int(cbid), ctypes.addressof(struct))

    def graph_event(cbid: int, graph: int = 0, node: int = 0, exec_: int = 0) -> None:
        gd = _GraphData(graph, 0, node, 0, 0, None, exec_)
        rd = _ResData(None, None, ctypes.addressof(gd))
        deliver(_Dom.RESOURCE, cbid, rd)
        keep.append((gd, rd))

    def api(cbid: int, site: int, first: int = 0, corr: int = 0, dom: int = _Dom.RUNTIME_API) -> None:
        p = (ctypes.c_void_p * 2)(first, 0)
        deliver(dom, cbid, _CbData(int(site), b"x", ctypes.addressof(p), None, None, None, 0, None, corr))
        keep.append(p)

    node_ns: list[float] = []
    exec_ns: list[float] = []

    def capture(g: int) -> None:
        handles = [g * 10000 + i for i in range(a.nodes)]
        graphs[g] = handles
        api(_Rt.cudaStreamBeginCapture_v10000, _Site.API_ENTER)
        t0 = time.perf_counter_ns()
        for h in handles:
            graph_event(_Res.GRAPHNODE_CREATED, graph=g, node=h)
        node_ns.append((time.perf_counter_ns() - t0) / len(handles))
        api(_Rt.cudaStreamEndCapture_v10000, _Site.API_EXIT)
        api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_ENTER)
        t0 = time.perf_counter_ns()
        graph_event(_Res.GRAPHEXEC_CREATED, graph=g, exec_=g * 1000)
        exec_ns.append(time.perf_counter_ns() - t0)
        api(_Rt.cudaGraphInstantiateWithFlags_v11040, _Site.API_EXIT)

    # empty-callback baseline: the ctypes trampoline alone
    nop = _CB(lambda u, d, c, p: None)
    gd0 = _GraphData(1, 0, 1, 0, 0, None, 0)
    rd0 = _ResData(None, None, ctypes.addressof(gd0))
    t0 = time.perf_counter_ns()
    for _ in range(5000):
        nop(None, 3, 11, ctypes.addressof(rd0))
    tramp_ns = (time.perf_counter_ns() - t0) / 5000

    def drive(first: int) -> float:
        for g in range(first, first + a.graphs):
            user_frames(capture, a.depth - lib_depth, g)  # the program's frames, then torch's (in deliver)
        t0 = time.perf_counter_ns()
        for k in range(a.launches):
            api(_Drv.cuGraphLaunch, _Site.API_ENTER, first * 1000, 2 * k, dom=_Dom.DRIVER_API)
            api(_Drv.cuGraphLaunch, _Site.API_EXIT, first * 1000, 2 * k, dom=_Dom.DRIVER_API)
        return (time.perf_counter_ns() - t0) / a.launches

    launch0 = drive(1000)
    base_node, base_exec = statistics.median(node_ns), statistics.median(exec_ns)
    node_ns.clear()
    exec_ns.clear()
    box[0] = rec.tracker.callback
    t_all = time.perf_counter()
    launch_ns = drive(1) - launch0
    t0 = time.perf_counter()
    rec.finish(0)
    finish_s = time.perf_counter() - t0
    total_s = time.perf_counter() - t_all
    idx = json.load(open(os.path.join(out, "index.json")))
    assert len(idx["graphs"]) == a.graphs, idx.get("recorder_errors")
    assert not idx.get("recorder_errors"), idx["recorder_errors"]
    doc = json.load(open(os.path.join(out, idx["graphs"][0]["file"])))
    assert doc["cgtool"]["nodes"][0].get("source"), "nodes attributed"
    res = {
        "python": sys.version.split()[0],
        "graphs": a.graphs, "nodes_per_graph": a.nodes, "depth": a.depth,
        "trampoline_us": tramp_ns / 1e3,
        "bench_delivery_us": base_node / 1e3,
        "node_created_us": (statistics.median(node_ns) - base_node) / 1e3,
        "exec_created_callback_ms": (statistics.median(exec_ns) - base_exec) / 1e6,
        "launch_enter_exit_us": launch_ns / 1e3,
        "finish_ms": finish_s * 1e3,
        "total_s": total_s,
        "source_label_of_node_0": doc["cgtool"]["nodes"][0]["source"].get("label"),
        "writer_ms_per_graph": statistics.median((g.get("write_s") or float("nan")) * 1e3 for g in idx["graphs"]),
    }
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def user_frames(fn: Any, n: int, *a: Any) -> Any:
    return fn(*a) if n <= 0 else user_frames(fn, n - 1, *a)


if __name__ == "__main__":
    main()
