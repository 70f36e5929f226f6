"""A CUPTI callback subscriber whose handler gets raw ints: ``handler(domain, cbid, cbdata_ptr)``.

Two ways in, same handler:

* ``"ctypes"`` (default): ``cuptiSubscribe`` / ``cuptiEnableCallback`` of the libcupti that
  cupti-python loaded, called through ctypes with a ``CFUNCTYPE`` callback. Measured on the GPU
  machine, cupti-python's own ``subscribe`` builds Python wrapper objects for every callback
  (``CallbackData`` / ``ResourceData``), which made graph capture several times slower; the ctypes
  callback passes four integers.
* ``"cupti-python"``: ``cupti.subscribe`` (its wrappers expose ``.ptr``, the same struct pointer).

The struct layouts (``CUpti_CallbackData``, ``CUpti_ResourceData``, ``CUpti_GraphData``) are
read from cupti-python's numpy dtypes of those structs, so the offsets follow the installed
CUPTI; the documented C layout is the fallback.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

Handler = Callable[[int, int, int], None]

_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)

# Fallback offsets, from cupti_callbacks.h (64-bit).
_DEFAULTS = {
    "callback_site": 0, "function_params": 16, "correlation_id": 64,  # CUpti_CallbackData
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
    """Byte offsets of the fields the recorder reads."""

    def __init__(self, cupti: Any) -> None:
        off = dict(_DEFAULTS)
        off.update(_field_offsets(getattr(cupti, "callback_data_dtype", None),
                                  ["callback_site", "function_params", "correlation_id"]))
        off.update(_field_offsets(getattr(cupti, "resource_data_dtype", None), ["resource_descriptor"]))
        off.update(_field_offsets(getattr(cupti, "graph_data_dtype", None),
                                  ["graph", "original_graph", "node", "original_node", "graph_exec"]))
        self.offsets = off
        self.site = off["callback_site"]
        self.params = off["function_params"]
        self.corr = off["correlation_id"]
        self.desc = off["resource_descriptor"]
        self.graph = off["graph"]
        self.node = off["node"]
        self.orig_node = off["original_node"]
        self.exec = off["graph_exec"]


def read_ptr(addr: int) -> int:
    """The pointer stored at ``addr`` (a field of a CUPTI struct), 0 for NULL."""
    return ctypes.c_void_p.from_address(addr).value or 0


def _mapped() -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libcupti.so" in line})


def libcupti(cupti: Any) -> Any:
    """The libcupti that cupti-python uses (it loads it lazily: a first cheap call maps it)."""
    paths = _mapped()
    if not paths:
        try:
            cupti.get_timestamp()
        except Exception:
            pass
        paths = _mapped()
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
            lib.cuptiSubscribe  # noqa: B018  (probe the symbol)
            return lib
        except (OSError, AttributeError):
            continue
    raise OSError("libcupti.so is not loaded in this process")


class SubscribeError(Exception):
    def __init__(self, status: int, name: str) -> None:
        super().__init__(f"cuptiSubscribe returned {name} ({status})")
        self.status = status
        self.name = name


class Subscriber:
    """One CUPTI subscriber; ``enable(domain, cbid, on)`` turns single callbacks on and off."""

    def __init__(self, cupti: Any, handler: Handler, how: str = "ctypes") -> None:
        self.cupti = cupti
        self.how = how
        self._handler = handler
        self._cfunc: Any = None
        if how == "ctypes":
            lib = libcupti(cupti)
            lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), _CB, ctypes.c_void_p]
            lib.cuptiSubscribe.restype = ctypes.c_int
            lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
            lib.cuptiEnableCallback.restype = ctypes.c_int
            lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
            lib.cuptiUnsubscribe.restype = ctypes.c_int
            self._lib = lib

            def _raw(userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
                handler(domain, cbid, cbdata or 0)

            self._cfunc = _CB(_raw)  # kept alive as long as the subscriber
            sub = ctypes.c_void_p()
            rc = lib.cuptiSubscribe(ctypes.byref(sub), self._cfunc, None)
            if rc != 0:
                raise SubscribeError(rc, _result_name(cupti, rc))
            self.handle: Any = sub
        else:
            def _wrapped(userdata: Any, domain: Any, cbid: Any, cbdata: Any) -> None:
                handler(int(domain), int(cbid), int(cbdata.ptr))

            try:
                self.handle = cupti.subscribe(_wrapped, None)
            except Exception as e:
                status = int(getattr(e, "status", -1))
                raise SubscribeError(status, _result_name(cupti, status)) from None

    def enable(self, domain: int, cbid: int, on: bool = True) -> None:
        if self.how == "ctypes":
            rc = self._lib.cuptiEnableCallback(1 if on else 0, self.handle, int(domain), int(cbid))
            if rc != 0:
                raise OSError(f"cuptiEnableCallback({domain}, {cbid}) returned {_result_name(self.cupti, rc)}")
        else:
            self.cupti.enable_callback(1 if on else 0, self.handle, int(domain), int(cbid))

    def unsubscribe(self) -> None:
        if self.how == "ctypes":
            self._lib.cuptiUnsubscribe(self.handle)
        else:
            self.cupti.unsubscribe(self.handle)


def _result_name(cupti: Any, status: int) -> str:
    try:
        return str(cupti.Result(status).name)
    except Exception:
        return f"CUPTI error {status}"
