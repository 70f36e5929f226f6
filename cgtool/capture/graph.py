"""``Graph``: the API of the newest ``torch.cuda.CUDAGraph`` docs on the torch users have today.

torch >= 2.8 provides capture, replay, ``keep_graph``, ``instantiate``, ``pool``,
``raw_cuda_graph(_exec)``; this class adds what older builds lack, on cuda.bindings:

=========================== ==========================================================================
method                      what differs by torch version
=========================== ==========================================================================
capture_begin               ``check_input_liveness`` is passed through where torch has it
                            (2.13+); on older torch it is refused with a clear message unless False.
capture_end_pre/post        not in any released torch: built here. The wrapped torch graph always
                            keeps its template (``keep_graph=True`` underneath) so capture-end hooks
                            and ``get_graph_data`` can read it; with ``keep_graph=False`` the
                            template is released to the user's view after ``capture_end_post``
                            (``raw_cuda_graph`` then raises), but its host memory stays with torch.
register_*_hook             not in any released torch: built here (RemovableHandle, in order).
instantiate                 torch's; post-instantiate hooks fire after each (re-)instantiation.
debug_dump(path, verbose)   ``cudaGraphDebugDotPrint`` called directly (torch's needs debug mode).
get_graph_data              torch 2.13 has it but needs a 13.1 driver; here ids come from the driver
                            where it can, else from CUPTI (see ``cgtool.capture.export``).
pools                       torch tracks one pool per graph; ``pools()`` lists it and any pool
                            passed at capture.
=========================== ==========================================================================

Use as ``with torch.cuda.stream(s), Graph() as g:`` or ``with s, g:`` in the style of
``torch.accelerator.Graph``, or through :func:`graph` like ``torch.cuda.graph``.
"""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict
from typing import Any, Callable

from cgtool.capture._deps import check, require_bindings, require_cuda
from cgtool.errors import CaptureError, UsageError

Hook = Callable[["Graph"], None]


class RemovableHandle:
    """Returned by ``register_*_hook``: ``remove()`` deregisters the hook."""

    _next_id = 0

    def __init__(self, hooks: "OrderedDict[int, Hook]") -> None:
        self._hooks = hooks
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *a: object) -> None:
        self.remove()


