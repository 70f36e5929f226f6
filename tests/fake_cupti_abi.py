"""A stand-in for CUPTI and cupti-python that drives `cgtool record` without a GPU.

The CUPTI ABI as cupti_callbacks.h lays it out (callback ids, domains, the callback data structs;
the values of CUPTI 13.0's headers); :class:`FakeCupti`, which delivers callbacks the way CUPTI
does (struct pointers in that layout, from "library" code: compiled under a standard-library file
name, so attribution looks past it for the program's line, as it looks past torch); :func:`install`,
stand-ins for the graph reads and export; :class:`FakeLibcupti`, libcupti's subscribe calls for the
compiled callback. Used by the CPU tests (tests/test_record_*.py, in-process and in recorded
subprocesses: tests/programs/fake/) and benchmarks/bench_record_callbacks.py. Imports no pytest.
"""

from __future__ import annotations

import ctypes
import enum
import os
import sysconfig
import types
from typing import Any


class Res(enum.IntEnum):
    GRAPH_DESTROY_STARTING = 10
    GRAPHNODE_CREATED = 13
    GRAPHEXEC_CREATED = 18
    GRAPHEXEC_DESTROY_STARTING = 19
    GRAPHNODE_CLONED = 20


class Dom(enum.IntEnum):
    DRIVER_API = 1
    RUNTIME_API = 2
    RESOURCE = 3


class Site(enum.IntEnum):
    API_ENTER = 0
    API_EXIT = 1


class Rt(enum.IntEnum):
    cudaGraphLaunch_v10000 = 311
    cudaStreamBeginCapture_v10000 = 315
    cudaStreamEndCapture_v10000 = 319
    cudaGraphInstantiateWithFlags_v11040 = 418


class Drv(enum.IntEnum):
    cuGraphLaunch = 514


class CbData(ctypes.Structure):  # CUpti_CallbackData
    _fields_ = [("site", ctypes.c_int), ("name", ctypes.c_char_p), ("params", ctypes.c_void_p),
                ("ret", ctypes.c_void_p), ("sym", ctypes.c_char_p), ("ctx", ctypes.c_void_p),
                ("ctx_uid", ctypes.c_uint32), ("corr_data", ctypes.c_void_p), ("corr", ctypes.c_uint32)]


class ResData(ctypes.Structure):  # CUpti_ResourceData
    _fields_ = [("ctx", ctypes.c_void_p), ("stream", ctypes.c_void_p), ("desc", ctypes.c_void_p)]


class GraphData(ctypes.Structure):  # CUpti_GraphData
    _fields_ = [("graph", ctypes.c_void_p), ("orig_graph", ctypes.c_void_p), ("node", ctypes.c_void_p),
                ("orig_node", ctypes.c_void_p), ("node_type", ctypes.c_int), ("dep", ctypes.c_void_p),
                ("exec_", ctypes.c_void_p)]


# The delivering functions play CUDA/CUPTI: compiled under a file name in the standard library, so
# attribution sees them as library code, as it sees torch, and looks past them for the user's line.
_LIB_SRC = """
import ctypes, types
def _deliver(self, dom: int, cbid: int, struct: Any) -> None:
    if (int(dom), int(cbid)) in self.enabled and self.cb is not None:  # none after unsubscribe
        self.keep.append(struct)
        self.cb(None, dom, cbid, types.SimpleNamespace(ptr=ctypes.addressof(struct)))

def graph_event(self, cbid: _Res, graph: int = 0, node: int = 0, orig_node: int = 0, exec_: int = 0) -> None:
    gd = _GraphData(graph, 0, node, orig_node, 0, None, exec_)
    rd = _ResData(None, None, ctypes.addressof(gd))
    self.keep.append(gd)
    self._deliver(_Dom.RESOURCE, cbid, rd)

def c_deliverer(cfn: Any) -> Any:
    # a delivery through a C callback (CUPTI calls it from the CUDA call the library made)
    return lambda u, dom, cbid, data: cfn(None, int(dom), int(cbid), data.ptr)

def api(self, cbid: int, site: _Site, params_first: int = 0, corr: int = 0, dom: _Dom = _Dom.RUNTIME_API) -> None:
    p = (ctypes.c_void_p * 2)(params_first, 0)
    self.keep.append(p)
    self._deliver(dom, cbid, _CbData(int(site), b"x", ctypes.addressof(p), None, None, None, 0, None, corr))


"""
_lib: dict[str, Any] = {}


