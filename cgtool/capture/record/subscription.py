"""The recorder's CUPTI subscription: loading CUPTI, subscribing, which callbacks are on, and the
compiled callback's configuration.

One subscriber (CUPTI allows one per process), with only these callbacks enabled, so that eager
work pays nothing:

* resource ``GRAPHNODE_CREATED`` / ``GRAPHNODE_CLONED``, ``GRAPHEXEC_CREATED``,
  ``GRAPHEXEC_DESTROY_STARTING``, ``GRAPH_DESTROY_STARTING``;
* runtime ``cudaStreamBeginCapture*``, ``cudaStreamEndCapture*``, ``cudaGraphInstantiate*``; with
  ``--trace-replays`` also ``cudaGraphLaunch*`` (the correlation ids the traced kernels carry);
* driver ``cuGraphLaunch*`` (replay counts: every runtime launch goes through it);
* with the compiled callback, the allocation calls' exits (``cudaMalloc``, ``cudaFree``,
  ``cuMemCreate``, ``cuMemRelease``: the memory a capture took).

How CUPTI calls back (:data:`~cgtool.capture.record.options.SUBSCRIBER_ENV`): ``c``, the compiled
callback of ``_nodecb.c`` (the default where it is built: node creations, instantiations, launches,
destroyed graphs and allocations handled in C, the rest handed to Python); ``ctypes``, a ctypes
callback handing every callback to Python; ``cupti-python``, cupti-python's own ``subscribe``
(also the fallback when libcupti cannot be reached through ctypes). cupti-python itself is
imported only for kernel activity (``--coverage``, ``--trace-replays``) or where libcupti cannot
be found without it.

:meth:`Subscription.suspend` and :meth:`Subscription.resume` give CUPTI up and take it back (the
program's own ``torch.profiler``: ``capture/record/profiler.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from typing import Any, Callable

from cgtool.capture._deps import no_ldconfig
from cgtool.capture.record import _subscriber, attribution
from cgtool.errors import CaptureError, MissingExtraError

Handler = Callable[[int, int, int], None]


class RecordSetupError(CaptureError):
    """Recording cannot start (CUPTI missing or held by another profiler); raised before the program runs."""


def cupti_installed() -> bool:
    """cupti-python can be imported (looked up, not imported: the import is slow, see
    docs/performance.md#hand-written-code)."""
    if "cupti" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError):
        return False


def missing_cupti(detail: str = "") -> MissingExtraError:
    return MissingExtraError(
        "`cgtool record`",
        detail=(detail or "cupti-python, which is not installed") + "; take the version that matches your "
        "CUDA's CUPTI, e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0",
    )


