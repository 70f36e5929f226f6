"""A CUPTI callback subscriber whose handler gets raw ints: ``handler(domain, cbid, cbdata_ptr)``.

Two ways in, same handler:

* ``"ctypes"`` (the default where ``"c"`` is not built): ``cuptiSubscribe`` / ``cuptiEnableCallback``
  of libcupti called through ctypes with a ``CFUNCTYPE`` callback. cupti-python's own
  ``subscribe`` builds Python wrapper objects for every callback (``CallbackData`` /
  ``ResourceData``), which made graph capture several times slower; the ctypes callback passes
  four integers. libcupti comes from cgtool's one locator (``capture/_libcupti.py``,
  :func:`load_libcupti`): the copy the process already maps, else the nvidia-cuda-cupti wheel's
  file, else cuda.pathfinder's, so ``cgtool record`` can subscribe before the program starts
  without importing cupti-python (numpy and Cython modules: docs/performance.md#hand-written-code),
  and the process still maps one libcupti (``benchmarks/probe_libcupti.py`` prints the mapped paths).
* ``"c"``: the same, with the compiled callback of ``_nodecb.c`` (built at install where a C compiler
  and Python >= 3.11 are there): it stores node-creation callbacks itself and hands every other
  callback to the handler. A Python callback slows the capture of a graph before doing anything,
  and more for reading one frame; the C one does not (docs/performance.md#hand-written-code).
* ``"cupti-python"``: ``cupti.subscribe`` (its wrappers expose ``.ptr``, the same struct pointer).

Callback domains and ids are the constants below, from CUPTI's headers; the struct layouts
(``CUpti_CallbackData``, ``CUpti_ResourceData``, ``CUpti_GraphData``) the documented C layout.
Both are part of CUPTI's ABI (its enums only ever grow at the end); once cupti-python is loaded,
:func:`mismatches` checks them against its enums and numpy dtypes, and the tests do the same.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from cgtool.capture import _libcupti

Handler = Callable[[int, int, int], None]

# CUpti_CallbackDomain, CUpti_ApiCallbackSite (cupti_callbacks.h).
DOMAIN_DRIVER, DOMAIN_RUNTIME, DOMAIN_RESOURCE = 1, 2, 3
API_ENTER = 0
#: CUpti_CallbackIdResource values the recorder enables (cupti_callbacks.h).
RESOURCE = {"GRAPH_DESTROY_STARTING": 10, "GRAPHNODE_CREATED": 13, "GRAPHEXEC_CREATED": 18,
            "GRAPHEXEC_DESTROY_STARTING": 19, "GRAPHNODE_CLONED": 20}
#: CUpti_runtime_api_trace_cbid values of capture begin/end, instantiation and launch (cupti_runtime_cbid.h).
RUNTIME = {"cudaGraphInstantiate_v10000": 310, "cudaGraphLaunch_v10000": 311, "cudaGraphLaunch_ptsz_v10000": 312,
           "cudaStreamBeginCapture_v10000": 315, "cudaStreamBeginCapture_ptsz_v10000": 316,
           "cudaStreamEndCapture_v10000": 319, "cudaStreamEndCapture_ptsz_v10000": 320,
           "cudaGraphInstantiateWithFlags_v11040": 418, "cudaGraphInstantiateWithParams_v12000": 436,
           "cudaGraphInstantiateWithParams_ptsz_v12000": 437, "cudaGraphInstantiate_v12000": 443,
           "cudaStreamBeginCaptureToGraph_v12030": 452, "cudaStreamBeginCaptureToGraph_ptsz_v12030": 453}
#: CUpti_driver_api_trace_cbid values of graph launches (cupti_driver_cbid.h).
DRIVER = {"cuGraphLaunch": 514, "cuGraphLaunch_ptsz": 515}
#: The allocation calls whose exits the compiled callback accounts for (memory taken during a capture):
#: runtime cudaMalloc / cudaFree (torch's caching allocator), driver cuMemCreate / cuMemRelease
#: (its expandable segments). Order: what ``_nodecb.configure(alloc_ids=...)`` takes.
ALLOC_RUNTIME = {"cudaMalloc_v3020": 20, "cudaFree_v3020": 22}
ALLOC_DRIVER = {"cuMemCreate": 549, "cuMemRelease": 550}


def runtime_ids(*prefixes: str) -> set[int]:
    """The runtime callback ids whose API names start with one of ``prefixes``."""
    return {v for k, v in RUNTIME.items() if k.startswith(prefixes)}


def mismatches(cupti: Any) -> list[str]:
    """Where the constants and layout here differ from cupti-python's (empty when they agree)."""
    out: list[str] = []

    def cmp(what: str, mine: dict[str, int], enum: Any) -> None:
        members = getattr(enum, "__members__", {})
        for k, v in mine.items():
            if k in members and int(members[k]) != v:
                out.append(f"{what}.{k}: {v} here, {int(members[k])} in cupti-python")

    D = getattr(cupti, "CallbackDomain", None)
    cmp("CallbackDomain", {"DRIVER_API": DOMAIN_DRIVER, "RUNTIME_API": DOMAIN_RUNTIME, "RESOURCE": DOMAIN_RESOURCE}, D)
    cmp("ApiCallbackSite", {"API_ENTER": API_ENTER}, getattr(cupti, "ApiCallbackSite", None))
    cmp("CallbackIdResource", RESOURCE, getattr(cupti, "CallbackIdResource", None))
    cmp("runtime_api_trace_cbid", RUNTIME, getattr(cupti, "runtime_api_trace_cbid", None))
    cmp("driver_api_trace_cbid", DRIVER, getattr(cupti, "driver_api_trace_cbid", None))
    cmp("runtime_api_trace_cbid", ALLOC_RUNTIME, getattr(cupti, "runtime_api_trace_cbid", None))
    cmp("driver_api_trace_cbid", ALLOC_DRIVER, getattr(cupti, "driver_api_trace_cbid", None))
    theirs = Layout(cupti).offsets
    out += [f"offset of {k}: {v} here, {theirs[k]} in cupti-python" for k, v in _DEFAULTS.items() if theirs[k] != v]
    return out