def _load_lib() -> None:
    _lib.update(Any=Any, _Res=Res, _Dom=Dom, _Site=Site, _GraphData=GraphData, _ResData=ResData, _CbData=CbData)
    exec(compile(_LIB_SRC, os.path.join(sysconfig.get_paths()["stdlib"], "_fake_cupti_delivery.py"), "exec"), _lib)


_load_lib()


#: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: a subscribe while another subscriber holds CUPTI.
MULTIPLE_SUBSCRIBERS = 39


class FakeCuptiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"CUPTI error {status}")
        self.status = status


class FakeCupti:
    """cupti-python's module, as the recorder uses it; one subscriber at a time, as CUPTI allows."""

    CallbackIdResource = Res
    CallbackDomain = Dom
    ApiCallbackSite = Site
    runtime_api_trace_cbid = Rt
    driver_api_trace_cbid = Drv

    def __init__(self) -> None:
        self.cb: Any = None
        self.enabled: set[tuple[int, int]] = set()
        self.keep: list[Any] = []

    def subscribe(self, cb: Any, userdata: Any) -> int:
        if self.cb is not None:
            raise FakeCuptiError(MULTIPLE_SUBSCRIBERS)
        self.cb = cb
        self.enabled = set()
        return 1

    def enable_callback(self, on: int, sub: int, dom: int, cbid: int) -> None:
        (self.enabled.add if on else self.enabled.discard)((int(dom), int(cbid)))

    def unsubscribe(self, sub: int) -> None:
        self.cb = None

    def get_graph_id(self, g: int) -> int:
        return 7

    _deliver = _lib["_deliver"]
    graph_event = _lib["graph_event"]
    api = _lib["api"]