class Subscription:
    """CUPTI for one recorder: the subscriber, the ids, the struct layout, the compiled callback.

    ``nodes`` and ``node_graph`` are the tracker's dicts the compiled callback fills (template graph
    -> node -> packed info; node -> graph); ``handler`` gets every callback the compiled callback
    does not handle itself (all of them for the other subscribers).
    """

    def __init__(self, *, how: str, kernel_activity: bool, tracing: bool) -> None:
        self.requested = how
        self.kernel_activity = kernel_activity
        self.tracing = tracing
        self.how = ""  # the subscriber in use, once subscribed
        #: this process is a fork's child: CUPTI's state is the parent's copy, and the recorder makes
        #: no CUPTI call of its own any more (an unsubscribe there could wait on a lock a thread of the
        #: parent held at the fork: the child must never hang)
        self.forked = False
        self.errors: list[str] = []
        self.cupti: Any = None
        self.ids: Any = None
        self.layout: Any = None
        self.nodecb: Any = None  # the compiled callback module, when it is the subscriber
        self._sub: Any = None
        self._lib: Any = None
        self._handler: Handler | None = None
        self._nodes: dict[int, Any] = {}
        self._node_graph: dict[int, int] = {}
        self.timings: dict[str, float] = {}
        S = _subscriber
        self.rt_begin = S.runtime_ids("cudaStreamBeginCapture")
        self.rt_end = S.runtime_ids("cudaStreamEndCapture")
        self.rt_inst = S.runtime_ids("cudaGraphInstantiate")
        self.rt_launch = S.runtime_ids("cudaGraphLaunch") if tracing else set()
        self.drv_launch = set(S.DRIVER.values())

    # ------------------------------------------------------------------ loading
    def load_cupti(self) -> Any:
        """cupti-python's ``cupti`` module, imported once; its enums and layouts checked against ours."""
        if self.cupti is not None:
            return self.cupti
        try:
            with no_ldconfig():
                from cupti import cupti
        except Exception as e:  # ImportError, or a libcupti mismatch raised at load time
            raise missing_cupti(f"cupti-python, which could not be loaded ({type(e).__name__}: {e})") from None
        self.cupti = cupti
        for m in _subscriber.mismatches(cupti):
            self.errors.append(f"CUPTI ABI: {m}")
        return cupti

    def open(self, handler: Handler, nodes: dict[int, Any], node_graph: dict[int, int]) -> None:
        """Subscribe and enable the callbacks; :class:`RecordSetupError` when CUPTI is held or unreachable."""
        t0 = time.perf_counter()
        how = self.requested
        if how == "auto":
            how = "c" if _subscriber.compiled_callback() is not None else "ctypes"
        if how == "c" and _subscriber.compiled_callback() is None:
            self.errors.append("the compiled callback is not built here; using the ctypes callback")
            how = "ctypes"
        if not cupti_installed():
            raise missing_cupti()
        lib = None
        if how in ("ctypes", "c"):
            try:
                lib = _subscriber.load_libcupti()
            except OSError as e:  # not in a wheel, and no cuda.pathfinder that finds it: cupti-python's copy
                self.errors.append(f"libcupti not found without cupti-python ({e}); found through cupti-python")
        if lib is None or self.kernel_activity or how not in ("ctypes", "c"):
            self.load_cupti()
        t1 = time.perf_counter()
        self.timings["import_cupti_s"] = t1 - t0
        self.layout = _subscriber.Layout(self.cupti)
        self._handler, self._nodes, self._node_graph = handler, nodes, node_graph
        self._lib = lib
        how = self._subscribe(how)
        self.ids = _subscriber.Ids(self._sub._lib) if how in ("ctypes", "c") else self.cupti
        t2 = time.perf_counter()
        self.timings["subscribe_s"] = t2 - t1
        self._enable()
        self.timings["enable_callbacks_s"] = time.perf_counter() - t2

    def _subscribe(self, how: str) -> str:
        try:
            try:
                self._sub = _subscriber.Subscriber(self.cupti, self._handler, how, lib=self._lib)  # type: ignore[arg-type]
            except OSError as e:  # libcupti not reachable through ctypes: cupti-python's own subscribe
                self.errors.append(f"ctypes subscriber unavailable ({e}); using cupti-python's subscribe")
                how = "cupti-python"
                self._sub = _subscriber.Subscriber(self.load_cupti(), self._handler, how)  # type: ignore[arg-type]
        except _subscriber.SubscribeError as e:
            raise RecordSetupError(
                f"`cgtool record` could not subscribe to CUPTI ({e.name}, status {e.status}). CUPTI allows "
                "one subscriber per process, so another profiler holds it: Nsight Systems or Nsight Compute, "
                "a tool named by CUDA_INJECTION64_PATH, or torch.profiler started from a sitecustomize. Run "
                "the program under `cgtool record` without the other profiler."
            ) from None
        except OSError as e:
            raise RecordSetupError(
                f"`cgtool record` could not reach libcupti's callback API ({e}). Set "
                "CGTOOL_RECORD_SUBSCRIBER=cupti-python to use cupti-python's own subscribe (slower capture)."
            ) from None
        self.how = how
        if how == "c":
            self.nodecb = _subscriber.compiled_callback()
            self._configure_compiled()
        return how

    def _configure_compiled(self) -> None:
        """The compiled callback also takes instantiations (node callbacks ignored while one runs; its
        start kept), destroyed graphs, replay counts (when not tracing) and allocations, and drops the
        API sites Python has no use for, without calling Python."""
        S, L = _subscriber, self.layout
        self.nodecb.configure(
            handler=self._handler, nodes=self._nodes, node_graph=self._node_graph,
            ranges=attribution.ranges.names, stop=attribution._STOP_KEEP,
            main_thread=threading.main_thread().ident or 0,
            resource_domain=S.DOMAIN_RESOURCE, node_cbid=S.RESOURCE["GRAPHNODE_CREATED"],
            off_desc=L.desc, off_graph=L.graph, off_node=L.node,
            clone_cbid=S.RESOURCE["GRAPHNODE_CLONED"], runtime_domain=S.DOMAIN_RUNTIME, off_site=L.site,
            instantiate=tuple(sorted(self.rt_inst)), enter_only=tuple(sorted(self.rt_begin)),
            exit_only=tuple(sorted(self.rt_end)), graph_destroy_cbid=S.RESOURCE["GRAPH_DESTROY_STARTING"],
            driver_domain=S.DOMAIN_DRIVER, off_params=L.params, off_ret=L.ret,
            alloc_ids=(S.ALLOC_RUNTIME["cudaMalloc_v3020"], S.ALLOC_RUNTIME["cudaFree_v3020"],
                       S.ALLOC_DRIVER["cuMemCreate"], S.ALLOC_DRIVER["cuMemRelease"]),
            launch_ids=tuple(sorted(S.DRIVER.values())) if not self.tracing else ())

    def _enable(self) -> None:
        S = _subscriber
        for name in ("GRAPHNODE_CREATED", "GRAPHNODE_CLONED", "GRAPHEXEC_CREATED", "GRAPHEXEC_DESTROY_STARTING",
                     "GRAPH_DESTROY_STARTING"):
            self._sub.enable(S.DOMAIN_RESOURCE, S.RESOURCE[name])
        for cbid in sorted(self.rt_begin | self.rt_end | self.rt_inst | self.rt_launch):
            self._sub.enable(S.DOMAIN_RUNTIME, cbid)
        for cbid in sorted(self.drv_launch):
            self._sub.enable(S.DOMAIN_DRIVER, cbid)
        if self.nodecb is not None:  # allocations, accounted for by the compiled callback
            for cbid in S.ALLOC_RUNTIME.values():
                self._sub.enable(S.DOMAIN_RUNTIME, cbid)
            for cbid in S.ALLOC_DRIVER.values():
                self._sub.enable(S.DOMAIN_DRIVER, cbid)

    def enable_node_callbacks(self, on: bool) -> None:
        """Node creation and clone callbacks on or off (the Python callback, around instantiations)."""
        S = _subscriber
        self._sub.enable(S.DOMAIN_RESOURCE, S.RESOURCE["GRAPHNODE_CREATED"], on)
        self._sub.enable(S.DOMAIN_RESOURCE, S.RESOURCE["GRAPHNODE_CLONED"], on)

    @property
    def counts_in_c(self) -> bool:
        """Replays are counted by the compiled callback (not tracing: no correlation ids needed)."""
        return self.nodecb is not None and not self.tracing

    # ------------------------------------------------------------------ giving CUPTI up
    def close(self) -> None:
        if self._sub is not None and not self.forked:
            try:
                self._sub.unsubscribe()
            except Exception:
                pass
        self._sub = None

    @property
    def active(self) -> bool:
        return self._sub is not None

    def suspend(self) -> None:
        """Unsubscribe (another CUPTI user asked for it); the compiled callback stops too."""
        self.close()

    def resume(self) -> str | None:
        """Subscribe again after :meth:`suspend`: None on success, else why not (CUPTI held)."""
        try:
            if self.how == "c":
                self.nodecb.set_autograd(None)
            self._subscribe(self.how)
            self._enable()
        except (RecordSetupError, OSError) as e:
            self._sub = None
            return str(e).split(". ")[0]
        return None

    def compiled_stats(self) -> tuple[dict[tuple[int, int], list[int]], int]:
        """The compiled callback's counts: ``{(domain, cbid): [calls, ns]}`` and its failed calls."""
        if self.nodecb is None:
            return {}, 0
        calls, ns, errs = self.nodecb.stats()
        out: dict[tuple[int, int], list[int]] = {
            (_subscriber.DOMAIN_RESOURCE, _subscriber.RESOURCE["GRAPHNODE_CREATED"]): [calls, ns]}
        for key, (c_calls, c_ns) in self.nodecb.handled_stats().items():
            prev = out.get(key, [0, 0])
            out[key] = [prev[0] + c_calls, prev[1] + c_ns]
        return out, errs