_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)

# Fallback offsets, from cupti_callbacks.h (64-bit).
_DEFAULTS = {
    "callback_site": 0, "function_params": 16, "function_return_value": 24, "correlation_id": 64,  # CUpti_CallbackData
    "resource_descriptor": 16,  # CUpti_ResourceData
    "graph": 0, "original_graph": 8, "node": 16, "original_node": 24, "graph_exec": 48,  # CUpti_GraphData
}


def _field_offsets(dtype: Any, wanted: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    fields = getattr(dtype, "fields", None) or {}
    norm = {k.replace("_", "").lower(): v for k, v in fields.items()}
    for w in wanted:
        hit = norm.get(w.replace("_", "").lower())
        if hit is not None:
            out[w] = int(hit[1])
    return out


class Layout:
    """Byte offsets of the fields the recorder reads: cupti-python's when given, else the C layout."""

    def __init__(self, cupti: Any = None) -> None:
        off = dict(_DEFAULTS)
        if cupti is None:
            self._set(off)
            return
        off.update(_field_offsets(getattr(cupti, "callback_data_dtype", None),
                                  ["callback_site", "function_params", "function_return_value", "correlation_id"]))
        off.update(_field_offsets(getattr(cupti, "resource_data_dtype", None), ["resource_descriptor"]))
        off.update(_field_offsets(getattr(cupti, "graph_data_dtype", None),
                                  ["graph", "original_graph", "node", "original_node", "graph_exec"]))
        self._set(off)

    def _set(self, off: dict[str, int]) -> None:
        self.offsets = off
        self.site = off["callback_site"]
        self.params = off["function_params"]
        self.ret = off["function_return_value"]
        self.corr = off["correlation_id"]
        self.desc = off["resource_descriptor"]
        self.graph = off["graph"]
        self.node = off["node"]
        self.orig_node = off["original_node"]
        self.exec = off["graph_exec"]


def read_ptr(addr: int) -> int:
    """The pointer stored at ``addr`` (a field of a CUPTI struct), 0 for NULL."""
    return ctypes.c_void_p.from_address(addr).value or 0


class SubscribeError(Exception):
    def __init__(self, status: int, name: str) -> None:
        super().__init__(f"cuptiSubscribe returned {name} ({status})")
        self.status = status
        self.name = name


class Subscriber:
    """One CUPTI subscriber; ``enable(domain, cbid, on)`` turns single callbacks on and off."""

    def __init__(self, cupti: Any, handler: Handler, how: str = "ctypes", lib: Any = None) -> None:
        """``lib``: libcupti already loaded (:func:`load_libcupti`); else the process's copy, the one
        ``cupti`` (cupti-python) maps."""
        self.cupti = cupti
        self.how = how
        self._handler = handler
        self._cfunc: Any = None
        if how in ("ctypes", "c"):
            lib = lib if lib is not None else _libcupti.load_libcupti(cupti)
            lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), _CB, ctypes.c_void_p]
            lib.cuptiSubscribe.restype = ctypes.c_int
            lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
            lib.cuptiEnableCallback.restype = ctypes.c_int
            lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
            lib.cuptiUnsubscribe.restype = ctypes.c_int
            self._lib = lib

            def _raw(userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
                handler(domain, cbid, cbdata or 0)

            sub = ctypes.c_void_p()
            if how == "c":  # the compiled callback (_nodecb.c): the handler is configured there
                from cgtool.capture.record import _nodecb

                lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
                rc = lib.cuptiSubscribe(ctypes.byref(sub), _nodecb.address(), None)
            else:
                self._cfunc = _CB(_raw)  # kept alive as long as the subscriber
                rc = lib.cuptiSubscribe(ctypes.byref(sub), self._cfunc, None)
            if rc != 0:
                raise SubscribeError(rc, result_name(rc, lib, cupti))
            self.handle: Any = sub
        else:
            def _wrapped(userdata: Any, domain: Any, cbid: Any, cbdata: Any) -> None:
                handler(int(domain), int(cbid), int(cbdata.ptr))

            try:
                self.handle = cupti.subscribe(_wrapped, None)
            except Exception as e:
                status = int(getattr(e, "status", -1))
                raise SubscribeError(status, result_name(status, None, cupti)) from None

    def enable(self, domain: int, cbid: int, on: bool = True) -> None:
        if self.how in ("ctypes", "c"):
            rc = self._lib.cuptiEnableCallback(1 if on else 0, self.handle, int(domain), int(cbid))
            if rc != 0:
                raise OSError(f"cuptiEnableCallback({domain}, {cbid}) returned {result_name(rc, self._lib, self.cupti)}")
        else:
            self.cupti.enable_callback(1 if on else 0, self.handle, int(domain), int(cbid))

    def unsubscribe(self) -> None:
        if self.how in ("ctypes", "c"):
            self._lib.cuptiUnsubscribe(self.handle)
            if self.how == "c":
                from cgtool.capture.record import _nodecb

                _nodecb.deactivate()
        else:
            self.cupti.unsubscribe(self.handle)


def compiled_callback() -> Any:
    """The ``_nodecb`` extension module, or None where it was not built (no compiler, Python < 3.11)."""
    try:
        from cgtool.capture.record import _nodecb
    except ImportError:
        return None
    return _nodecb


def result_name(status: int, lib: Any = None, cupti: Any = None) -> str:
    """CUPTI's name of a result code, from cupti-python or libcupti's ``cuptiGetResultString``."""
    try:
        return str(cupti.Result(status).name)
    except Exception:
        pass
    try:
        s = ctypes.c_char_p()
        lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        if lib.cuptiGetResultString(int(status), ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
    except Exception:
        pass
    return f"CUPTI error {status}"


# The CUPTI calls besides callbacks (ids, timestamp) and libcupti's loading belong to the graph reader,
# which the export uses without the recorder; the recorder takes them from there.
Ids = _libcupti.CuptiIds
load_libcupti = _libcupti.load_libcupti
