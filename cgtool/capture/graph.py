"""``Graph``: the API of the newest ``torch.cuda.CUDAGraph`` docs on the torch users have today.

torch >= 2.8 provides capture, replay, ``keep_graph``, ``instantiate``, ``pool``,
``raw_cuda_graph(_exec)``; this class adds what older builds lack, on cuda.bindings. It is a drop-in
``torch.cuda.CUDAGraph``: errors are raised as the exception type PyTorch raises (each engine error is
also a cgtool error with its exit code, see ``cgtool.errors``), with PyTorch's message first, and
PyTorch's own tests of these APIs run against it (``scripts/torch_tests/``; their results by torch
version in ``scripts/torch_tests/RESULTS.md``).

=============================== ======================================================================
method                          what differs by torch version
=============================== ======================================================================
capture_begin                   ``pool`` is a token or a ``torch.cuda.MemPool`` (kept alive until
                                ``reset()``). ``check_input_liveness`` is cgtool's own tracker on
                                torch >= 2.8 (``cgtool.capture.liveness``): the rules of upstream
                                main's checker (newer than torch 2.13's ``torch.utils._cuda_debug``)
                                and its messages; torch's own option is not used, so every version
                                behaves alike. On the default stream: RuntimeError, PyTorch's message.
capture_end_pre/post            not in any released torch: built here. The wrapped torch graph always
                                keeps its template (``keep_graph=True`` underneath) so capture-end hooks
                                and ``get_graph_data`` can read it; with ``keep_graph=False`` the
                                template is released to the user's view after ``capture_end_post``
                                (``raw_cuda_graph`` then raises), but its host memory stays with torch.
register_*_hook                 capture-end, post-instantiate, replay-start and replay-end hooks: not
                                in any released torch, built here (RemovableHandle, in order). Replay
                                end hooks fire even when the launch raises (as upstream).
register_graph_instantiate_hook module level: a hook run for every engine graph after each
                                instantiation, before the graph's own hooks; its errors are swallowed
                                (upstream main, not released).
export_dot / export_graph_data  hook factories (upstream main). ``export_graph_data(path)`` writes
                                what PyTorch's writes, a pickle of the ``get_graph_data()`` dict, to
                                any name but ``.json``/``.json.gz``, which get JSON (the format every
                                cgtool command reads). cgtool writes the pickle for the drop-in only
                                and never reads one.
instantiate                     torch's; by the user only with ``keep_graph=True`` or between
                                ``capture_end_pre`` and ``capture_end_post`` (else RuntimeError, as
                                torch). Global, then per-graph hooks fire after each (re-)instantiation.
replay                          checks input liveness first when asked; instantiates on first use.
capture_end (failed)            torch 2.11 raises and leaves allocation routed to the pool, the pool's
                                use counted and the RNG generator in capture mode; the engine ends all
                                three at once (else empty_cache frees nothing, the next MemPool
                                destructor aborts the process, eager CUDA RNG raises). Refused on a
                                stream other than the capture's (torch would raise mid-way). After
                                one, MemPool keeps the engine's finalizer until a MemPool dies: with
                                no capture underway, it ends every routing torch left open for the
                                engine's pools first (torch 2.11's destructor aborts on any).
reset                           releases the pools retained by ``pools()``; during a capture, ends it
                                on its stream first (torch 2.11 leaves the stream capturing).
raw_cuda_graph, debug_dump      without a template: RuntimeError "No cudaGraph_t is available ..."
                                (upstream main's words), then torch 2.11's ("You cannot access the raw
                                cudaGraph_t instance unless ... keep_graph=true"), then cgtool's advice.
debug_dump(path, verbose)       ``cudaGraphDebugDotPrint`` called directly (torch's needs debug mode).
enable_debug_mode               same as ``keep_graph=True`` (as upstream now documents).
get_graph_data                  torch 2.13 has it but needs a 13.1 driver; here ids come from the driver
                                where it can, else from CUPTI (see ``cgtool.capture.export``). Cached
                                for the hooks of one instantiation (one object), fresh afterwards.
                                Child-graph and conditional nodes are one top-level node each, with a
                                UserWarning naming the kind; batch memory-op nodes are ``batch_mem_op``.
pools                           a list (seed 000; upstream main returns a tuple). Upstream main
                                (PR #187929): the capture pool, then every pool that
                                ``torch.cuda.use_mem_pool`` made current during the capture; each is
                                retained (one more use, its MemPool kept) until ``reset()``. torch <= 2.13
                                has one pool per graph: while an engine capture is underway,
                                ``torch.cuda.use_mem_pool`` is a stand-in that tells the engine (code
                                holding its own reference to torch's function bypasses it). The same
                                MemPool nested, or the capture's own pool, is refused (torch 2.11
                                counts a use it never gives back); a MemPool dropped during a capture
                                is destroyed when the last engine capture ends (torch 2.11's MemPool
                                destructor aborts while a capture is underway).
(dropped graph)                 a graph dropped mid-capture ends its capture (torch 2.11 leaves the
                                stream capturing for good).
=============================== ======================================================================

Not here: ``torch.cuda.Stream.is_capturing()`` (upstream main; a method of torch's stream class,
absent from torch 2.11) -- use :func:`is_current_stream_capturing`.

Use as ``with torch.cuda.stream(s), Graph() as g:`` or ``with s, g:`` in the style of
``torch.accelerator.Graph``, or through :func:`graph` like ``torch.cuda.graph``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import pickle
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from cgtool.capture._deps import check, require_bindings, require_cuda
from cgtool.capture.liveness import LivenessTracker, TrackedInput
from cgtool.errors import GraphCaptureError, GraphUsageError, UsageError

Hook = Callable[["Graph"], None]

#: PyTorch's messages when the template is gone (upstream main, then torch 2.11's), matched by code and
#: PyTorch's own tests; cgtool's advice follows them.
NO_GRAPH_T = (
    "No cudaGraph_t is available: either capture_end() has not been called, or the underlying "
    "cudaGraph_t was destroyed (keep_graph=false, and capture has been finalized). You cannot access "
    "the raw cudaGraph_t instance unless CUDAGraph was initialized with keep_graph=true."
)

#: Node kinds whose body is a separate cudaGraph_t that cudaGraphGetNodes does not descend into.
NESTED_KINDS = ("child_graph", "conditional")


class GraphState(Enum):
    """Where a Graph is in its life: new -> capturing -> captured (-> instantiated); a failed
    capture leaves it aborted until ``reset()``. Only the Graph itself changes it."""

    NEW = "new"  # nothing captured (also after reset())
    CAPTURING = "capturing"  # between capture_begin and capture_end
    CAPTURED = "captured"  # a template graph exists (it may also be instantiated)
    ABORTED = "aborted"  # the last capture failed: reset() before capturing again


class RemovableHandle:
    """Returned by ``register_*_hook``: ``remove()`` deregisters the hook."""

    _next_id = 0

    def __init__(self, hooks: "OrderedDict[int, Any]") -> None:
        self._hooks = hooks
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id

    @classmethod
    def add(cls, hooks: "OrderedDict[int, Any]", hook: Any) -> "RemovableHandle":
        """Register ``hook`` in ``hooks`` (in order) and return its handle."""
        h = cls(hooks)
        hooks[h.id] = hook
        return h

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *a: object) -> None:
        self.remove()


_global_instantiate_hooks: "OrderedDict[int, Hook]" = OrderedDict()


def register_graph_instantiate_hook(fn: Hook) -> RemovableHandle:
    """Run ``fn(graph)`` for every engine graph right after each instantiation (before its own hooks).

    Errors raised by ``fn`` are swallowed, so one consumer cannot break ``instantiate()`` for another.
    """
    return RemovableHandle.add(_global_instantiate_hooks, fn)


def _run_global_instantiate_hooks(g: "Graph") -> None:
    for fn in list(_global_instantiate_hooks.values()):
        try:
            fn(g)
        except Exception:
            pass


_ORIGINALS: dict[str, Any] = {}


def torch_originals(torch: Any) -> dict[str, Any]:
    """torch's own ``CUDAGraph`` class and ``graph_pool_handle``, remembered on first use.

    A shim that points ``torch.cuda.CUDAGraph`` at the engine (``scripts/torch_tests``) calls this
    before patching, so the engine keeps wrapping torch's class instead of itself.
    """
    if not _ORIGINALS:
        import torch.cuda.graphs as tg

        _ORIGINALS["CUDAGraph"] = tg.CUDAGraph
        _ORIGINALS["graph_pool_handle"] = tg.graph_pool_handle
        _ORIGINALS["make_graphed_callables"] = tg.make_graphed_callables
    return _ORIGINALS


def _torch_version(torch: Any) -> tuple[int, int]:
    try:
        major, minor = str(torch.__version__).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def _is_mem_pool(torch: Any, pool: Any) -> bool:
    cls = getattr(torch.cuda, "MemPool", None)
    return cls is not None and isinstance(pool, cls)


class Graph:
    """A CUDA graph with the newest CUDAGraph API. See the module docstring for version notes."""

    def __init__(
        self,
        keep_graph: bool = False,
        *,
        pool: Any = None,
        capture_error_mode: str = "global",
        stream: Any = None,
    ) -> None:
        torch = require_cuda("Graph capture")
        # Underneath, always keep the template: hooks and exports read it after capture.
        self._setup(torch, torch_originals(torch)["CUDAGraph"](keep_graph=True), keep_graph)
        self._default_pool = pool
        self._default_mode = "global" if capture_error_mode == "default" else capture_error_mode
        self._ctx_stream = stream

    def _setup(self, torch: Any, torch_graph: Any, keep_graph: bool) -> None:
        """The state every Graph starts with, around a torch CUDAGraph (keep_graph=True)."""
        self._torch = torch
        self.keep_graph = keep_graph
        self._g = torch_graph
        self._default_pool = None
        self._default_mode = "global"
        self._default_liveness = False
        self._ctx_stream = None
        self._capture_end_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._post_instantiate_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._replay_start_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._replay_end_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._pools: list[Any] = []  # ids of the pools this graph retains: the capture's, then side pools
        self._mempools: list[Any] = []  # MemPool objects of those pools: kept alive until reset()
        self._pool_refs: list[tuple[int, Any]] = []  # (device, id) of side pools whose use count we raised
        self._capture_key: tuple[int, int] | None = None  # where this graph's capture runs, while it runs
        self._state = GraphState.NEW
        self._template_live = False
        self._instantiated = False
        self._tracker: LivenessTracker | None = None
        self._capture_pool: tuple[int, Any] | None = None  # (device, pool id) of the capture underway
        self._capture_stream: Any = None  # the torch stream the capture began on, while it runs
        self._caching_graph_data = False
        self._graph_data_cache: dict[str, Any] | None = None
        self.capture_s: float | None = None
        self.instantiate_s: float | None = None
        self.instantiations = 0

    @classmethod
    def _wrap(cls, torch_graph: Any, *, keep_graph: bool = True) -> "Graph":
        """Wrap a torch CUDAGraph already captured with keep_graph=True."""
        self = cls.__new__(cls)
        self._setup(require_cuda("Graph capture"), torch_graph, keep_graph)
        self._state = GraphState.CAPTURED
        self._template_live = True
        return self

    # ------------------------------------------------------------------ capture
    def capture_begin(
        self, pool: Any = None, capture_error_mode: str | None = None, check_input_liveness: bool = False
    ) -> None:
        """Begin capturing CUDA work on the current stream (not the default stream)."""
        if self._state is not GraphState.NEW:
            raise GraphUsageError(
                "This CUDAGraph instance already owns a captured graph. To capture a new graph, "
                "create a new instance or call reset() on the present instance."
                + (" (A capture is underway on it now.)" if self._state is GraphState.CAPTURING else "")
            )
        torch = self._torch
        if torch.cuda.current_stream() == torch.cuda.default_stream():
            raise GraphCaptureError(
                "CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok "
                "to replay them on the default stream.) Capture on a side stream: "
                "`with torch.cuda.stream(torch.cuda.Stream()):` or use cgtool.capture.graph.graph(...)."
            )
        if torch.cuda.is_current_stream_capturing():
            # torch 2.11 would register the graph with the RNG generator halfway and raise ("Cannot
            # register the state during capturing stage"); destroying that graph later aborts.
            raise GraphUsageError(
                "capture_begin(): the current stream is already capturing (a capture that has not "
                "ended is underway on it, or on a stream it was forked from). End that capture first "
                "(capture_end() on its graph, on this stream), or capture on another stream."
            )
        pool = pool if pool is not None else self._default_pool
        mode = capture_error_mode or self._default_mode
        liveness = check_input_liveness or self._default_liveness
        if liveness and _torch_version(torch) < (2, 8):
            raise GraphUsageError(
                f"check_input_liveness needs torch 2.8 or newer (this is {torch.__version__}). "
                "Drop the option, or upgrade torch."
            )
        mem_pool = None
        if pool is None:
            # A fresh pool of our own, as torch makes when given none; but with its id known before
            # the capture (torch's pool() refuses until capture ends), to release it if capture fails.
            pool_id = torch_originals(torch)["graph_pool_handle"]()
        elif _is_mem_pool(torch, pool):
            pool_id, mem_pool = pool.id, pool
        else:
            pool_id = pool
        device = torch.cuda.current_device()
        # Built before the capture begins: it reads the allocator's segments of the capture pool.
        tracker = LivenessTracker(torch, (device, pool_id)) if liveness else None
        self._state = GraphState.CAPTURING
        self._t_begin = time.perf_counter()
        # Registered before torch routes allocations to the pool: from then on, a MemPool whose
        # last reference goes (gc can run at any allocation) is parked, not destroyed.
        self._capture_key = _watch_pools_entered(torch, self)
        _note_route(device, pool_id)
        try:
            self._g.capture_begin(pool_id, capture_error_mode=mode)
        except Exception as e:
            self._state = GraphState.NEW
            self._failed_begin(device, pool_id, e)
            raise
        self._capture_pool = (device, pool_id)
        self._capture_stream = torch.cuda.current_stream()
        self._pools.append(pool_id)
        if mem_pool is not None:
            self._mempools.append(mem_pool)  # as torch does: the graph keeps the MemPool alive
        if tracker is not None:
            try:
                self._tracker = tracker
                tracker.start()
            except BaseException:
                self._abort_capture()  # never leave the stream capturing behind an error
                raise

    def _stop_tracker(self, *, drop: bool) -> None:
        """The capture is ending (ended, failed or abandoned): stop recording its inputs."""
        if self._tracker is not None:
            self._tracker.stop()
            if drop:
                self._tracker = None

    def _unwatch(self) -> None:
        """The capture is over and torch routes no more allocations to its pool: it leaves the
        registry of captures underway (the last one puts torch's ``use_mem_pool`` and MemPool
        destructor back). Called only after that routing ended: until then a MemPool dropped here
        (by gc, by another thread) is parked, since its destructor would abort the process."""
        if self._capture_key is not None:
            _unwatch_pools_entered(self._torch, self._capture_key)
            self._capture_key = None

    def capture_end_pre(self) -> None:
        """End capture but leave the cudaGraph_t live; capture-end hooks fire here, in order."""
        if self._state is not GraphState.CAPTURING:
            raise GraphUsageError(
                "capture_end_pre() without capture_begin(): no capture is underway"
                + (" (the last capture failed; call reset())." if self._state is GraphState.ABORTED else ".")
            )
        current = self._torch.cuda.current_stream()
        if self._capture_stream is not None and current != self._capture_stream:
            raise GraphUsageError(
                "Capture must end on the same stream it began on. The capture is still underway on "
                f"{self._capture_stream}; the current stream is {current}. Call capture_end() under "
                "`with torch.cuda.stream(s):` of the stream capture_begin() was called on (or reset() "
                "to abandon the capture)."
            )
        self._stop_tracker(drop=False)
        try:
            self._g.capture_end()  # keep_graph=True underneath: ends capture, does not instantiate
        except Exception:
            self._abort_failed_capture()
            raise
        self._unwatch()
        _release_parked_pools()
        self.capture_s = time.perf_counter() - self._t_begin
        self._state = GraphState.CAPTURED
        self._template_live = True
        for hook in list(self._capture_end_hooks.values()):
            hook(self)

    def capture_end_post(self) -> None:
        """Finalize: with keep_graph=False the template is released (the graph must be instantiated)."""
        if self._state is not GraphState.CAPTURED:
            raise GraphUsageError("capture_end_post() must follow capture_end_pre().")
        if not self.keep_graph:
            if not self._instantiated:
                raise GraphUsageError(
                    "capture_end_post() with keep_graph=False needs the graph instantiated first "
                    "(capture_end() and the context manager do this)."
                )
            self._template_live = False

    def capture_end(self) -> None:
        """End capture; instantiate when keep_graph=False (as torch does)."""
        self.capture_end_pre()
        if not self.keep_graph:
            self.instantiate()
        self.capture_end_post()

    def _abort_capture(self) -> None:
        """End a capture that the caller's code broke off (an exception in the capture body)."""
        if self._state is not GraphState.CAPTURING:
            return
        self._stop_tracker(drop=True)
        try:
            self._g.capture_end()
        except Exception:
            self._abort_failed_capture()  # the caller's exception matters more than this one
            return
        self._unwatch()
        self._state = GraphState.ABORTED
        _release_parked_pools()

    def _abort_failed_capture(self) -> None:
        """torch's capture_end raised (an invalidated capture): end what torch 2.11 leaves behind.

        torch's ``capture_end`` raises before it ends allocation to the pool, before it counts the
        pool's use as the graph's and before the RNG generator leaves capture mode. Here, in this
        order: the stream stops capturing (if torch's call did not get that far), allocation to the
        pool ends, the capture's use of the pool is given back (so ``empty_cache()`` can free its
        blocks once their tensors are gone), and the default generator leaves capture mode (else
        every eager CUDA RNG call raises "Offset increment outside graph capture"), and torch's
        graph is replaced by a fresh one (see ``_retire_torch_graph``). Before the
        routing ended, ``torch.cuda.empty_cache()`` released nothing and the destructor of any
        ``torch.cuda.MemPool`` aborted the process (``captures_underway.empty()`` INTERNAL ASSERT in
        the allocator's ``synchronize_and_free_events``, measured on torch 2.11 alone as well).
        """
        self._stop_tracker(drop=True)
        torch = self._torch
        self._state = GraphState.ABORTED
        if self._capture_stream is not None:
            _end_stream_capture(torch, self._capture_stream)
        _ROUTE_STATE["unsure"] = True  # see _end_leftover_routes
        if self._capture_pool is not None:
            device, pool_id = self._capture_pool
            _end_routes(torch, device, pool_id)
            _release_pool(torch, device, pool_id)
        self._capture_stream = None
        self._unwatch()  # only now: until the routing ended, a MemPool destructor would abort
        _leave_rng_capture_mode(torch)
        self._retire_torch_graph()
        _release_parked_pools()

    def _failed_begin(self, device: int, pool_id: Any, e: Exception) -> None:
        """torch's capture_begin raised: undo what it did before raising (torch 2.11's order).

        It registers the graph with the RNG generator and puts the generator in capture mode, then
        raises "already recording to mempool_id" after counting one more use of the pool, or fails
        ``cudaStreamBeginCapture`` after routing allocation to the pool.
        """
        torch = self._torch
        message = str(e)
        if "register the state" in message:
            # Registered with the RNG generator's graphs on one side only: its destructor would
            # abort ("The graph should be registered to the state"). Kept for the process's life.
            _UNDESTROYABLE.append(self._g)
        if "already recording to mempool_id" in message:
            _release_pool(torch, device, pool_id)  # the routing open is another capture's: left alone
        elif "beginAllocateToPool" not in message and "default stream" not in message:
            _ROUTE_STATE["unsure"] = True  # see _end_leftover_routes
            _end_routes(torch, device, pool_id)
            _release_pool(torch, device, pool_id)
        self._unwatch()  # after the routing ended (see capture_begin)
        _leave_rng_capture_mode(torch)
        self._retire_torch_graph()
        _release_parked_pools()

    def _retire_torch_graph(self) -> None:
        """Replace a torch CUDAGraph whose capture failed with a fresh one (torch's ``reset()`` has
        nothing to undo there; its destructor takes it out of the RNG generator's graphs). Its
        allocator routing, which holds a pointer to it, was ended when the capture failed."""
        self._g = torch_originals(self._torch)["CUDAGraph"](keep_graph=True)

    def _abandon_capture(self) -> None:
        """End a capture nobody will finish (``reset()`` during it, or the graph dropped mid-capture)."""
        if self._state is not GraphState.CAPTURING:
            return
        torch = self._torch
        self._stop_tracker(drop=True)
        try:
            with torch.cuda.stream(self._capture_stream):
                self._g.capture_end()
        except Exception:
            self._abort_failed_capture()
            return
        self._unwatch()
        self._state = GraphState.ABORTED
        _release_parked_pools()

    # ------------------------------------------------------------------ instantiate / replay
    def instantiate(self) -> None:
        """(Re-)instantiate the exec graph; global then per-graph post-instantiate hooks fire after it."""
        if self._state in (GraphState.NEW, GraphState.CAPTURING, GraphState.ABORTED):
            raise GraphUsageError(
                "instantiate() needs a finished capture: capture_begin() ... capture_end() first"
                + (" (the last capture failed; call reset())." if self._state is GraphState.ABORTED else ".")
            )
        if not self._template_live:
            raise GraphUsageError(
                "instantiate() is intended to be called by the user only when keep_graph=true. "
                "The template was released after capture (keep_graph=False); capture with "
                "keep_graph=True to instantiate again."
            )
        t0 = time.perf_counter()
        self._g.instantiate()
        self.instantiate_s = time.perf_counter() - t0
        self._instantiated = True
        self.instantiations += 1
        # One get_graph_data() result serves every hook of this instantiation; dropped afterwards.
        self._caching_graph_data = True
        try:
            _run_global_instantiate_hooks(self)
            for hook in list(self._post_instantiate_hooks.values()):
                hook(self)
        finally:
            self._caching_graph_data = False
            self._graph_data_cache = None

    def replay(self) -> None:
        """Replay the captured work (instantiating first if needed, as torch does)."""
        if self._tracker is not None:
            self._tracker.check(self.pools())
        if not self._instantiated:
            if self._state is not GraphState.CAPTURED:
                raise GraphUsageError(
                    "Called CUDAGraph::replay without a preceding successful capture."
                    + (" The last capture failed; call reset() and capture again." if self._state is GraphState.ABORTED else "")
                )
            self.instantiate()
        for hook in list(self._replay_start_hooks.values()):
            hook(self)
        try:
            self._g.replay()
        finally:
            for hook in list(self._replay_end_hooks.values()):
                hook(self)

    def reset(self) -> None:
        """Delete the graph held by this instance; it can capture again.

        During a capture, the capture is ended and thrown away first. After a failed capture the
        pool was already given back, and torch's graph replaced, when the capture failed.
        """
        self._abandon_capture()
        self._stop_tracker(drop=True)
        self._unwatch()
        try:
            self._g.reset()
            self._g = torch_originals(self._torch)["CUDAGraph"](keep_graph=True)
        finally:
            self._state = GraphState.NEW
            self._template_live = False
            self._instantiated = False
            self._capture_pool = None
            self._capture_stream = None
            refs, self._pool_refs = self._pool_refs, []
            for device, pool_id in refs:
                _release_pool(self._torch, device, pool_id)
            self._pools.clear()
            _let_go(self._mempools)  # held while any engine capture is underway
            _release_parked_pools()

    def __del__(self) -> None:
        # A capture still underway is ended (torch 2.11 would leave the stream capturing for good).
        # As torch's CUDAGraph releases its pool when destroyed: give back the side pools this graph
        # retained (their MemPool objects go with the graph's attributes, after this).
        if getattr(self, "_state", None) is GraphState.CAPTURING:
            try:
                self._abandon_capture()
            except Exception:  # a destructor, possibly at interpreter exit: never raise
                pass
        refs = getattr(self, "_pool_refs", None)
        if refs:
            for device, pool_id in refs:
                try:
                    _release_pool(self._torch, device, pool_id)
                except Exception:  # a destructor, possibly at interpreter exit: never raise
                    pass
            refs.clear()
        _let_go(getattr(self, "_mempools", None))  # another capture may be underway: held till it ends

    # ------------------------------------------------------------------ pools and raw handles
    def pool(self) -> Any:
        """An opaque token of this graph's memory pool, to share it with another capture."""
        if self._state is not GraphState.CAPTURED:
            raise GraphUsageError(
                "Called CUDAGraph::pool() without a preceding successful capture."
                + {
                    GraphState.NEW: " Nothing has been captured (or reset() was called since).",
                    GraphState.CAPTURING: " The capture is still underway: call capture_end() first.",
                    GraphState.ABORTED: " The last capture failed and its pool was given back: call "
                    "reset() and capture again.",
                }[self._state]
            )
        return self._g.pool()

    def pools(self) -> list[Any]:
        """Ids of every memory pool this graph retains: its capture pool first, then each pool that
        ``torch.cuda.use_mem_pool`` made current during the capture (kept until ``reset()``)."""
        if not self._pools:
            return [self.pool()]
        return list(self._pools)

    def _retain_pool(self, pool: Any, device: Any = None) -> None:
        """A ``MemPool`` entered during this graph's capture: the graph keeps it until ``reset()``.

        As upstream's ``CUDAGraph::retain_pool``: the pool's use count goes up by one (released by
        ``reset()``), so its memory outlives the user's MemPool object while the graph can replay.
        """
        pool_id = pool.id
        if any(tuple(p) == tuple(pool_id) for p in self._pools):
            return
        torch = self._torch
        dev = torch.cuda.current_device() if device is None else torch.cuda._get_device_index(device)
        _note_route(int(dev), pool_id)
        if _incref_pool(torch, int(dev), pool_id):
            self._pool_refs.append((int(dev), pool_id))
        self._pools.append(pool_id)
        self._mempools.append(pool)

    def raw_cuda_graph(self) -> int:
        """The cudaGraph_t (template); live with keep_graph=True or inside a capture-end hook."""
        if not self._template_live:
            raise GraphUsageError(NO_GRAPH_T + (
                " Nothing has been captured yet." if self._state in (GraphState.NEW, GraphState.CAPTURING)
                else " Capture with keep_graph=True (or read the graph in a capture-end hook, before the "
                "template is released) to inspect or dump it after capture."
            ))
        return int(self._g.raw_cuda_graph())

    def raw_cuda_graph_exec(self) -> int:
        """The cudaGraphExec_t; instantiate() (or capture_end with keep_graph=False) first."""
        if not self._instantiated:
            raise GraphUsageError(
                "You cannot access the raw cudaGraphExec_t instance until instantiate() has been called "
                "(capture_end() does it when keep_graph=False)."
            )
        return int(self._g.raw_cuda_graph_exec())

    @property
    def _external_inputs(self) -> dict[int, TrackedInput]:
        """check_input_liveness: the tracked external inputs by data_ptr (empty when not tracking)."""
        return self._tracker.external_inputs if self._tracker is not None else {}

    # ------------------------------------------------------------------ hooks
    def register_capture_end_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` after capture completes, before finalization; the template is live."""
        return RemovableHandle.add(self._capture_end_hooks, hook)

    def register_post_instantiate_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` after each instantiation (a re-instantiation makes a new exec graph)."""
        return RemovableHandle.add(self._post_instantiate_hooks, hook)

    def register_replay_start_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` at the start of every replay, just before the launch (after instantiation)."""
        return RemovableHandle.add(self._replay_start_hooks, hook)

    def register_replay_end_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` once every replay is enqueued (not finished); fires even if the launch raised."""
        return RemovableHandle.add(self._replay_end_hooks, hook)

    # ------------------------------------------------------------------ inspection
    def enable_debug_mode(self) -> None:
        """Retain the template after capture (same as keep_graph=True)."""
        self.keep_graph = True

    def debug_dump(self, debug_path: str, *, verbose: bool = True, flags: int | None = None) -> None:
        """Write the driver's Graphviz DOT of the template to ``debug_path``."""
        raw = self.raw_cuda_graph()  # first: no template is the error to report, bindings or not
        rt, _ = require_bindings("debug_dump")
        if flags is None:
            F = rt.cudaGraphDebugDotFlags
            flags = int(F.cudaGraphDebugDotFlagsVerbose) if verbose else 0
        check(
            rt.cudaGraphDebugDotPrint(rt.cudaGraph_t(init_value=raw), str(debug_path).encode(), flags),
            "cudaGraphDebugDotPrint",
        )

    def get_graph_data(self, *, with_meta: bool = False) -> dict[str, Any]:
        """The graph's topology in get_graph_data()'s schema (``with_meta`` adds cgtool's block).

        Inside the hooks of one instantiation every call returns the same object; afterwards each
        call computes a fresh one. Needs the template (keep_graph=True, or a hook) and the exec graph.
        """
        if not with_meta and self._graph_data_cache is not None:
            return self._graph_data_cache
        from cgtool.capture.export import export

        raw, exe = self.raw_cuda_graph(), self.raw_cuda_graph_exec()
        ex = export(raw, exe, with_meta=with_meta)
        data = ex.data
        _warn_nested(ex.type_counts)
        if with_meta:
            data["cgtool"]["timings"].update(
                {"capture_s": self.capture_s, "instantiate_s": self.instantiate_s}
            )
        elif self._caching_graph_data:
            self._graph_data_cache = data
        return data

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> "Graph":
        torch = self._torch
        self._stream_ctx = None
        if self._ctx_stream is not None:
            self._stream_ctx = torch.cuda.stream(self._ctx_stream)
            self._stream_ctx.__enter__()
        elif torch.cuda.current_stream() == torch.cuda.default_stream():
            # Like torch.cuda.graph: capture on a side stream when the user has not chosen one.
            self._stream_ctx = torch.cuda.stream(_side_stream(torch))
            self._stream_ctx.__enter__()
        torch.cuda.synchronize()
        self.capture_begin()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.capture_end()
            else:
                self._abort_capture()
        finally:
            if self._stream_ctx is not None:
                self._stream_ctx.__exit__(exc_type, exc, tb)


#: torch CUDAGraphs whose destructor would abort the process (see ``Graph._failed_begin``).
_UNDESTROYABLE: list[Any] = []


def _end_stream_capture(torch: Any, stream: Any) -> None:
    """If ``stream`` is still capturing (torch's capture_end raised before ending it), end it."""
    try:
        with torch.cuda.stream(stream):
            capturing = bool(torch.cuda.is_current_stream_capturing())
    except Exception:
        return
    if not capturing:
        return
    try:
        rt, _ = require_bindings("ending a failed capture")
        err, g = rt.cudaStreamEndCapture(int(stream.cuda_stream))
        if g is not None and int(g):
            rt.cudaGraphDestroy(g)
    except Exception:
        pass  # no bindings: the stream stays capturing, as on torch alone


def _end_allocate_to_pool(torch: Any, device: int, pool_id: Any) -> bool:
    """End allocation to the pool of a capture that failed (torch 2.11's capture_end raises first).

    False when no routing to the pool was open (torch got as far as ending it itself) or torch lacks
    the binding.
    """
    end = getattr(torch._C, "_cuda_endAllocateToPool", None)
    if end is None:
        return False
    try:
        end(device, pool_id)
    except RuntimeError:
        return False  # "endAllocatePool: not currently recording to mempool_id"
    return True


def _end_routes(torch: Any, device: int, pool_id: Any) -> int:
    """End every routing of allocations to the pool that torch's allocator has open; how many.

    torch's ``endAllocateToPool`` ends one entry per call and raises when none is left. Bounded,
    so a binding that never raises cannot spin.
    """
    ended = 0
    while ended < 16 and _end_allocate_to_pool(torch, device, pool_id):
        ended += 1
    return ended


#: (device, pool id) of every pool an engine capture routed allocations to since torch's routing
#: was last known clean (an ordered set, the newest last; at most _ROUTE_SUSPECTS_MAX).
_ROUTE_SUSPECTS: dict[tuple[int, Any], None] = {}
_ROUTE_SUSPECTS_MAX = 256
#: "unsure": an engine capture failed since the leftover routes were last ended (the MemPool class
#: keeps the engine's finalizer until they are); "torch": the torch module the finalizer ends them on.
_ROUTE_STATE: dict[str, Any] = {"unsure": False, "torch": None}


def _note_route(device: int, pool_id: Any) -> None:
    """An engine capture is about to route allocations to this pool (or retains it as a side pool)."""
    try:
        key = (int(device), tuple(pool_id))
    except TypeError:
        return
    _ROUTE_SUSPECTS.pop(key, None)
    _ROUTE_SUSPECTS[key] = None
    while len(_ROUTE_SUSPECTS) > _ROUTE_SUSPECTS_MAX:
        del _ROUTE_SUSPECTS[next(iter(_ROUTE_SUSPECTS))]


def _end_leftover_routes(torch: Any = None, pool_id: Any = None) -> None:
    """No engine capture is underway: end every routing torch's allocator left open for the pools
    engine captures used (and ``pool_id``'s, a MemPool about to be destroyed).

    torch 2.11's MemPool destructor asserts that no routing is open for ANY pool
    (``captures_underway.empty()`` INTERNAL ASSERT, the process aborts). After a failed capture the
    engine ends the capture's routing at once; on the GPU (engine_states seeds 731, 1616 and 1662,
    torch 2.11) an entry was still open later, after a second capture into the same MemPool, both
    graphs reset and no capture underway. So once a capture has failed, before any MemPool dies (or
    the engine lets one go) every such pool's routing is ended. Only then: with no capture underway
    an open entry can only be a leftover, and any entry at that moment would abort the process.
    """
    if _CAPTURING or not _ROUTE_STATE["unsure"]:
        return
    torch = torch if torch is not None else _ROUTE_STATE["torch"]
    if torch is None:
        return
    keys = list(_ROUTE_SUSPECTS)
    if pool_id is not None:
        try:
            keys.append((int(torch.cuda.current_device()), tuple(pool_id)))
        except Exception:
            pass
    for device, pid in keys:
        try:
            _end_routes(torch, device, pid)
        except Exception:  # a finalizer may run at interpreter exit: never raise
            pass
    _ROUTE_SUSPECTS.clear()
    _ROUTE_STATE["unsure"] = False


#: Per device: the stream of the empty capture that takes the RNG generator out of capture mode.
_RNG_RESET: dict[int, Any] = {}


def _leave_rng_capture_mode(torch: Any) -> None:
    """After a failed capture: an empty capture, so the default CUDA generator leaves capture mode.

    torch 2.11's ``capture_begin`` puts the generator in capture mode; only a successful
    ``capture_end`` takes it out. Until then every eager CUDA RNG call raises "Offset increment
    outside graph capture encountered unexpectedly". An empty capture on a private stream does
    both steps (no kernel, no allocation). Skipped while another engine capture is underway: its
    own end does it (and a new prologue would reset that capture's RNG offset).
    """
    if _CAPTURING or not hasattr(torch.cuda, "Stream"):
        return
    collecting = gc.isenabled()
    gc.disable()  # no cycle (a MemPool in one) is destroyed while this capture routes allocations
    try:
        dev = int(torch.cuda.current_device())
        if dev not in _RNG_RESET:
            _RNG_RESET[dev] = torch.cuda.Stream()
        stream, pool = _RNG_RESET[dev], torch_originals(torch)["graph_pool_handle"]()
        g = torch_originals(torch)["CUDAGraph"](keep_graph=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
            with torch.cuda.stream(stream):
                try:
                    g.capture_begin(pool, capture_error_mode="relaxed")
                    g.capture_end()
                except Exception:
                    # Left routed to its pool, every later MemPool destructor would abort.
                    _end_stream_capture(torch, stream)
                    _end_allocate_to_pool(torch, dev, pool)
                    _release_pool(torch, dev, pool)
                    raise
        g.reset()
    except Exception:
        pass  # as on torch alone: the next successful capture ends capture mode
    finally:
        if collecting:
            gc.enable()


def _release_pool(torch: Any, device: int, pool_id: Any) -> None:
    """Give back one use of a pool (a failed capture's, a retained side pool's)."""
    release = getattr(torch._C, "_cuda_releasePool", None)
    if release is None:
        return
    try:
        release(device, pool_id)
    except RuntimeError:
        pass  # a torch that already released it on reset(): nothing left to do


def _incref_pool(torch: Any, device: int, pool_id: Any) -> bool:
    """Raise a pool's use count by one, as upstream's ``CUDAGraph::retain_pool`` does.

    torch <= 2.13 has no binding that only increments it: beginning allocation to the pool does
    (``createOrIncrefPool``), and ending it at once routes nothing to it (nothing is allocated in
    between, and the routing is for this thread only). False where the bindings are missing.
    """
    begin = getattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", None)
    end = getattr(torch._C, "_cuda_endAllocateToPool", None)
    if begin is None or end is None:
        return False
    try:
        begin(device, pool_id)
    except RuntimeError:
        return False
    end(device, pool_id)
    return True


#: Captures underway on engine graphs: (device, stream handle) -> the graph capturing on that stream
#: (a weak reference: a graph dropped mid-capture is destroyed, and its destructor ends the capture).
_CAPTURING: dict[tuple[int, int], "weakref.ref[Graph]"] = {}
#: While a capture is underway: torch's ``use_mem_pool`` and the engine's stand-in for it.
_USE_MEM_POOL: dict[str, Any] = {}
#: While a capture is underway: torch's MemPool class and the ``__del__`` it had (None: none).
_MEMPOOL_DEL: dict[str, Any] = {}
#: MemPools dropped while an engine capture was underway (with their class's own ``__del__``),
#: destroyed when the last one ends. Their finalizer has run (PEP 442: once per object).
_PARKED: list[tuple[Any, Any]] = []
#: MemPools the engine let go of (``reset()``, a graph destroyed) while an engine capture was
#: underway: held, so that none dies there, and let go when the last capture ends.
_HELD: list[Any] = []
#: Parked MemPools still alive after they were let go (something else holds them): their
#: finalizer has run, so no ``__del__`` would park them again, and their destructor would run
#: wherever their last reference goes -- held here instead, and let go at each capture's end.
_FINALIZED: list[Any] = []
#: Per thread: the MemPools entered through the stand-in and not yet left.
_ENTERED = threading.local()


def _park_mempool(pool: Any) -> None:
    """``torch.cuda.MemPool.__del__`` while an engine capture is underway: keep the pool alive.

    torch 2.11's MemPool destructor empties the pool's cache, and the allocator asserts that no
    capture is underway there (``captures_underway.empty()``): a MemPool destroyed during any
    capture aborts the process. The engine keeps it until its last capture ends.
    """
    original = _MEMPOOL_DEL.get("del")
    if _CAPTURING:
        _PARKED.append((pool, original))  # resurrects it: destroyed by _release_parked_pools()
        return
    try:
        _end_leftover_routes(pool_id=getattr(pool, "id", None))  # the destructor asserts none is open
    except Exception:  # a finalizer, possibly at interpreter exit: never raise
        pass
    if original is not None:
        original(pool)


def _let_go(pools: list[Any] | None) -> None:
    """The engine drops its references to the MemPools in ``pools`` (the list is emptied).

    While an engine capture is underway they are held in ``_HELD`` instead: the reference dropped
    may be the last one, and a finalizer is not a safe net (an object runs it once; a pool
    parked before dies later without it).
    """
    if not pools:
        return
    if _CAPTURING:
        _HELD.extend(pools)
    pools.clear()


def _release_parked_pools() -> None:
    """Once no engine capture is underway, let go of every MemPool held or parked during one.

    A parked pool (finalized once) still referenced after that -- a reference cycle, or a holder
    the engine does not know -- would later die without a finalizer, possibly during a capture:
    cycles are collected here at once (``gc.collect``, only when such a pool exists), and a pool
    that is still alive is held again until the next capture ends.
    """
    if _CAPTURING or not (_PARKED or _HELD or _FINALIZED):
        return
    _end_leftover_routes()  # the parked pools' destructors assert that no routing is open
    parked = list(_PARKED)
    _PARKED.clear()
    for entry in parked:
        if entry[1] is not None:  # a finalizer runs once: run the class's own now
            entry[1](entry[0])
    if parked:
        del entry  # no reference of this frame may outlive the release
    fresh = _weak_refs(pool for pool, _ in parked)
    older = _weak_refs(_FINALIZED)
    _FINALIZED.clear()
    _HELD.clear()  # never finalized: if one dies during a later capture, its finalizer parks it
    del parked
    if any(r() is not None for r in fresh):
        gc.collect()  # no capture is underway: a cycle holding a just-parked pool dies now
    _FINALIZED.extend(p for p in (r() for r in fresh + older) if p is not None)


def _weak_refs(objs: Any) -> list[weakref.ref[Any]]:
    """Weak references to ``objs`` (those that take none die with their last reference, as before)."""
    refs = []
    for obj in objs:
        try:
            refs.append(weakref.ref(obj))
        except TypeError:
            pass
    return refs


def _stream_key(torch: Any) -> tuple[int, int]:
    s = torch.cuda.current_stream()
    return (int(s.device_index), int(s.cuda_stream))


def _graph_capturing_here(torch: Any) -> "Graph | None":
    """The engine graph whose capture the current stream belongs to (None when it is not capturing).

    A stream forked into the capture (it waited on an event of the capturing stream) is not the
    stream the capture began on: when one engine capture alone is underway, it is that one.
    """
    if not _CAPTURING or not torch.cuda.is_current_stream_capturing():
        return None
    ref = _CAPTURING.get(_stream_key(torch))
    if ref is None and len(_CAPTURING) == 1:
        ref = next(iter(_CAPTURING.values()))
    return None if ref is None else ref()


def _graphs_capturing() -> list["Graph"]:
    """The engine graphs whose capture is underway (in any thread)."""
    return [g for g in (ref() for ref in list(_CAPTURING.values())) if g is not None]


def _watch_pools_entered(torch: Any, g: "Graph") -> tuple[int, int]:
    """Register ``g``'s capture on the current stream; while any engine capture is underway,
    ``torch.cuda.use_mem_pool`` is a stand-in that makes the capturing graph retain the pool
    (upstream's ``use_mem_pool`` calls ``CUDAGraph::retain_pool``; torch <= 2.13's does not).

    Code that kept its own reference to torch's function (``from torch.cuda import use_mem_pool``
    before the capture) bypasses the stand-in: such a pool is not retained, as on torch <= 2.13.
    """
    key = _stream_key(torch)
    _CAPTURING[key] = weakref.ref(g)
    _ROUTE_STATE["torch"] = torch
    _guard_mempool_class(torch)
    mem: Any = getattr(torch.cuda, "memory", None)
    original = getattr(mem, "use_mem_pool", None)
    if "torch" in _USE_MEM_POOL or original is None:
        return key

    @contextlib.contextmanager
    def use_mem_pool(pool: Any, device: Any = None) -> Iterator[Any]:
        entered = _ENTERED.__dict__.setdefault("pools", [])
        pool_id = tuple(getattr(pool, "id", ()))
        capture_pools = [tuple(g._capture_pool[1]) for g in _graphs_capturing() if g._capture_pool is not None]
        if pool_id in capture_pools:
            raise GraphUsageError(
                "use_mem_pool: this MemPool is the pool of a capture underway (capture_begin(pool=...)): "
                "what the capture allocates goes there already. torch 2.11 would count one more use of "
                "it and never give it back. Allocate without use_mem_pool, or use another MemPool."
            )
        if any(p is pool for p in entered):
            # torch 2.11 counts one more use of the pool before it refuses ("already recording to
            # mempool_id") and never gives it back: the pool would never be freed.
            raise GraphUsageError(
                "use_mem_pool: this MemPool is already the current pool of this thread (an outer "
                "`with torch.cuda.use_mem_pool(pool):` is still open). Nest a different MemPool, or "
                "allocate in the outer block."
            )
        capturing = _graph_capturing_here(torch)
        if capturing is not None:
            capturing._retain_pool(pool, device)
        entered.append(pool)
        try:
            with original(pool, device) as value:
                yield value
        finally:
            entered.pop()

    functools.update_wrapper(use_mem_pool, original)
    _USE_MEM_POOL.update(torch=original, engine=use_mem_pool)
    mem.use_mem_pool = use_mem_pool
    if getattr(torch.cuda, "use_mem_pool", None) is original:
        torch.cuda.use_mem_pool = use_mem_pool
    return key


def _guard_mempool_class(torch: Any) -> None:
    """Give ``torch.cuda.MemPool`` the engine's finalizer (:func:`_park_mempool`), once."""
    cls = getattr(torch.cuda, "MemPool", None)
    if cls is None or not isinstance(cls, type) or _MEMPOOL_DEL.get("cls") is cls:
        return
    _unguard_mempool_class()  # another torch's class (a test's fake): give it back first
    had, own = "__del__" in cls.__dict__, cls.__dict__.get("__del__")
    try:
        setattr(cls, "__del__", _park_mempool)  # noqa: B010 (a class attribute mypy cannot see)
    except (TypeError, AttributeError):
        pass  # a class that takes no attribute: its pools are destroyed as on torch alone
    else:
        _MEMPOOL_DEL.update(cls=cls, had=had, **{"del": own})


def _unguard_mempool_class() -> None:
    """Give the MemPool class its own ``__del__`` back (or none, as torch 2.11's has)."""
    if "cls" not in _MEMPOOL_DEL:
        return
    cls, had, original_del = _MEMPOOL_DEL.pop("cls"), _MEMPOOL_DEL.pop("had"), _MEMPOOL_DEL.pop("del")
    if had:
        setattr(cls, "__del__", original_del)  # noqa: B010
    else:
        delattr(cls, "__del__")


def _unwatch_pools_entered(torch: Any, key: tuple[int, int]) -> None:
    """The capture registered under ``key`` is over; the last one puts torch's ``use_mem_pool`` back."""
    _CAPTURING.pop(key, None)
    if _CAPTURING:
        return
    if not _ROUTE_STATE["unsure"]:
        # No capture failed since routing was last known clean: torch ended every routing the
        # engine's captures opened, and MemPools may die with torch's own destructor again.
        _ROUTE_SUSPECTS.clear()
        _unguard_mempool_class()
    if "torch" not in _USE_MEM_POOL:
        return
    original, stand_in = _USE_MEM_POOL.pop("torch"), _USE_MEM_POOL.pop("engine")
    mem = torch.cuda.memory
    if getattr(mem, "use_mem_pool", None) is stand_in:
        mem.use_mem_pool = original
    if getattr(torch.cuda, "use_mem_pool", None) is stand_in:
        torch.cuda.use_mem_pool = original


def _warn_nested(type_counts: dict[str, int]) -> None:
    for kind in NESTED_KINDS:
        count = type_counts.get(kind, 0)
        if count:
            warnings.warn(
                f"get_graph_data(): the graph has {count} {kind} node(s). Each is reported as one "
                f"top-level node of type {kind!r}: cudaGraphGetNodes does not descend into a {kind} "
                "body, so the work inside it is not listed (the ids that are listed stay valid).",
                UserWarning,
                stacklevel=3,
            )


def export_dot(path: str | Path, *, verbose: bool = True) -> Hook:
    """A capture-end hook that writes the driver's DOT of the graph to ``path`` (both keep_graph modes)."""

    def _hook(g: Graph) -> None:
        g.debug_dump(str(path), verbose=verbose)

    return _hook


def export_graph_data(path: str | Path) -> Hook:
    """A post-instantiate hook that writes ``get_graph_data()`` to ``path`` at each (re-)instantiation.

    What is written follows the name. ``.json`` or ``.json.gz``: JSON, the format every cgtool command
    reads. Any other name: what PyTorch's hook of this name writes, a pickle of the same plain dict
    (ints, strings, lists, None), so code written for PyTorch (``pickle.load`` of the file) keeps
    working on the engine. cgtool writes that pickle for the drop-in only and never reads one (its
    readers refuse a file that is not JSON). Gzip for a name ending in ``.gz``, in both forms. The
    file is overwritten at each instantiation: each exec graph replaces the export of the last.
    """

    def _hook(g: Graph) -> None:
        from cgtool.artifacts.jsonio import atomic_write_bytes, write_json

        data = g.get_graph_data()
        if is_json_name(path):
            write_json(path, data, force=True)
        else:
            atomic_write_bytes(path, pickle.dumps(data, protocol=pickle.DEFAULT_PROTOCOL), force=True)

    return _hook


def is_json_name(path: str | Path) -> bool:
    """Whether :func:`export_graph_data` writes JSON to ``path`` (``.json``, ``.json.gz``)."""
    name = Path(path).name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


_DOT_FLAG_NAMES = {
    "verbose": "cudaGraphDebugDotFlagsVerbose",
    "kernel": "cudaGraphDebugDotFlagsKernelNodeParams",
    "memcpy": "cudaGraphDebugDotFlagsMemcpyNodeParams",
    "memset": "cudaGraphDebugDotFlagsMemsetNodeParams",
    "host": "cudaGraphDebugDotFlagsHostNodeParams",
    "event": "cudaGraphDebugDotFlagsEventNodeParams",
    "attributes": "cudaGraphDebugDotFlagsKernelNodeAttributes",
    "handles": "cudaGraphDebugDotFlagsHandles",
    "conditional": "cudaGraphDebugDotFlagsConditionalNodeParams",
}


def driver_dot_flags(spec: str) -> int:
    """cudaGraphDebugDotFlags from a comma list of short names (see ``cgtool dot --help``)."""
    rt, _ = require_bindings("cgtool dot --driver")
    F = rt.cudaGraphDebugDotFlags
    out = 0
    for name in (x.strip() for x in spec.split(",") if x.strip()):
        attr = _DOT_FLAG_NAMES.get(name)
        if attr is None or not hasattr(F, attr):
            raise UsageError(f"Unknown --driver-flags name {name!r}; choose from {', '.join(_DOT_FLAG_NAMES)}.")
        out |= int(getattr(F, attr))
    return out


_SIDE: dict[int, Any] = {}


def _side_stream(torch: Any) -> Any:
    dev = torch.cuda.current_device()
    if dev not in _SIDE:
        _SIDE[dev] = torch.cuda.Stream()
    return _SIDE[dev]


class graph:
    """Context manager that captures into ``cuda_graph`` (a :class:`Graph`), like ``torch.cuda.graph``.

    ``pool`` is a pool token or a ``torch.cuda.MemPool``. When the body raises, the capture is
    ended, the body's exception propagates and the graph must be ``reset()`` before the next capture.
    """

    def __init__(
        self,
        cuda_graph: Graph,
        pool: Any = None,
        stream: Any = None,
        capture_error_mode: str = "global",
        check_input_liveness: bool = False,
    ) -> None:
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.stream = stream
        self.mode = capture_error_mode
        self.liveness = check_input_liveness

    def __enter__(self) -> Graph:
        torch = self.cuda_graph._torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self._ctx = torch.cuda.stream(self.stream if self.stream is not None else _side_stream(torch))
        self._ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, self.mode, self.liveness)
        except BaseException as e:
            self._ctx.__exit__(type(e), e, e.__traceback__)
            raise
        return self.cuda_graph

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abort_capture()
        finally:
            self._ctx.__exit__(exc_type, exc, tb)


def graph_pool_handle() -> Any:
    """A memory-pool token to share between captures (torch's own)."""
    torch = require_cuda("graph_pool_handle")
    return torch_originals(torch)["graph_pool_handle"]()


def is_current_stream_capturing() -> bool:
    """True while CUDA work on the current stream is being captured."""
    torch = require_cuda("is_current_stream_capturing")
    return bool(torch.cuda.is_current_stream_capturing())


def make_graphed_callables(
    callables: Any,
    sample_args: Any,
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Any = None,
    capture_error_mode: str = "global",
    check_input_liveness: bool = False,
    *,
    graphs_out: list[tuple[str, Graph]] | None = None,
) -> Any:
    """torch's ``make_graphed_callables``, its graphs being engine graphs you can inspect.

    Returns what torch returns. When ``graphs_out`` is a list, ``(label, Graph)`` pairs are
    appended to it — ``("fwd0", g), ("bwd0", g), ...`` in the order torch captures them — each
    with a live template, so ``get_graph_data()`` and ``debug_dump()`` work on them.
    ``pool`` may be a ``torch.cuda.MemPool``; ``check_input_liveness`` applies to every capture.
    """
    torch = require_cuda("make_graphed_callables")
    import torch.cuda.graphs as tg

    made: list[Graph] = []
    mode = "global" if capture_error_mode == "default" else capture_error_mode

    def _EngineGraph(keep_graph: bool = False) -> Graph:  # stands in for the CUDAGraph class
        g = Graph(keep_graph=True, capture_error_mode=mode)
        g._default_liveness = check_input_liveness
        made.append(g)
        return g

    kwargs: dict[str, Any] = {"num_warmup_iters": num_warmup_iters, "allow_unused_input": allow_unused_input}
    if pool is not None:
        if _is_mem_pool(torch, pool):
            kwargs["pool"] = pool.id
        else:
            kwargs["pool"] = pool
    # Remember torch's own classes before patching: the engine's graphs wrap torch's CUDAGraph, and
    # recording the patched name as "torch's" would make every engine graph build another one.
    originals = torch_originals(torch)
    # torch.cuda.graphs refers to CUDAGraph both as a module global and as torch.cuda.CUDAGraph.
    saved = (tg.CUDAGraph, torch.cuda.CUDAGraph)
    setattr(tg, "CUDAGraph", _EngineGraph)
    setattr(torch.cuda, "CUDAGraph", _EngineGraph)
    try:
        result = originals["make_graphed_callables"](callables, sample_args, **kwargs)
    finally:
        setattr(tg, "CUDAGraph", saved[0])
        setattr(torch.cuda, "CUDAGraph", saved[1])
    if pool is not None and _is_mem_pool(torch, pool):
        for g in made:
            g._mempools.append(pool)  # as torch does: the graphs keep the MemPool alive
    if graphs_out is not None:
        # torch makes all forward graphs first, then all backward graphs.
        half = len(made) // 2
        for i, g in enumerate(made):
            label = f"fwd{i}" if i < half else f"bwd{i - half}"
            # keep_graph=True graphs are instantiated lazily by their first replay; do it now
            # so that the exec graph (and its ids) is the one every later replay uses.
            if not g._instantiated:
                g.instantiate()
            graphs_out.append((label, g))
    return result
