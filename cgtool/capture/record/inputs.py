"""Stale and dead graph inputs under ``cgtool record``: the graph that reads memory its program freed.

A CUDA graph bakes in the address of every buffer its kernels, copies and memsets use. When the
program frees one of those buffers after the capture (it rebinds the input, ``x = next_batch()``, where
it meant ``x.copy_(next_batch())``; a temporary dies when the capturing helper returns), every later
replay reads whatever the caching allocator puts there next. Nothing fails.

What :class:`InputWatch` does, in every recorded process that imports torch, with ``--check-inputs N``
(on by default at N = 100; ``--check-inputs 0`` makes none: docs/performance.md has what they cost;
a process that never imports torch has nothing watched and its index says nothing of them):

* **Allocation stacks.** Once torch initialises CUDA (``torch.cuda._lazy_init``, wrapped once), the
  allocator's history is turned on (``torch.cuda.memory._record_memory_history``: every allocation
  and free with its Python stack, into a ring of :data:`HISTORY_ENTRIES` events, emptied after each
  read so that a snapshot holds only the events since the last one). That function is
  wrapped too: the program's own call wins (before CUDA starts, the history is left as it set it and
  nothing is checked; after, the events so far are read, then the checks stop and the graphs
  replayed after it say so: :meth:`InputWatch._program_history`).
* **At each graph's instantiation** (the graph-exec callback, on the capturing thread, while the
  template graph is alive): every kernel node's parameters are scanned for device pointers
  (``cuFuncGetParamInfo`` gives each parameter's size; every 8-byte word of a parameter is a pointer
  candidate, so pointers inside structs count), memset and memcpy nodes give their addresses, and
  each pointer is mapped to a block of the allocator's snapshot (:func:`allocator_snapshot`: torch's,
  without the import of ``torch._inductor`` its symbolizer would make). Blocks of a private pool (the graph's
  own memory, cudagraph trees' managed outputs) are not inputs; active blocks of the default pool are
  the graph's *external* blocks, each with its size, its allocation site, and a name and shape where
  a local of the capturing code holds the tensor.
* **At replays** (``torch.cuda.CUDAGraph.replay`` is wrapped: a counter and a clock read per
  replay), a check reads the allocator's new history events before a graph's first two replays and
  before every ``every``-th replay of the process (``--check-inputs N``), and once at the end: a free of
  an external block, and an allocation that later overlaps it, are kept with their stacks and times.

A graph *reads freed memory* when one of its external blocks was freed and the graph was replayed
after the free; the replays concerned are bounded by the checks around the free (exact when a check
ran between the last replay before the free and the first after it). Frees after a graph's last
replay (teardown) are not findings. What is sampled: the checks, never the events (the history keeps
every allocation and free; when its ring overflows between two checks, the block's state in the
snapshot still tells a freed or reused block, without the stack that freed it). A tensor kept alive
but never updated (a rebind that leaves the old tensor referenced) is found from its contents: when
the line that allocated an external block makes new tensors of its size after the capture, the block
is read back around sampled replays, and one nothing writes between them is reported as ``stale``.

Graphs launched other than through ``torch.cuda.CUDAGraph.replay`` (a raw ``cudaGraphLaunch``) are
not checked: their entry says so.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import gc
import linecache
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from cgtool.capture.record import attribution
from cgtool.capture.snapshot import allocator_snapshot

#: Allocator history ring size (events): enough for the allocations and frees between two checks of
#: a serving loop; a ring that overflowed is noted (``history_lost``).
HISTORY_ENTRIES = 20_000
#: External blocks listed per graph in the index (the findings name theirs whatever the count).
MAX_LISTED = 64
#: A block read back to compare its contents between two replays is at most this big (a suspect
#: bigger than this is left unknown: ``too_big``).
CONTENT_MAX_BYTES = 64 << 20
#: Sampled intervals a block must be found unchanged in (and written in none) to be called stale.
MIN_UNCHANGED = 2
#: The share of the program's time the periodic checks may take (each check is followed by a pause
#: of its own duration / CHECK_SHARE before the next periodic one).
CHECK_SHARE = 0.02
#: Kernel parameters read per function at most (a kernel's parameters fit in 32 KiB).
MAX_PARAMS = 1024
#: Seconds the pointer scan of one graph may take inside its instantiation; a graph whose scan
#: stops there is checked for the blocks found so far, and its entry says so (``scan_complete``).
SCAN_BUDGET_S = 0.25
#: The scans at capture stop (later graphs are not checked, and say so) once they have taken this
#: many seconds in all and more than CAPTURE_SHARE of the run so far.
CAPTURE_BUDGET_S = 2.0
CAPTURE_SHARE = 0.05
#: A scan whose allocator snapshot took longer than this takes a second one right away, once a
#: process, and records its time (``phases_us.snapshot_again``): a one-time cost of the first call
#: shows as a fast second one, a cost of the allocator's state as a slow one.
SLOW_SNAPSHOT_S = 0.5
#: User frames kept per allocation or free site.
STACK_FRAMES = 4
#: Frames examined for the names of the capture's tensors, and locals per container.
NAME_FRAMES = 12
NAME_ITEMS = 64

_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int64": "i64",
           "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off while a snapshot is read: the snapshot makes a Python object per event and
    frame, which set off full collections over the program's whole heap (docs/performance.md,
    `cgtool record`: what they cost a graph). The objects hold no cycles; they go by reference
    counting when the read ends."""
    was = gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ------------------------------------------------------------------------------ kernel pointers