def install(f: FakeCupti, setattr: Any) -> None:
    """Stand-ins for the graph reads and export and the environment (``setattr``: monkeypatch's, or the builtin)."""
    import cgtool.capture._fastcuda as fc
    import cgtool.capture.export as ex
    import cgtool.capture.graphread as gr

    graphs: dict[int, list[int]] = {}
    f.graphs = graphs  # type: ignore[attr-defined]
    names: dict[int, list[str]] = {}  # graph -> its kernels' names (default k0, k1, ...)
    f.kernel_names = names  # type: ignore[attr-defined]

    def graph_data(graph: int, exec_: int, *, with_environment: bool = True,
                   handles_out: list[int] | None = None, cupti: Any = None) -> dict[str, Any]:
        handles = graphs[graph]
        if handles_out is not None:
            handles_out.extend(handles)
        eid = exec_ // 1000
        return {"exec_graph_id": eid,
                "nodes": [{"index": i, "node_type": "kernel", "tools_id": (eid << 32) | i, "graph_id": eid,
                           "node_id": i, "kernel_name": (names.get(graph) or [])[i] if i < len(names.get(graph) or []) else f"k{i}",
                           "dependencies": [i - 1] if i else [],
                           "dependents": [i + 1] if i + 1 < len(handles) else []} for i in range(len(handles))],
                "cgtool": {"timings": {"export_s": 0.0}, "nodes": [{} for _ in handles], "environment": {}}}

    setattr(ex, "graph_data", graph_data)
    setattr(gr, "read_quick", lambda graph, exec_, **kw: None)
    setattr(gr, "read_graph", lambda graph, exec_, **kw: types.SimpleNamespace(
        handles=list(graphs[graph]), exec_id=exec_ // 1000, args=(graph, exec_)))
    setattr(ex, "build", lambda raw, **kw: ex.Export(graph_data(*raw.args), {}))
    setattr(ex, "environment", lambda device=None: {"device": "fake"})
    setattr(ex, "host_environment", lambda: {"driver_version": "fake"})
    setattr(fc, "load", lambda: types.SimpleNamespace(nodes=lambda g: list(graphs[g])))


class FakeLibcupti:
    """libcupti's subscribe calls, for the compiled callback: callbacks are delivered by calling
    the C function whose address ``cuptiSubscribe`` received, through ctypes, as CUPTI would."""

    def __init__(self, f: FakeCupti) -> None:
        self.f = f
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)

        def subscribe(ref: Any, fn: int, userdata: Any) -> int:
            if f.cb is not None:
                return MULTIPLE_SUBSCRIBERS
            ref._obj.value = 1
            f.cb = _lib["c_deliverer"](proto(fn))
            f.enabled = set()
            return 0

        def enable(on: int, sub: Any, dom: int, cbid: int) -> int:
            f.enable_callback(on, sub, dom, cbid)
            return 0

        def unsubscribe(sub: Any) -> int:
            f.cb = None
            return 0

        self.cuptiSubscribe, self.cuptiEnableCallback, self.cuptiUnsubscribe = subscribe, enable, unsubscribe
        self.cuptiGetGraphId = self.cuptiGetGraphExecId = self.cuptiGetGraphNodeId = lambda h, out: 0
        self.cuptiGetTimestamp = lambda out: 0


# ------------------------------------------------------------------ programs recorded in subprocesses
TESTS = os.path.dirname(os.path.abspath(__file__))


def capture(f: FakeCupti, graph: int, handles: list[int], exec_: int) -> None:
    """A stream capture of len(handles) nodes, instantiated as ``exec_`` (exec graph id ``exec_ // 1000``)."""
    f.graphs[graph] = handles  # type: ignore[attr-defined]
    f.api(Rt.cudaStreamBeginCapture_v10000, Site.API_ENTER)
    f.api(Rt.cudaStreamBeginCapture_v10000, Site.API_EXIT)
    for h in handles:
        f.graph_event(Res.GRAPHNODE_CREATED, graph=graph, node=h)
    f.api(Rt.cudaStreamEndCapture_v10000, Site.API_ENTER)
    f.api(Rt.cudaStreamEndCapture_v10000, Site.API_EXIT)
    f.api(Rt.cudaGraphInstantiateWithFlags_v11040, Site.API_ENTER)
    f.graph_event(Res.GRAPHEXEC_CREATED, graph=graph, exec_=exec_)
    f.api(Rt.cudaGraphInstantiateWithFlags_v11040, Site.API_EXIT)


def replay(f: FakeCupti, exec_: int, corr: int = 0) -> None:
    f.api(Rt.cudaGraphLaunch_v10000, Site.API_ENTER, exec_, corr)
    f.api(Drv.cuGraphLaunch, Site.API_ENTER, exec_, corr + 1, dom=Dom.DRIVER_API)  # inside the runtime call
    f.api(Rt.cudaGraphLaunch_v10000, Site.API_EXIT, exec_, corr)


_FAKE_PKG = """# A stand-in `cupti` package (tests/fake_cupti_abi.py) for recorded subprocesses.
import sys, time
sys.path.insert(0, {tests!r})
import fake_cupti_abi as _f
cupti = _f.FakeCupti()
_f.install(cupti, setattr)
capture, replay = _f.capture, _f.replay
import os as _os
if _os.environ.get("FAKE_CUPTI_HELD"):  # another profiler holds CUPTI before the program starts
    cupti.subscribe(lambda *a: None, None)
if {slow!r}:  # a writer slowed down, so that a graph is still queued when the program dies
    from cgtool.capture.record import writer as _w
    _orig = _w.Writer._write_graph
    def _slow(self, job):
        time.sleep({slow!r})
        return _orig(self, job)
    _w.Writer._write_graph = _slow
"""


def fake_site(folder: str, slow_writer_s: float = 0.0) -> str:
    """A folder to put first on PYTHONPATH: a stand-in ``cupti`` package for every recorded process."""
    pkg = os.path.join(folder, "cupti")
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "__init__.py"), "w") as fh:
        fh.write(_FAKE_PKG.format(tests=TESTS, slow=slow_writer_s))
    return folder


#: `cgtool record` as a user runs it, with the one check that needs a GPU machine (a CUDA driver)
#: left out: the program's processes then record with the stand-in CUPTI.
RECORD_DRIVER = ("import sys; from cgtool.capture.record import launcher; launcher.preflight = lambda: None; "
                 "from cgtool.cli.entry import main; main(sys.argv[1:])")