def _capture_begin_accepts(torch_graph: Any, name: str) -> bool:
    try:
        return name in inspect.signature(torch_graph.capture_begin).parameters
    except (TypeError, ValueError):
        return False


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
        self._setup(torch, torch.cuda.CUDAGraph(keep_graph=True), keep_graph)
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
        self._ctx_stream = None
        self._capture_end_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._post_instantiate_hooks: OrderedDict[int, Hook] = OrderedDict()
        self._pools: list[Any] = []
        self._state = "new"  # new -> capturing -> captured -> (instantiated)
        self._template_live = False
        self._instantiated = False
        self._debug = keep_graph
        self.capture_s: float | None = None
        self.instantiate_s: float | None = None
        self.instantiations = 0

    @classmethod
    def _wrap(cls, torch_graph: Any, *, keep_graph: bool = True) -> "Graph":
        """Wrap a torch CUDAGraph already captured with keep_graph=True (make_graphed_callables)."""
        self = cls.__new__(cls)
        self._setup(require_cuda("Graph capture"), torch_graph, keep_graph)
        self._state = "captured"
        self._template_live = True
        return self

    # ------------------------------------------------------------------ capture
    def capture_begin(
        self, pool: Any = None, capture_error_mode: str | None = None, check_input_liveness: bool = False
    ) -> None:
        """Begin capturing CUDA work on the current stream (not the default stream)."""
        if self._state == "capturing":
            raise UsageError("capture_begin() called twice: this graph is already capturing.")
        if self._state != "new":
            raise UsageError("This graph already holds a capture; call reset() before capturing again.")
        torch = self._torch
        if torch.cuda.current_stream() == torch.cuda.default_stream():
            raise CaptureError(
                "Cannot capture on the default (legacy) stream. Capture on a side stream: "
                "`with torch.cuda.stream(torch.cuda.Stream()):` or use cgtool.capture.graph.graph(...)."
            )
        pool = pool if pool is not None else self._default_pool
        mode = capture_error_mode or self._default_mode
        kwargs: dict[str, Any] = {"capture_error_mode": mode}
        if check_input_liveness:
            if not _capture_begin_accepts(self._g, "check_input_liveness"):
                raise UsageError(
                    f"check_input_liveness needs torch 2.13 or newer (this is {torch.__version__}). "
                    "Drop the option, or upgrade torch."
                )
            kwargs["check_input_liveness"] = True
        if pool is not None:
            self._pools.append(pool)
        self._state = "capturing"
        self._t_begin = time.perf_counter()
        try:
            if pool is None:
                self._g.capture_begin(**kwargs)
            else:
                self._g.capture_begin(pool, **kwargs)
        except Exception:
            self._state = "new"
            raise

    def capture_end_pre(self) -> None:
        """End capture but leave the cudaGraph_t live; capture-end hooks fire here, in order."""
        if self._state != "capturing":
            raise UsageError("capture_end_pre() without capture_begin().")
        self._g.capture_end()  # keep_graph=True underneath: ends capture, does not instantiate
        self.capture_s = time.perf_counter() - self._t_begin
        self._state = "captured"
        self._template_live = True
        for hook in list(self._capture_end_hooks.values()):
            hook(self)

    def capture_end_post(self) -> None:
        """Finalize: with keep_graph=False the template is released (the graph must be instantiated)."""
        if self._state != "captured":
            raise UsageError("capture_end_post() must follow capture_end_pre().")
        if not self.keep_graph and not self._debug:
            if not self._instantiated:
                raise UsageError(
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

    # ------------------------------------------------------------------ instantiate / replay
    def instantiate(self) -> None:
        """(Re-)instantiate the exec graph; post-instantiate hooks fire after each one."""
        if self._state == "new" or self._state == "capturing":
            raise UsageError("instantiate() needs a finished capture (call capture_end first).")
        if self._instantiated and not self._template_live:
            raise UsageError(
                "Cannot re-instantiate: the template was released (keep_graph=False). "
                "Capture with keep_graph=True to instantiate again."
            )
        t0 = time.perf_counter()
        self._g.instantiate()
        self.instantiate_s = time.perf_counter() - t0
        self._instantiated = True
        self.instantiations += 1
        for hook in list(self._post_instantiate_hooks.values()):
            hook(self)

    def replay(self) -> None:
        """Replay the captured work (instantiating first if needed, as torch does)."""
        if not self._instantiated:
            self.instantiate()
        self._g.replay()

    def reset(self) -> None:
        """Delete the graph held by this instance; it can capture again afterwards."""
        self._g.reset()
        self._g = self._torch.cuda.CUDAGraph(keep_graph=True)
        self._state = "new"
        self._template_live = False
        self._instantiated = False

    # ------------------------------------------------------------------ pools and raw handles
    def pool(self) -> Any:
        """An opaque token of this graph's memory pool, to share it with another capture."""
        return self._g.pool()

    def pools(self) -> list[Any]:
        """Tokens of every memory pool this graph retains (its own, plus any passed at capture)."""
        own = self._g.pool()
        return [own] + [p for p in self._pools if p != own]

    def raw_cuda_graph(self) -> int:
        """The cudaGraph_t (template); live with keep_graph=True or inside a capture-end hook."""
        if not self._template_live:
            raise UsageError(
                "The graph template is not live: capture with keep_graph=True (or call "
                "enable_debug_mode() before capture), or read it from a capture-end hook."
            )
        return int(self._g.raw_cuda_graph())

    def raw_cuda_graph_exec(self) -> int:
        """The cudaGraphExec_t; instantiate() (or capture_end with keep_graph=False) first."""
        if not self._instantiated:
            raise UsageError("The graph is not instantiated yet: call instantiate() first.")
        return int(self._g.raw_cuda_graph_exec())

    # ------------------------------------------------------------------ hooks
    def register_capture_end_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` after capture completes, before finalization; the template is live."""
        h = RemovableHandle(self._capture_end_hooks)
        self._capture_end_hooks[h.id] = hook
        return h

    def register_post_instantiate_hook(self, hook: Hook) -> RemovableHandle:
        """``hook(graph)`` after each instantiation (a re-instantiation makes a new exec graph)."""
        h = RemovableHandle(self._post_instantiate_hooks)
        self._post_instantiate_hooks[h.id] = hook
        return h

    # ------------------------------------------------------------------ inspection
    def enable_debug_mode(self) -> None:
        """Retain the template after capture (same as keep_graph=True)."""
        self._debug = True

    def debug_dump(self, debug_path: str, *, verbose: bool = True, flags: int | None = None) -> None:
        """Write the driver's Graphviz DOT of the template to ``debug_path``."""
        rt, _ = require_bindings("debug_dump")
        raw = self.raw_cuda_graph()
        if flags is None:
            F = rt.cudaGraphDebugDotFlags
            flags = int(F.cudaGraphDebugDotFlagsVerbose) if verbose else 0
        check(
            rt.cudaGraphDebugDotPrint(rt.cudaGraph_t(init_value=raw), str(debug_path).encode(), flags),
            "cudaGraphDebugDotPrint",
        )

    def get_graph_data(self, *, with_meta: bool = False) -> dict[str, Any]:
        """The graph's topology in get_graph_data()'s schema (``with_meta`` adds cgtool's block)."""
        from cgtool.capture.export import graph_data

        data = graph_data(self.raw_cuda_graph(), self.raw_cuda_graph_exec(), with_meta=with_meta)
        if with_meta:
            data["cgtool"]["timings"].update(
                {"capture_s": self.capture_s, "instantiate_s": self.instantiate_s}
            )
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
            elif self._state == "capturing":
                try:
                    self._g.capture_end()
                except Exception:
                    pass  # the original error matters more
                self._state = "new"
        finally:
            if self._stream_ctx is not None:
                self._stream_ctx.__exit__(exc_type, exc, tb)


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
    """Context manager that captures into ``cuda_graph`` (a :class:`Graph`), like ``torch.cuda.graph``."""

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
        self.cuda_graph.capture_begin(self.pool, self.mode, self.liveness)
        return self.cuda_graph

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                try:
                    self.cuda_graph._g.capture_end()
                except Exception:
                    pass
                self.cuda_graph._state = "new"
        finally:
            self._ctx.__exit__(exc_type, exc, tb)


def graph_pool_handle() -> Any:
    """A memory-pool token to share between captures (torch's own)."""
    torch = require_cuda("graph_pool_handle")
    return torch.cuda.graph_pool_handle()


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
    *,
    graphs_out: list[tuple[str, Graph]] | None = None,
) -> Any:
    """torch's ``make_graphed_callables``, with its forward and backward graphs inspectable.

    Returns what torch returns. When ``graphs_out`` is a list, ``(label, Graph)`` pairs are
    appended to it — ``("fwd0", g), ("bwd0", g), ...`` in the order torch captures them — each
    with a live template, so ``get_graph_data()`` and ``debug_dump()`` work on them.
    """
    torch = require_cuda("make_graphed_callables")
    import torch.cuda.graphs as tg

    made: list[Any] = []
    Orig = tg.CUDAGraph

    def _KeepGraph(keep_graph: bool = False) -> Any:  # stands in for the CUDAGraph class
        g = Orig(keep_graph=True)
        made.append(g)
        return g

    # torch.cuda.graphs refers to CUDAGraph both as a module global and as torch.cuda.CUDAGraph.
    setattr(tg, "CUDAGraph", _KeepGraph)
    setattr(torch.cuda, "CUDAGraph", _KeepGraph)
    try:
        kwargs: dict[str, Any] = {"num_warmup_iters": num_warmup_iters, "allow_unused_input": allow_unused_input}
        if pool is not None:
            kwargs["pool"] = pool
        result = torch.cuda.make_graphed_callables(callables, sample_args, **kwargs)
    finally:
        setattr(tg, "CUDAGraph", Orig)
        setattr(torch.cuda, "CUDAGraph", Orig)
    if graphs_out is not None:
        # torch makes all forward graphs first, then all backward graphs.
        half = len(made) // 2
        for i, g in enumerate(made):
            label = f"fwd{i}" if i < half else f"bwd{i - half}"
            w = Graph._wrap(g)
            # keep_graph=True graphs are instantiated lazily by their first replay; do it now
            # so that the exec graph (and its ids) is the one every later replay uses.
            w.instantiate()
            graphs_out.append((label, w))
    return result