class _Driver:
    """The few libcuda entry points the scan needs (ctypes; loaded once)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self.param_info: Any = getattr(lib, "cuFuncGetParamInfo", None)  # CUDA 12.4+
        if self.param_info is not None:
            self.param_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
            self.param_info.restype = ctypes.c_int
        # a kernel node may name its kernel by CUkernel (a library's, cuLibraryLoad*) without a CUfunction
        self.kernel_info: Any = getattr(lib, "cuKernelGetParamInfo", None)  # CUDA 12.4+
        if self.kernel_info is not None:
            self.kernel_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
            self.kernel_info.restype = ctypes.c_int
        self.memset = lib.cuGraphMemsetNodeGetParams
        self.memset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.memset.restype = ctypes.c_int
        self.memcpy = lib.cuGraphMemcpyNodeGetParams
        self.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.memcpy.restype = ctypes.c_int
        self.copy = lib.cuMemcpyDtoH_v2
        self.copy.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.copy.restype = ctypes.c_int
        self.sizes: dict[int, list[tuple[int, int]] | None] = {}  # function -> [(offset, size)]
        self.info_s = 0.0  # seconds in cuFuncGetParamInfo (once per function)

    def params_of(self, func: int, kernel: bool = False) -> list[tuple[int, int]] | None:
        """(offset, size) of each parameter of a CUfunction (or, ``kernel``, of a CUkernel)."""
        got = self.sizes.get(func, False)
        if got is not False:
            return got  # type: ignore[return-value]
        t0 = time.perf_counter()
        out: list[tuple[int, int]] | None = []
        info = self.kernel_info if kernel else self.param_info
        if info is None:
            out = None
        else:
            off, size = ctypes.c_size_t(), ctypes.c_size_t()
            end = 0
            for i in range(MAX_PARAMS):
                # past the last parameter the call fails; a zero size or an offset going back is taken
                # as the end too (never read past what the driver describes)
                if info(func, i, ctypes.byref(off), ctypes.byref(size)) != 0:
                    break
                if size.value == 0 or off.value < end:
                    break
                end = off.value + size.value
                out.append((off.value, size.value))  # type: ignore[union-attr]
        self.sizes[func] = out
        self.info_s += time.perf_counter() - t0
        return out


_DRV: Any = None


def _driver() -> _Driver:
    global _DRV
    if _DRV is None:
        _DRV = _Driver()
    return _DRV  # type: ignore[no-any-return]


_U64 = ctypes.c_uint64
_PTRS = ctypes.POINTER(ctypes.c_void_p)


def _words(addr: int, size: int) -> list[int]:
    """The 8-byte words of ``size`` bytes at host address ``addr`` (a parameter's value)."""
    if size < 8:
        return []
    if size == 8:
        return [_U64.from_address(addr).value]
    n = size // 8
    return list((_U64 * n).from_address(addr))


def graph_pointers(raw: Any, lo: int, hi: int) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """(node index, value) of every word in ``[lo, hi)`` among the graph's kernel parameters and
    memcpy/memset addresses, and counts of what could not be read. ``raw`` is graphread's read
    (QuickRead or RawGraph), taken while the template graph is alive."""
    import numpy as np

    from cgtool.capture import graphread

    drv = _driver()
    handles: list[int] = raw.handles
    n = len(handles)
    stats = {"kernels": 0, "kernels_unread": 0, "copies": 0, "complete": 1}
    out: list[tuple[int, int]] = []
    deadline = time.perf_counter() + SCAN_BUDGET_S
    info0 = drv.info_s
    if n == 0:
        return out, stats
    if isinstance(raw, graphread.QuickRead):
        params, refused, types = raw.c[3], set(raw.c[4]), raw.types
    else:
        params, refused, types = raw.params, set(raw.refused), raw.other_types
    dt = np.dtype({"names": ["func", "kp", "extra", "kern"], "formats": ["<u8", "<u8", "<u8", "<u8"],
                   "offsets": [0, 40, 48, 56], "itemsize": 72})
    col = np.frombuffer(memoryview(params), dtype=dt, count=n)
    funcs, kps, extras, kerns = col["func"].tolist(), col["kp"].tolist(), col["extra"].tolist(), col["kern"].tolist()
    for i in range(n):
        if i in refused:
            continue
        if time.perf_counter() > deadline:
            stats["complete"], stats["stopped_at_node"] = 0, i  # the nodes from here on were not scanned
            break
        stats["kernels"] += 1
        func, kp, extra = funcs[i], kps[i], extras[i]
        words: list[int] = []
        if kp:
            layout = drv.params_of(func) if func else drv.params_of(kerns[i], kernel=True) if kerns[i] else None
            if layout is None:
                stats["kernels_unread"] += 1
                continue
            arr = ctypes.cast(kp, _PTRS)
            for k, (_, size) in enumerate(layout):
                p = arr[k]
                if p:
                    words.extend(_words(p, size))
        elif extra:
            words = _extra_words(extra)
        for w in words:
            if lo <= w < hi:
                out.append((i, w))
    names = graphread._NODE_TYPE_NAMES or {}
    for i, t in types.items():
        kind = names.get(t)
        if kind == "memset":
            buf = (ctypes.c_uint64 * 5)()
            if drv.memset(handles[i], ctypes.addressof(buf)) == 0:
                stats["copies"] += 1
                ws = [int(buf[0])]
            else:
                continue
        elif kind == "memcpy":
            buf8 = (ctypes.c_uint64 * 25)()
            if drv.memcpy(handles[i], ctypes.addressof(buf8)) == 0:
                stats["copies"] += 1
                ws = [int(buf8[6]), int(buf8[17])]  # srcDevice (byte 48), dstDevice (byte 136)
            else:
                continue
        else:
            continue
        out.extend((i, w) for w in ws if lo <= w < hi)
    stats["param_info_us"] = int((drv.info_s - info0) * 1e6)
    return out, stats


def _extra_words(extra: int) -> list[int]:
    """A launch's ``extra`` array: CU_LAUNCH_PARAM_BUFFER_POINTER (1) buf, _SIZE (2) &size, END (0)."""
    arr = ctypes.cast(extra, _PTRS)
    buf, size = 0, 0
    for k in range(0, 16, 2):
        key = arr[k] or 0
        if key == 0:
            break
        if key == 1:
            buf = arr[k + 1] or 0
        elif key == 2:
            sp = arr[k + 1]
            size = _U64.from_address(sp).value if sp else 0
    return _words(buf, size) if buf and size else []


# ------------------------------------------------------------------------------------ sites
def user_site(frames: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The innermost frame of the program's own code among an allocator event's frames (innermost
    first), with up to :data:`STACK_FRAMES` of the program's frames as ``stack``; None if none."""
    if not frames:
        return None
    mine = [f for f in frames if attribution.classify(str(f.get("filename", ""))) == "user"]
    if not mine:
        return None
    stack = []
    for f in mine[:STACK_FRAMES]:
        file, line = str(f.get("filename")), int(f.get("line", 0))
        stack.append({"file": file, "line": line, "function": f.get("name"),
                      "code": linecache.getline(file, line).strip() or None})
    top = dict(stack[0])
    top["stack"] = stack[1:]
    return top


def _frame_key(frames: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The innermost Python frame of an allocator event (any file): which line allocated it."""
    if not frames:
        return None
    f = frames[0]
    return str(f.get("filename", "")), int(f.get("line", 0))


def _shape_of(t: Any) -> tuple[list[int], str]:
    dt = str(t.dtype).replace("torch.", "")
    return [int(d) for d in t.shape], _DTYPES.get(dt, dt)


def capture_names(frame: Any, torch: Any) -> dict[int, dict[str, Any]]:
    """Storage address -> {name, shape, dtype} of the CUDA tensors the capturing code's locals hold:
    the program's frames on the stack (locals, one level into lists, tuples, dicts and plain
    objects' attributes; a module's parameters and buffers by path)."""
    Tensor, Module = torch.Tensor, torch.nn.Module
    out: dict[int, dict[str, Any]] = {}

    def put(name: str, t: Any) -> None:
        try:
            if not isinstance(t, Tensor) or not t.is_cuda:
                return
            ptr = int(t.untyped_storage().data_ptr())
            if ptr and ptr not in out:
                shape, dt = _shape_of(t)
                out[ptr] = {"name": name, "shape": shape, "dtype": dt}
        except Exception:
            pass

    f, seen = frame, 0
    while f is not None and seen < NAME_FRAMES:
        if attribution.classify(f.f_code.co_filename) == "user":
            seen += 1
            for k, v in list(f.f_locals.items())[:256]:
                if isinstance(v, Tensor):
                    put(k, v)
                elif isinstance(v, (list, tuple)):
                    for j, x in enumerate(v[:NAME_ITEMS]):
                        put(f"{k}[{j}]", x)
                elif isinstance(v, dict):
                    for j, (kk, x) in enumerate(v.items()):
                        if j >= NAME_ITEMS:
                            break
                        put(f"{k}[{kk!r}]", x)
                elif isinstance(v, Module):
                    try:
                        for j, (p, x) in enumerate(v.named_parameters()):
                            if j >= 4 * NAME_ITEMS:
                                break
                            put(f"{k}.{p}", x)
                        for p, x in v.named_buffers():
                            put(f"{k}.{p}", x)
                    except Exception:
                        pass
                elif not isinstance(v, type) and hasattr(v, "__dict__"):
                    try:
                        items = list(vars(v).items())[:NAME_ITEMS]
                    except TypeError:
                        continue
                    for kk, x in items:
                        put(f"{k}.{kk}", x)
        f = f.f_back
    return out


# ------------------------------------------------------------------------------------ state
@dataclass
class Block:
    """One external block a graph uses: the allocator's block at capture, and what became of it."""

    addr: int
    size: int
    requested: int | None
    allocated_at: dict[str, Any] | None
    name: dict[str, Any] | None
    nodes: int  # how many of the graph's nodes use it
    freed_us: float | None = None
    freed_at: dict[str, Any] | None = None
    freed_site_known: bool = True
    reused_us: float | None = None
    reused_by: dict[str, Any] | None = None  # {bytes, allocated_at}
    site_key: tuple[str, int] | None = None  # the innermost Python frame that allocated it (any file)
    reallocs: int = 0  # allocations of its size at that frame after the capture
    first_realloc_us: float | None = None
    # contents, sampled for a block whose site keeps allocating (a rebind suspect): its hash after a
    # sampled replay, and the intervals (replay k, k+1) it was found unchanged or written in
    hash_after: tuple[int, int] | None = None
    unchanged: list[tuple[int, int]] = field(default_factory=list)
    written: int = 0
    too_big: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"address": self.addr, "bytes": self.size, "requested_bytes": self.requested,
                             "allocated_at": self.allocated_at, "nodes": self.nodes}
        if self.reallocs:
            d.update(reallocs=self.reallocs, unchanged_intervals=len(self.unchanged), written_intervals=self.written,
                     contents_unknown=self.too_big)
        if self.name is not None:
            d.update(self.name)
        return d


@dataclass
class Watched:
    """One graph's external blocks and its replays as the wrapper counted them."""

    seq: int
    exec_handle: int
    device: int
    blocks: list[Block]
    pool_pointers: int
    free_pointers: int  # words pointing into free memory of the default pool at capture
    scan: dict[str, Any]
    scan_s: float
    captured_us: float
    replays: int = 0  # replays started through torch.cuda.CUDAGraph.replay
    replays_unwatched: int = 0  # of those, after the program set the allocator history itself
    last_replay_us: float | None = None
    #: (time µs, replays started before the check, replays started by the time the program's code
    #: runs again: one more for the graph whose replay follows the check at once, on its thread)
    checkpoints: list[tuple[float, int, int]] = field(default_factory=list)
    destroyed: bool = False
    suspects: list[Block] = field(default_factory=list)  # blocks whose contents are sampled
    hash_next: bool = False  # hash the suspects after the replay now starting


def _now_us() -> float:
    return time.time() * 1e6


class InputWatch:
    """Finds the graphs that read memory their program freed (module docstring)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.torch: Any = None
        self.by_exec: dict[int, Watched] = {}
        self.graphs: dict[int, Watched] = {}  # seq -> state
        self.blocks: dict[tuple[int, int], list[tuple[Watched, Block]]] = {}  # (device, addr) -> users
        self.lock = threading.RLock()
        self.history: str | None = None  # "on", or why not
        self.history_lost = False
        #: the program's own call to torch.cuda.memory._record_memory_history (its settings replace
        #: the ones the checks need): what it was and where, and when (None: no such call)
        self.history_changed: str | None = None
        self.history_changed_us: float | None = None
        self._record_history: Any = None  # torch's own _record_memory_history (the program's is wrapped)
        self.checks = 0
        self.check_s = 0.0
        self.capture_s = 0.0
        self.replays_total = 0
        self.unmatched_replays = 0
        self.errors: list[str] = []
        self._seen: dict[int, tuple[float, int]] = {}  # device -> (time_us of the last event read, count at it)
        self._installed = False
        self._open: list[tuple[Watched, Block]] = []  # freed blocks not yet reused
        self._by_size: dict[tuple[int, int], list[tuple[Watched, Block]]] = {}  # (device, bytes) -> blocks
        self.content_s = 0.0
        self.content_reads = 0
        self._quiet_until = 0.0
        self.t0 = time.perf_counter()
        self.skipped: dict[int, str] = {}  # seq -> why its blocks were not scanned
        #: whether a stream capture is open in any thread (the recorder's tracker knows): no check
        #: then, since a CUDA call from here could invalidate another thread's capture
        self.capturing: Any = lambda: False
        self.throttled_s = 0.0  # the longest pause the periodic checks took after one (CHECK_SHARE)
        self.snapshots = 0  # torch.cuda.memory._snapshot() calls made so far
        self._snapshot_retimed = False  # a slow snapshot was timed again (SLOW_SNAPSHOT_S)
        self.ring_cleared: bool | str | None = None  # emptied after each read (True), or why not (str)

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's graphs are not the child's."""
        self.by_exec, self.graphs, self.blocks, self._open, self._seen = {}, {}, {}, [], {}
        self._by_size, self.skipped, self.t0 = {}, {}, time.perf_counter()
        self.lock = threading.RLock()
        self.checks, self.check_s, self.capture_s, self.replays_total, self.unmatched_replays = 0, 0.0, 0.0, 0, 0
        self.snapshots, self._snapshot_retimed = 0, False
        self.errors = []

    # ---------------------------------------------------------------------- install
    def install(self) -> None:
        """Hook torch's CUDA initialisation and ``CUDAGraph.replay`` (now or when torch.cuda loads)."""
        if self.every <= 0:
            return
        attribution.on_import("torch.cuda", self._hook_cuda)

    def _hook_cuda(self, cuda: Any) -> None:
        torch = sys.modules.get("torch")
        if torch is None or self._installed:
            return
        self._installed = True
        self.torch = torch
        try:
            self._wrap_history(cuda.memory)
        except Exception as e:
            self._error("history wrapper", e)
        try:
            if cuda.is_initialized():
                self._enable_history()
            else:
                real = cuda._lazy_init

                def lazy_init(*a: Any, **k: Any) -> Any:
                    out = real(*a, **k)
                    if cuda.__dict__.get("_lazy_init") is lazy_init:
                        cuda._lazy_init = real  # once: torch calls it on every CUDA call
                    self._enable_history()
                    return out

                cuda._lazy_init = lazy_init
        except Exception as e:
            self.history = f"not hooked: {type(e).__name__}: {e}"
        try:
            self._wrap_replay(cuda.CUDAGraph)
        except Exception as e:
            self._error("replay wrapper", e)

    def _enable_history(self) -> None:
        if self.history == "on" or self.history_changed is not None:
            return  # on already, or the program set it itself: its settings stay (_program_history)
        try:
            record = self._record_history or self.torch.cuda.memory._record_memory_history
            record(enabled="all", context="all", stacks="python", max_entries=HISTORY_ENTRIES)
            self.history = "on"
        except Exception as e:
            self.history = f"torch's allocator history could not be turned on: {type(e).__name__}: {e}"

    def _wrap_history(self, memory: Any) -> None:
        """Wrap ``torch.cuda.memory._record_memory_history``: the program's own call is noted
        (:meth:`_program_history`); the checks turn the history on through the real one."""
        real = memory._record_memory_history
        if getattr(real, "_cgtool_inputs", False):
            return
        self._record_history = real
        watch = self

        def _record_memory_history(*a: Any, **k: Any) -> Any:
            try:
                watch._program_history(a, k, before=True)
            except Exception as e:
                watch._error("history wrapper", e)
            out = real(*a, **k)
            try:
                watch._program_history(a, k, before=False)
            except Exception as e:
                watch._error("history wrapper", e)
            return out

        _record_memory_history._cgtool_inputs = True  # type: ignore[attr-defined]
        _record_memory_history.__doc__ = real.__doc__
        memory._record_memory_history = _record_memory_history

    def _program_history(self, a: tuple[Any, ...], k: dict[str, Any], *, before: bool) -> None:
        """The program calls ``_record_memory_history`` itself. Its settings win (the program may
        dump or stop its own history); the checks read the events so far (``before``), then stop:
        under another ring, another context or none, their events would be incomplete, and a graph
        would look checked when it was not. Its index says which replays were checked and why not
        the rest; a call before CUDA started leaves the history as the program set it, unchecked."""
        if before:
            if self.history == "on" and self.history_changed is None and not self.capturing():
                self.check()  # the frees up to this call are found, with their lines
            return
        if self.history_changed is not None:
            return
        f = sys._getframe(2)  # the wrapper's caller (_program_history <- wrapper <- caller)
        args = ", ".join([repr(x) for x in a] + [f"{n}={v!r}" for n, v in k.items()])
        site = f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}"
        self.history_changed = f"torch.cuda.memory._record_memory_history({args}) at {site}"
        self.history_changed_us = _now_us()
        self.history = (f"the program set torch's allocator history itself ({self.history_changed}); "
                        "the input checks leave its settings as it chose and stop there")

    def _wrap_replay(self, CG: Any) -> None:
        real = CG.replay
        if getattr(real, "_cgtool_inputs", False):
            return
        watch = self

        def replay(g: Any) -> Any:
            try:
                st = watch._before(g)
            except Exception as e:  # never let a check break the program's replay
                watch._error("replay", e)
                st = None
            if st is None:
                return real(g)
            out = real(g)
            if st.hash_next:
                st.hash_next = False
                watch.contents_after(st, st.replays)
            return out

        replay._cgtool_inputs = True  # type: ignore[attr-defined]
        try:
            replay.__doc__, replay.__name__, replay.__qualname__ = real.__doc__, real.__name__, real.__qualname__
        except (AttributeError, TypeError):
            pass
        CG.replay = replay

    def _before(self, g: Any) -> Watched | None:
        """Before a replay: count it, check when it is sampled, compare kept-alive inputs' contents."""
        d = getattr(g, "__dict__", None)
        if d is None:
            return None
        if self.history_changed is not None:  # not checked from here (_program_history): counted
            kept_ = d.get("_cgtool_watch")
            if kept_ is not None:
                kept_.replays_unwatched += 1
            return None
        kept: Watched | None = d.get("_cgtool_watch")
        st = kept if kept is not None and not kept.destroyed else self._state_of(g, kept is not None)
        if st is None:
            return None
        n = st.replays
        self.replays_total += 1
        sampled = (n < 2 or (self.replays_total % self.every == 0 and time.perf_counter() >= self._quiet_until)) \
            and not self.capturing()
        if sampled:
            self.check(st)
        if st.suspects and not self.capturing():
            self.contents_before(st, n + 1)
            st.hash_next = sampled
        st.replays = n + 1
        st.last_replay_us = _now_us()
        return st

    def _state_of(self, g: Any, stale: bool = False) -> Watched | None:
        """The graph's state, kept on the object once found; None (asked again) while unknown.
        ``stale``: the kept one's exec was destroyed (the graph was reset and captured again)."""
        if stale:
            g.__dict__.pop("_cgtool_watch", None)
            g.__dict__.pop("_cgtool_exec", None)
        h = g.__dict__.get("_cgtool_exec")
        if h is None:
            try:
                h = g.__dict__["_cgtool_exec"] = int(g.raw_cuda_graph_exec())
            except Exception:
                h = g.__dict__["_cgtool_exec"] = 0
        st = self.by_exec.get(h) if h else None
        if st is None:
            self.unmatched_replays += 1
            return None
        g.__dict__["_cgtool_watch"] = st
        return st

    def _error(self, what: str, e: BaseException) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{what}: {type(e).__name__}: {e}")

    # ---------------------------------------------------------------------- capture
    def on_graph(self, seq: int, exec_handle: int, raw: Any, pool: list[int] | None, device: int | None,
                 frame: Any) -> None:
        """In the graph-exec callback: the graph's external blocks (the template is alive now)."""
        torch = self.torch
        if torch is None or self.every <= 0 or device is None or self.history != "on":
            return
        t0 = time.perf_counter()
        if self.capture_s > max(CAPTURE_BUDGET_S, CAPTURE_SHARE * (t0 - self.t0)):
            self.skipped[seq] = (f"not scanned: the scans at capture took {self.capture_s:.2f} s already, "
                                 f"their bound (CAPTURE_BUDGET_S, CAPTURE_SHARE of the run)")
            return
        try:
            with _gc_paused():
                self._scan(seq, exec_handle, raw, device, frame, t0)
        except Exception as e:
            self._error("capture", e)
        finally:
            self.capture_s += time.perf_counter() - t0

    def _scan(self, seq: int, exec_handle: int, raw: Any, device: int, frame: Any, t0: float) -> None:
        torch = self.torch
        first = self.snapshots == 0
        snap = allocator_snapshot(torch)
        self.snapshots += 1
        t_snap = time.perf_counter()
        snap_us = int((t_snap - t0) * 1e6)
        again_us = None
        if t_snap - t0 > SLOW_SNAPSHOT_S and not self._snapshot_retimed:
            self._snapshot_retimed = True
            snap = allocator_snapshot(torch)
            self.snapshots += 1
            t_again = time.perf_counter()
            again_us = int((t_again - t_snap) * 1e6)
            t_snap = t_again
        self._read_events(snap, device, capture=True)
        with self.lock:  # the other devices' events are read now: the ring is emptied below
            for d in {st.device for st in self.graphs.values() if not st.destroyed} - {device}:
                self._read_events(snap, d)
        self._clear_ring()
        starts, ends, segs = [], [], []
        for s in snap.get("segments", []):
            if int(s.get("device", -1)) != device:
                continue
            a = int(s["address"])
            starts.append(a)
            ends.append(a + int(s["total_size"]))
            segs.append(s)
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts = [starts[i] for i in order]
        ends = [ends[i] for i in order]
        segs = [segs[i] for i in order]
        if not starts:
            return
        t_ev = time.perf_counter()
        pointers, scan = graph_pointers(raw, min(starts), max(ends))
        t_ptr = time.perf_counter()
        names = None
        t_names = 0.0
        found: dict[int, Block] = {}
        users: dict[int, set[int]] = {}
        pool_ptrs = free_ptrs = 0
        for node, w in pointers:
            k = bisect.bisect_right(starts, w) - 1
            if k < 0 or w >= ends[k]:
                continue
            seg = segs[k]
            if tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0):
                pool_ptrs += 1
                continue
            addr = starts[k]
            blk = None
            for b in seg.get("blocks", []):
                size = int(b["size"])
                if addr <= w < addr + size:
                    blk = (addr, size, b)
                    break
                addr += size
            if blk is None:
                continue
            a, size, b = blk
            if b.get("state") != "active_allocated":
                free_ptrs += 1
                continue
            if a not in found:
                if names is None:
                    tn = time.perf_counter()
                    names = capture_names(frame, torch)
                    t_names = time.perf_counter() - tn
                frames = b.get("frames") or []
                found[a] = Block(a, size, b.get("requested_size"), user_site(frames), names.get(a), 0,
                                 site_key=_frame_key(frames))
            users.setdefault(a, set()).add(node)
        for a, blk_ in found.items():
            blk_.nodes = len(users[a])
        st = Watched(seq, exec_handle, device, sorted(found.values(), key=lambda b: b.addr), pool_ptrs,
                     free_ptrs, scan, 0.0, _now_us())
        st.checkpoints.append((st.captured_us, 0, 0))
        with self.lock:
            old = self.by_exec.get(exec_handle)
            if old is not None:
                old.destroyed = True
            self.by_exec[exec_handle] = st
            self.graphs[seq] = st
            for b in st.blocks:
                self.blocks.setdefault((device, b.addr), []).append((st, b))
                if b.site_key is not None:
                    self._by_size.setdefault((device, b.size), []).append((st, b))
        st.scan_s = time.perf_counter() - t0
        st.scan["phases_us"] = {"snapshot": snap_us, "events": int((t_ev - t_snap) * 1e6),
                                "pointers": int((t_ptr - t_ev) * 1e6), "names": int(t_names * 1e6),
                                "events_in_ring": sum(len(x) for x in snap.get("device_traces") or [])}
        st.scan["first_snapshot"] = first  # the process's first _snapshot() call
        if again_us is not None:
            st.scan["phases_us"]["snapshot_again"] = again_us

    def on_exec_destroyed(self, exec_handle: int) -> None:
        with self.lock:
            st = self.by_exec.pop(exec_handle, None)
            if st is not None:
                st.destroyed = True

    # ---------------------------------------------------------------------- checks
    def check(self, replaying: Watched | None = None) -> None:
        """Read the allocator's events since the last check; note a checkpoint for every graph
        (``replaying``: the graph whose replay starts right after this check)."""
        torch = self.torch
        if torch is None or not self.graphs or self.history_changed is not None:
            return
        t0 = time.perf_counter()
        try:
            with _gc_paused():
                snap = allocator_snapshot(torch)
                self.snapshots += 1
                now = _now_us()
                with self.lock:
                    live = [st for st in self.graphs.values() if not st.destroyed]
                    devices = {st.device for st in live}
                    for d in devices:
                        self._read_events(snap, d)
                    self._verify_blocks(snap)
                    for st in live:
                        st.checkpoints.append((now, st.replays, st.replays + (st is replaying)))
                self._clear_ring()
                del snap
            self.checks += 1
        except Exception as e:
            self._error("check", e)
        t1 = time.perf_counter()
        self.check_s += t1 - t0
        # the periodic checks keep to CHECK_SHARE of the program's time: a check that took d seconds
        # is followed by at least d / CHECK_SHARE seconds without one (the first two replays of a graph
        # are checked whatever)
        self._quiet_until = t1 + (t1 - t0) / CHECK_SHARE
        if self._quiet_until > t1 + (t1 - t0):
            self.throttled_s = max(self.throttled_s, (t1 - t0) / CHECK_SHARE)

    def _clear_ring(self) -> None:
        """Empty the allocator's history ring once its events were read (the history stays on), so
        that the next snapshot holds only the events since this one: a snapshot turns every event of
        the ring into Python objects, its stack included, and a full ring (HISTORY_ENTRIES) cost every
        graph's instantiation (docs/performance.md). Only the checks' own history is
        emptied (never one the program set). An event another thread adds between the snapshot and
        the clear is lost; a watched block it freed is then found from the allocator's state at the
        next check (:meth:`_verify_blocks`, as for a ring that overflowed)."""
        if self.ring_cleared not in (None, True) or self.history != "on" or self.history_changed is not None:
            return
        try:
            record = self._record_history or self.torch.cuda.memory._record_memory_history
            record(enabled="all", context="all", stacks="python", max_entries=HISTORY_ENTRIES, clear_history=True)
            self.ring_cleared = True
        except TypeError as e:  # a torch without clear_history: the ring is read whole each time
            self.ring_cleared = f"not emptied: {e}"
        except Exception as e:
            self.ring_cleared = f"not emptied: {type(e).__name__}: {e}"
            self._error("history clear", e)

    def _read_events(self, snap: dict[str, Any], device: int, capture: bool = False) -> None:
        traces = snap.get("device_traces") or []
        if device >= len(traces):
            return
        events = traces[device]
        last_t, last_n = self._seen.get(device, (-1.0, 0))
        if events and last_t >= 0 and float(events[0].get("time_us", 0)) > last_t and len(events) >= HISTORY_ENTRIES:
            self.history_lost = True  # the ring overflowed since the last read: some events are gone
        at_last = 0
        new_last_t, new_n = last_t, last_n
        for e in events:
            t = float(e.get("time_us", 0))
            if t < last_t:
                continue
            if t == last_t:
                at_last += 1
                if at_last <= last_n:
                    continue
            if t > new_last_t:
                new_last_t, new_n = t, 1
            else:
                new_n += 1
            if not capture:
                self._event(device, e, t)
        self._seen[device] = (new_last_t, new_n if new_last_t != last_t else max(new_n, at_last))

    def _event(self, device: int, e: dict[str, Any], t: float) -> None:
        action = e.get("action")
        addr = int(e.get("addr", 0))
        if action in ("free_requested", "free_completed"):
            for st, b in self.blocks.get((device, addr), ()):
                if b.freed_us is None and t > st.captured_us:
                    self._freed(st, b, t, e)
        elif action == "alloc" and (device, int(e.get("size", 0))) in self._by_size:
            self._realloc(device, e, t)
            if self._open:
                self._reused(device, e, t, addr)
        elif action == "alloc" and self._open:
            self._reused(device, e, t, addr)
        elif action in ("segment_free", "segment_unmap"):
            size = int(e.get("size", 0))
            for (d, a), users in self.blocks.items():
                if d == device and a < addr + size and addr < a + users[0][1].size:
                    for st, b in users:
                        if b.freed_us is None and t > st.captured_us:
                            self._freed(st, b, t, e)

    def _realloc(self, device: int, e: dict[str, Any], t: float) -> None:
        """An allocation of a watched block's size: from the frame that allocated the block?"""
        key = _frame_key(e.get("frames") or [])
        if key is None:
            return
        for st, b in self._by_size[(device, int(e.get("size", 0)))]:
            if b.site_key == key and b.freed_us is None and t > st.captured_us and int(e.get("addr", 0)) != b.addr:
                b.reallocs += 1
                if b.first_realloc_us is None:
                    b.first_realloc_us = t
                    if b not in st.suspects:
                        st.suspects.append(b)

    def _reused(self, device: int, e: dict[str, Any], t: float, addr: int) -> None:
        """An allocation overlapping a freed block: the tensor that took its memory."""
        size = int(e.get("size", 0))
        for st, b in list(self._open):  # freed, not reused yet: few
            if st.device == device and b.addr < addr + size and addr < b.addr + b.size and t >= (b.freed_us or 0):
                b.reused_us = t
                b.reused_by = {"bytes": size, "allocated_at": user_site(e.get("frames"))}
                self._open.remove((st, b))

    def _freed(self, st: Watched, b: Block, t: float, e: dict[str, Any] | None) -> None:
        b.freed_us = t
        if e is not None:
            b.freed_at = user_site(e.get("frames"))
        else:
            b.freed_site_known = False
        self._open.append((st, b))

    def _verify_blocks(self, snap: dict[str, Any]) -> None:
        """When events were lost, or may have been (the ring is emptied after each read): a watched block
        no longer active at its address was freed (when unknown)."""
        if not self.history_lost and self.ring_cleared is not True:
            return
        active: set[tuple[int, int, int]] = set()
        for s in snap.get("segments", []):
            a = int(s["address"])
            for b in s.get("blocks", []):
                if b.get("state") == "active_allocated":
                    active.add((int(s.get("device", 0)), a, int(b["size"])))
                a += int(b["size"])
        now = _now_us()
        for (d, a), users in self.blocks.items():
            for st, b in users:
                if b.freed_us is None and (d, a, b.size) not in active:
                    self._freed(st, b, now, None)

    # ---------------------------------------------------------------------- contents
    def _hash(self, b: Block) -> int | None:
        """A hash of the block's bytes as the GPU holds them now (the device synchronised first)."""
        if b.size > CONTENT_MAX_BYTES:
            b.too_big = True
            return None
        import zlib

        self.torch.cuda.synchronize()
        buf = ctypes.create_string_buffer(b.size)
        if _driver().copy(buf, b.addr, b.size) != 0:
            return None
        self.content_reads += 1
        return zlib.crc32(buf.raw)

    def contents_after(self, st: Watched, replay: int) -> None:
        """After a sampled replay: the suspects' hashes, to compare before the next replay."""
        t0 = time.perf_counter()
        try:
            for b in st.suspects:
                if b.freed_us is None:
                    h = self._hash(b)
                    b.hash_after = (replay, h) if h is not None else None
        except Exception as e:
            self._error("contents", e)
        self.content_s += time.perf_counter() - t0

    def contents_before(self, st: Watched, replay: int) -> None:
        """Before a replay that follows a sampled one: was a suspect written in between?"""
        if not any(b.hash_after is not None and b.hash_after[0] == replay - 1 for b in st.suspects):
            return
        t0 = time.perf_counter()
        try:
            for b in st.suspects:
                if b.hash_after is None or b.hash_after[0] != replay - 1 or b.freed_us is not None:
                    continue
                h = self._hash(b)
                if h is None:
                    continue
                if h == b.hash_after[1]:
                    b.unchanged.append((replay - 1, replay))
                else:
                    b.written += 1
                b.hash_after = None
        except Exception as e:
            self._error("contents", e)
        self.content_s += time.perf_counter() - t0

    # ---------------------------------------------------------------------- results
    def finish(self) -> None:
        """The last check, at the end of the run."""
        self.check()

    def entry(self, seq: int, launches: int | None = None) -> dict[str, Any]:
        """What a graph's index entry says (``inputs``): its external blocks and its findings.
        ``launches``: its replays as CUPTI counted them (any launch, not only through torch)."""
        if self.every <= 0:
            return {"checked": False, "why_not": "input checks are off (--check-inputs 0)"}
        st = self.graphs.get(seq)
        if st is None and seq in self.skipped:
            return {"checked": False, "why_not": self.skipped[seq]}
        if st is None:
            why = self.history if self.history not in (None, "on") else (
                "torch's allocator was not watched when this graph was made" if self.history is None else
                "its memory could not be mapped to torch's allocator (see input_checks.errors)")
            return {"checked": False, "why_not": why}
        findings = [f for f in (self._finding(st, b) for b in st.blocks) if f is not None]
        # replays after the program's own _record_memory_history call were not checked: what they
        # read is unknown, not clean
        unwatched = st.replays_unwatched > 0
        return {
            "checked": st.replays > 0 and not unwatched,
            "why_not": (f"its replays after replay {st.replays} ({st.replays_unwatched} of them) were not checked: "
                        f"the program set torch's allocator history itself ({self.history_changed})")
            if unwatched else
            None if st.replays > 0 else (
                "never replayed" if not launches else
                "replayed only outside torch.cuda.CUDAGraph.replay (a raw cudaGraphLaunch is not checked)"),
            "every": self.every,
            "replays_checked": st.replays,
            "checks": len(st.checkpoints) - 1,
            "external_blocks": len(st.blocks),
            "external_bytes": sum(b.size for b in st.blocks),
            "pool_pointers": st.pool_pointers,
            "free_pointers_at_capture": st.free_pointers,
            "scan": dict(st.scan),
            "scan_complete": bool(st.scan.get("complete", 1)),
            "scan_s": st.scan_s,
            "external": [b.to_json() for b in sorted(st.blocks, key=lambda b: -b.size)[:MAX_LISTED]],
            "findings": findings,
        }

    @staticmethod
    def _bounds(st: Watched, t: float) -> tuple[int, bool, int]:
        """(the first replay surely after time ``t``, whether it is exactly the first after it, the
        first that may be): from the checks around ``t`` (the graph replayed after ``t``)."""
        before = [c for c in st.checkpoints if c[0] < t]
        after = [c for c in st.checkpoints if c[0] >= t]
        # a check and the replay it precedes run back to back on the replaying thread: that replay
        # came before anything the program did after the check (a free from another thread between
        # the two would be missed by one replay)
        safe = before[-1][2] if before else 0  # replays surely started before t
        last = st.replays
        sure = after[0][1] + 1 if after and after[0][1] + 1 <= last else None  # the first surely after t
        if sure is None:
            return last, safe + 1 == last, safe + 1
        return sure, sure == safe + 1, safe + 1

    def _finding(self, st: Watched, b: Block) -> dict[str, Any] | None:
        if (b.freed_us is None and b.first_realloc_us is not None and b.written == 0
                and len(b.unchanged) >= MIN_UNCHANGED):
            first, exact, may = self._bounds(st, b.first_realloc_us)
            return {  # alive, never written between replays, while its line makes new ones: a rebind
                "kind": "stale", "input": b.to_json(), "reallocs": b.reallocs,
                "unchanged_between": [list(x) for x in b.unchanged[:8]], "intervals_checked": len(b.unchanged),
                "first_replay": first, "first_replay_exact": exact, "may_start_at": may,
                "last_replay": st.replays, "freed_at": None, "freed_site_known": True, "reused_by": None}
        if b.freed_us is None or st.last_replay_us is None or st.last_replay_us < b.freed_us:
            return None  # never freed, or not replayed after the free (a teardown)
        first, exact, may = self._bounds(st, b.freed_us)
        return {
            "kind": "reused" if b.reused_by is not None else "freed",
            "input": b.to_json(),
            "freed_at": b.freed_at,
            "freed_site_known": b.freed_site_known,
            "reused_by": b.reused_by,
            "first_replay": first,
            "first_replay_exact": exact,
            "may_start_at": may,
            "last_replay": st.replays,
        }

    def process_entry(self) -> dict[str, Any]:
        """The process's ``input_checks``: how the checks ran and what they cost."""
        return {"every": self.every, "history": self.history, "history_changed": self.history_changed,
                "history_entries": HISTORY_ENTRIES,
                "history_lost": self.history_lost, "checks": self.checks, "check_s": self.check_s,
                "capture_s": self.capture_s, "replays_seen": self.replays_total,
                "replays_not_matched": self.unmatched_replays, "content_reads": self.content_reads,
                "content_s": self.content_s, "check_share": CHECK_SHARE, "longest_pause_s": self.throttled_s,
                "errors": list(self.errors)}
