"""Reading chrome traces (cgtool's own, and the PyTorch profiler's) into columns of GPU events.

Decoding is typed (msgspec) and chunked: the outer document is decoded with each event kept as a
raw slice of the input, then events are decoded 64k at a time into structs holding only the fields
cgtool uses, and the GPU events of each chunk are moved into numpy columns. Peak memory is the
file plus the columns plus one chunk. Every form PyTorch writes is accepted:

* ``"graph node id"`` holding the full 64-bit tools id, or only its low 32 bits beside
  ``"graph id"`` (PyTorch's newer CUPTI monitor);
* with or without ``"channel"`` / ``"channel_type"``;
* no graph ids at all (Kineto in torch ≤ 2.12): kernels of one replay share the correlation id of
  their ``cudaGraphLaunch``; ``graph_id`` is then 0 and the match to nodes is inferred
  (see ``cgtool.inspect.deps``).
"""

from __future__ import annotations

import gc
import os
from operator import attrgetter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
import math
import re
import warnings
from typing import Annotated, Any, Literal, Union

import msgspec
import numpy as np

from cgtool.artifacts.graph import LOW32, MAX_EXEC_GRAPH_ID
from cgtool.errors import InputWarning, InvalidInputError
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, decode, describe_json_error, field_error, not_utf8, read_bytes, too_deep

#: Event categories of GPU work, and the kind cgtool gives each.
GPU_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2}
KINDS = ("kernel", "memcpy", "memset")
_CHUNK = 1 << 16


#: Ids that go into int64 columns; graph ids leave room for the tools-id packing (id << 32) | local.
_Id = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_GraphId = Annotated[int, msgspec.Meta(ge=0, le=MAX_EXEC_GRAPH_ID)]
_Small = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]
#: Plausible times (µs): a timestamp within ±30 years, a duration under 11 days.
MAX_ABS_TS_US = 1e15
MAX_DUR_US = 1e12


class _Args(msgspec.Struct, gc=False):
    # Defaults stand for "absent", so that a row converts to integers in one step.
    stream: _Id = -1
    correlation: _Id = -1
    device: _Small = 0
    graph_id: _GraphId = msgspec.field(name="graph id", default=0)
    graph_node_id: _Id = msgspec.field(name="graph node id", default=-1)
    channel: _Small = -1
    channel_type: Union[_Small, str] = -1


class _ShapeArgs(msgspec.Struct, gc=False):
    """Launch shape (kernels) and size (memcpy/memset), as the profilers write them. Decoded in a
    second pass, only for GPU events without a node id (they are matched by shape)."""

    grid: Union[list[int], None] = None
    block: Union[list[int], None] = None
    shared_memory: int = msgspec.field(name="shared memory", default=-1)
    nbytes: int = msgspec.field(name="bytes", default=-1)


class _ShapeEvent(msgspec.Struct, gc=False):
    args: Union[_ShapeArgs, None] = None


_shape_event = msgspec.json.Decoder(_ShapeEvent)


#: Categories PyTorch's profiler and cgtool write. Decoded as a Literal, a category costs no new
#: string per event; a chunk with any other category is decoded with plain strings instead.
_KnownCat = Literal[
    "", "kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "cuda_runtime", "cuda_driver",
    "runtime", "driver", "cpu_op", "user_annotation", "gpu_user_annotation", "python_function", "ac2g",
    "Trace", "overhead", "cpu_instant_event", "fwdbwd", "Runtime", "Driver", "cuda_profiler_range",
    "graph_edge", "fake_dependency", "Overhead", "gpu_op", "ProfilerStep", "Memory", "cpu_to_gpu",
]


class _EventT(msgspec.Struct, gc=False):
    """An event with args decoded in the same pass (the fast path)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = math.nan  # NaN: absent (refused for GPU events)
    dur: float = math.nan
    args: Union[_Args, None] = None


class _Event(_EventT, gc=False):
    """The fallback: args kept raw, decoded only for the events that need them."""

    args: msgspec.Raw = msgspec.Raw(b"{}")  # type: ignore[assignment]


class _EventK(_EventT, gc=False):
    """The fastest path: a known category (see _KnownCat)."""

    cat: _KnownCat = ""


class _Outer(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw]
    cgtool: msgspec.Raw = msgspec.Raw(b"null")


_outer = msgspec.json.Decoder(_Outer)
_chunk = msgspec.json.Decoder(list[_Event])
_chunk_typed = msgspec.json.Decoder(list[_EventT])
_chunk_known = msgspec.json.Decoder(list[_EventK])
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_args = msgspec.json.Decoder(_Args)


@dataclass(slots=True)
class GpuEvent:
    """One GPU activity, for messages and small loops (the analysis works on the columns)."""

    kind: str
    name: str
    start: float
    end: float
    device: int
    stream: int
    correlation: int
    graph_id: int | None
    tools_id: int | None
    channel: int | None
    channel_type: int | None
    seq: int


@dataclass(frozen=True)
class TracerOverhead:
    """What tracing cost the replays of a trace, as its tracer measured it (``cgtool trace`` writes it
    in the ``cgtool`` block as ``tracer_overhead``): CUDA events around each replay, medians."""

    untraced_replay_us: float
    traced_replay_us: float
    items_per_replay: float  # GPU records (kernels, copies, sets) per replay
    per_item_us: float  # (traced - untraced) / items: how much each item's start moves on, on average

    @property
    def ratio(self) -> float:
        return self.traced_replay_us / self.untraced_replay_us if self.untraced_replay_us > 0 else math.nan

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> "TracerOverhead | None":
        d = (meta or {}).get("tracer_overhead")
        if not isinstance(d, dict):
            return None
        return cls(*(float(d[k]) for k in _OVERHEAD_KEYS))


_OVERHEAD_KEYS = ("untraced_replay_us", "traced_replay_us", "items_per_replay", "per_item_us")


class NodeIdForm(str, Enum):
    """How a trace writes graph node ids."""

    FULL = "full"  # "graph node id" holds the full 64-bit tools id (CUPTI, newer Kineto)
    LOW32 = "low32+graph id"  # only the low 32 bits, beside "graph id" (PyTorch's newer CUPTI monitor)
    NONE = "none"  # no node ids (Kineto in torch <= 2.12): the match to nodes is inferred


@dataclass
class Trace:
    """GPU events as numpy columns (one row per kernel/memcpy/memset), plus graph launches.

    Times in µs; ``end`` is rounded to the nanosecond so equal ends compare equal. Missing values:
    ``graph_id``/``tools_id`` 0, ``channel``/``channel_type`` -1.
    """

    source: str
    kind: np.ndarray  # int8: index into KINDS
    name: np.ndarray  # int32: index into names
    names: list[str]
    start: np.ndarray  # float64 µs
    end: np.ndarray  # float64 µs
    device: np.ndarray  # int64
    stream: np.ndarray  # int64
    correlation: np.ndarray  # int64
    graph_id: np.ndarray  # int64, 0 when the event is outside a graph or the trace has no ids
    tools_id: np.ndarray  # int64 full tools id, 0 when unknown
    channel: np.ndarray  # int64, -1 when absent
    channel_type: np.ndarray  # int64, -1 when absent
    seq: np.ndarray  # int64 position in traceEvents
    launches: dict[int, float]  # correlation id of each cudaGraphLaunch -> host start (µs)
    cgtool: dict[str, Any] | None = None
    n_events: int = 0
    node_id_form: NodeIdForm = NodeIdForm.NONE
    channel_types: list[str] = field(default_factory=list)  # names of string channel types
    shape: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # launch_shape(grid, block), 0 unknown
    shared_memory: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # bytes, -1 unknown
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # memcpy/memset size, -1 unknown

    def __len__(self) -> int:
        return len(self.start)

    @property
    def has_channels(self) -> bool:
        return bool(len(self.channel)) and bool((self.channel >= 0).any())

    @property
    def has_graph_ids(self) -> bool:
        return bool(len(self.graph_id)) and bool((self.graph_id > 0).any())

    @property
    def tracer_overhead(self) -> TracerOverhead | None:
        """What the tracer measured tracing to cost (traces of ``cgtool trace`` since issue 18)."""
        return TracerOverhead.from_meta(self.cgtool)

    def event(self, i: int) -> GpuEvent:
        g, t, c, ct = int(self.graph_id[i]), int(self.tools_id[i]), int(self.channel[i]), int(self.channel_type[i])
        return GpuEvent(KINDS[self.kind[i]], self.names[self.name[i]], float(self.start[i]), float(self.end[i]),
                        int(self.device[i]), int(self.stream[i]), int(self.correlation[i]), g or None,
                        t or None, None if c < 0 else c, None if ct < 0 else ct, int(self.seq[i]))

    def events(self) -> list[GpuEvent]:
        return [self.event(i) for i in range(len(self))]


def _bad(source: str, msg: str) -> InvalidInputError:
    return InvalidInputError(f"{source}: {msg}")


def load_trace(path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Trace:
    """Parse a trace file (gzip detected by content). Errors are InvalidInputError (exit 4)."""
    src = str(path)
    data = read_bytes(path, max_bytes=max_bytes, mutable=True)
    # A million new objects would trigger Python's cyclic GC over and over (none of them form
    # cycles), which makes loading superlinear: pause it for the load.
    was = gc.isenabled()
    gc.disable()
    try:
        return _load(data, src)
    finally:
        if was:
            gc.enable()
        close = getattr(data, "close", None)
        if close is not None:
            try:
                close()
            except BufferError:  # pragma: no cover - a view is still alive; the GC will close it
                pass


def load_trace_and_doc(path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[Trace, dict[str, Any]]:
    """The trace's columns and the whole document (for writing an annotated copy), from one read."""
    src = str(path)
    data = read_bytes(path, max_bytes=max_bytes)
    doc = decode(data, src)
    if not isinstance(doc, dict):
        raise _bad(src, "is not a chrome trace cgtool can read: expected an object with a 'traceEvents' list.")
    was = gc.isenabled()
    gc.disable()
    try:
        return _load(bytearray(data), src), doc
    finally:
        if was:
            gc.enable()


def _load(data: Any, src: str) -> Trace:
    try:
        outer = _outer.decode(data)
    except RecursionError:
        raise too_deep(src) from None
    except UnicodeDecodeError as e:
        raise not_utf8(src, e) from None
    except msgspec.ValidationError as e:
        raise _bad(src, f"is not a chrome trace cgtool can read ({field_error(e)}). Expected an object with a "
                   "'traceEvents' list, as torch.profiler and `cgtool trace` write.") from None
    except msgspec.DecodeError as e:
        raise InvalidInputError(describe_json_error(src, data, e)) from None
    try:
        return _columns(outer, data, src)
    except RecursionError:
        raise too_deep(src) from None
    except UnicodeDecodeError as e:
        raise not_utf8(src, e) from None


_COLS = ("kind", "name", "start", "dur", "seq", "stream", "corr", "device", "gid", "nid", "chan", "ctype",
         "shape", "smem", "nbytes")
_ARGS, _NAME, _CAT, _TS, _DUR = (attrgetter(k) for k in ("args", "name", "cat", "ts", "dur"))
_CTYPE = attrgetter("channel_type")
_ARG_COLS = [(c, attrgetter(f)) for c, f in (("stream", "stream"), ("corr", "correlation"), ("device", "device"),
                                             ("gid", "graph_id"), ("nid", "graph_node_id"), ("chan", "channel"))]


def _addr(b: Any) -> int:
    return int(np.frombuffer(b, np.uint8).__array_interface__["data"][0])


def _chunk_events(buf: bytearray, base: int, part: list[msgspec.Raw], lo: int, src: str) -> list[Any]:
    """Typed events of one chunk; args decoded in the same pass when every event's args fit.

    The chunk is decoded in place: the separator before its first event becomes ``[`` and the one
    after its last becomes ``]`` for the duration of the decode (no copy of the chunk's bytes)."""
    s = _addr(part[0]) - base
    e = _addr(part[-1]) - base + len(part[-1])
    saved = buf[s - 1], buf[e]
    buf[s - 1], buf[e] = 0x5B, 0x5D  # "[" and "]"
    try:
        with memoryview(buf) as mv:
            return _decode_chunk(mv[s - 1:e + 1], lo, src)
    finally:
        buf[s - 1], buf[e] = saved


def _decode_chunk(blob: Any, lo: int, src: str) -> list[Any]:
    try:
        return _chunk_known.decode(blob)
    except msgspec.ValidationError:
        pass  # an unknown category, or args of other types
    try:
        return _chunk_typed.decode(blob)
    except msgspec.ValidationError:
        pass  # some event (not necessarily a GPU one) has args of other types: decode lazily
    try:
        evs = _chunk.decode(blob)
    except msgspec.ValidationError as e:
        raise _bad(src, _event_error(e, blob, lo) + ". Record the trace again.") from None
    out = []
    for k, ev in enumerate(evs):
        args = None
        if GPU_CATS.get(ev.cat) is not None or (ev.cat in _RUNTIME_CATS and ev.name.startswith("cudaGraphLaunch")):
            try:
                args = _args.decode(ev.args)
            except msgspec.MsgspecError as err:
                raise _bad(src, _event_error(err, ev.args, lo + k, "args") +
                           f" ({ev.cat} {ev.name[:40]!r}). Record the trace again.") from None
        out.append(_EventT(ev.ph, ev.cat, ev.name, ev.ts, ev.dur, args))
    return out


_PATH = re.compile(r"""\.([A-Za-z_][A-Za-z_0-9]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]""")


def _event_error(e: Exception, blob: Any, base: int, prefix: str = "") -> str:
    """``traceEvents[1234].args.stream: expected `int` <= ..., got 18446744073709551616``: the path
    of a validation error inside a chunk (``$[k]...``) or one event's args (``$...``), and the value."""
    text = str(e)
    msg, sep, where = text.rpartition(" - at `")
    if not sep:
        return f"traceEvents[{base}]{'.' + prefix if prefix else ''}: {text}"
    steps: list[Any] = []
    for m in _PATH.finditer(where.rstrip("`")[1:]):
        steps.append(m.group(1) if m.group(1) else int(m.group(2)) if m.group(2) else msgspec.json.decode(m.group(3)))
    value: Any = None
    try:
        value = msgspec.json.decode(bytes(blob))
        for st in steps:
            value = value[st]
        got = repr(value)
        got = f", got {got if len(got) <= 60 else got[:57] + '...'}"
    except Exception:  # the path did not lead to a value (a missing field): nothing to quote
        got = ""
    if not prefix and steps and isinstance(steps[0], int):
        head, steps = f"traceEvents[{base + steps[0]}]", steps[1:]
    else:
        head = f"traceEvents[{base}]" + (f".{prefix}" if prefix else "")
    path = head + "".join(f"[{st}]" if isinstance(st, int) else f".{st}" if str(st).isidentifier() else f"[{st!r}]"
                          for st in steps)
    return f"{path}: {msg[0].lower() + msg[1:]}{got}"


@dataclass
class _Part:
    """GPU-event columns of a range of chunks, with the names they index."""

    cols: dict[str, np.ndarray]
    names: list[str]
    launches: dict[int, float]
    ct_names: list[str]


_DTYPES = {"kind": np.int8, "name": np.int32, "start": np.float64, "dur": np.float64}


def _scan(buf: Any, base: int, raw: list[msgspec.Raw], lo0: int, hi0: int, src: str) -> _Part:
    """Decode chunks of ``raw[lo0:hi0]`` and keep their GPU events as numpy columns."""
    names: dict[str, int] = {}
    launches: dict[int, float] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLS}
    ct_names: list[str] = []
    cats = GPU_CATS
    for lo in range(lo0, hi0, _CHUNK):
        evs = _chunk_events(buf, base, raw[lo:min(lo + _CHUNK, hi0)], lo, src)
        for k, c in enumerate(map(_CAT, evs)):
            if c in _RUNTIME_CATS:
                e = evs[k]
                if e.ph == "X" and e.name.startswith("cudaGraphLaunch") and e.args is not None \
                        and e.args.correlation >= 0:
                    if e.args.correlation in launches:
                        raise _bad(src, f"traceEvents[{lo + k}]: a second cudaGraphLaunch with correlation id "
                                   f"{e.args.correlation}; every launch has its own, so the replays cannot be told "
                                   "apart (the file was edited or merged). Record the trace again.")
                    if not math.isfinite(e.ts):
                        raise _bad(src, f"traceEvents[{lo + k}] (cudaGraphLaunch) has no valid ts ({e.ts}).")
                    launches[e.args.correlation] = e.ts
        idx = [k for k, c in enumerate(map(_CAT, evs)) if c in cats]
        idx = [k for k in idx if evs[k].ph == "X"]
        gpu = [evs[k] for k in idx]
        del evs
        for k, e in zip(idx, gpu):
            a = e.args
            if a is None or a.stream < 0 or a.correlation < 0:
                raise _bad(src, f"traceEvents[{lo + k}] ({e.cat} {e.name[:40]!r}) lacks args.stream or "
                           "args.correlation, which every profiler writes for GPU events.")
            if not (abs(e.ts) < MAX_ABS_TS_US and 0 <= e.dur < MAX_DUR_US):
                what = ("no 'ts'" if math.isnan(e.ts) else "no 'dur'" if math.isnan(e.dur) else
                        f"a negative duration ({e.dur})" if e.dur < 0 else f"an implausible time (ts {e.ts}, dur {e.dur} µs)")
                raise _bad(src, f"traceEvents[{lo + k}] ({e.cat} {e.name[:40]!r}) has {what}; every GPU event "
                           "needs a start and a duration. Record the trace again.")
        n = len(gpu)
        args = list(map(_ARGS, gpu))
        nm = list(map(_NAME, gpu))
        for x in set(nm).difference(names):
            names[x] = len(names)
        # Each chunk goes straight into numpy: no column of Python objects is ever built.
        parts["kind"].append(np.fromiter(map(cats.__getitem__, map(_CAT, gpu)), np.int8, n))
        parts["name"].append(np.fromiter(map(names.__getitem__, nm), np.int32, n))
        parts["start"].append(np.fromiter(map(_TS, gpu), np.float64, n))
        parts["dur"].append(np.fromiter(map(_DUR, gpu), np.float64, n))
        parts["seq"].append(np.array(idx, dtype=np.int64) + lo)
        for col_name, get in _ARG_COLS:
            parts[col_name].append(np.fromiter(map(get, args), np.int64, n))
        shape, smem, nbytes = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        for j in np.flatnonzero(parts["nid"][-1] < 0).tolist():  # no node id: matched by shape
            shape[j], smem[j], nbytes[j] = _shape_of(raw[lo + idx[j]])
        parts["shape"].append(shape)
        parts["smem"].append(smem)
        parts["nbytes"].append(nbytes)
        try:
            parts["ctype"].append(np.fromiter(map(_CTYPE, args), np.int64, n))
        except (TypeError, ValueError):  # channel types written as names
            parts["ctype"].append(np.fromiter((_ctype(a.channel_type, ct_names) for a in args), np.int64, n))
        del gpu, args
    cols = {k: (np.concatenate(v) if v else np.zeros(0, _DTYPES.get(k, np.int64))) for k, v in parts.items()}
    return _Part(cols, list(names), launches, ct_names)


#: Traces with at least this many events are decoded by two processes (where fork exists).
PARALLEL_MIN_EVENTS = 300_000


def _workers() -> int:
    env = os.environ.get("CGTOOL_TRACE_WORKERS")
    if env is not None:
        return max(1, int(env)) if env.isdigit() else 1
    return 2 if (os.cpu_count() or 1) >= 2 and hasattr(os, "fork") else 1


def _scan_all(buf: Any, base: int, raw: list[msgspec.Raw], src: str) -> _Part:
    """All chunks; on big traces the second half in a forked process (the mapping is shared
    copy-on-write), its columns sent back as raw bytes over a pipe (nothing is pickled)."""
    n = len(raw)
    if n < PARALLEL_MIN_EVENTS or _workers() < 2:
        return _scan(buf, base, raw, 0, n, src)
    split = (n // 2 // _CHUNK + 1) * _CHUNK
    if split >= n:
        return _scan(buf, base, raw, 0, n, src)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: scan the second half, report, exit without cleanup
        code = 0
        try:
            os.close(r)
            report: dict[str, Any]
            blobs: list[bytes]
            try:
                part = _scan(buf, base, raw, split, n, src)
                report = {"names": part.names, "ct_names": part.ct_names, "launches": list(part.launches.items()),
                        "cols": [(k, str(v.dtype), len(v)) for k, v in part.cols.items()]}
                blobs = [v.tobytes() for v in part.cols.values()]
            except InvalidInputError as e:
                report, blobs = {"error": e.message}, []
            except RecursionError:
                report, blobs = {"error": too_deep(src).message}, []
            except UnicodeDecodeError as e:
                report, blobs = {"error": not_utf8(src, e).message}, []
            except BaseException as e:  # reported by the parent as an internal error
                report, blobs = {"error": f"internal error in the trace reader: {type(e).__name__}: {e}"}, []
            hb = msgspec.json.encode(report)
            with os.fdopen(w, "wb") as f:
                f.write(len(hb).to_bytes(8, "little"))
                f.write(hb)
                for blob in blobs:
                    f.write(blob)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        mine = _scan(buf, base, raw, 0, split, src)
        with os.fdopen(r, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            head: dict[str, Any] = (msgspec.json.decode(f.read(size)) if size
                                    else {"error": "the trace reader's worker died"})
            if "error" in head:
                message = str(head["error"])
                if message.startswith(src):
                    raise InvalidInputError(message)
                raise RuntimeError(message)
            theirs = {}
            for k, dt, m in head["cols"]:
                width = np.dtype(dt).itemsize
                theirs[k] = np.frombuffer(f.read(m * width), dtype=dt).copy()
    finally:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # pragma: no cover
            pass
    # Merge: the worker's name (and channel type name) indices are remapped to the parent's.
    names = {x: i for i, x in enumerate(mine.names)}
    remap = np.array([names.setdefault(x, len(names)) for x in head["names"]], dtype=np.int32)
    if len(theirs["name"]):
        theirs["name"] = remap[theirs["name"]]
    cts = list(mine.ct_names)
    if head["ct_names"]:
        ct_map = {}
        for i, x in enumerate(head["ct_names"]):
            if x not in cts:
                cts.append(x)
            ct_map[1000 + i] = 1000 + cts.index(x)
        theirs["ctype"] = np.array([ct_map.get(int(v), int(v)) for v in theirs["ctype"]], dtype=np.int64)
    cols = {k: np.concatenate([mine.cols[k], theirs[k].astype(mine.cols[k].dtype, copy=False)]) for k in mine.cols}
    launches = dict(mine.launches)
    for c, t in head["launches"]:
        if int(c) in launches:
            raise _bad(src, f"two cudaGraphLaunch events share correlation id {int(c)}; every launch has its own "
                       "(the file was edited or merged). Record the trace again.")
        launches[int(c)] = float(t)
    return _Part(cols, list(names), launches, cts)


def _columns(outer: _Outer, buf: bytearray, src: str) -> Trace:
    raw = outer.traceEvents
    base = _addr(buf) if len(buf) else 0
    meta = None
    if bytes(outer.cgtool) not in (b"null", b""):
        meta = decode(outer.cgtool, f"{src} (its 'cgtool' block)")
        if not isinstance(meta, dict):
            raise _bad(src, "its 'cgtool' block should be an object.")
        _check_meta(meta, src)
    part = _scan_all(buf, base, raw, src)
    names, launches, ct_names = part.names, part.launches, part.ct_names
    n_raw = len(raw)
    del raw, outer  # the raw slices point into buf: release them before buf is closed

    def col(k: str, dtype: Any) -> np.ndarray:
        return part.cols.pop(k).astype(dtype, copy=False)

    kind, name, seq = col("kind", np.int8), col("name", np.int32), col("seq", np.int64)
    start = col("start", np.float64)
    end = np.round(start + col("dur", np.float64), 3)
    stream, corr, device = col("stream", np.int64), col("corr", np.int64), col("device", np.int64)
    gid, nid, chan, ctype = col("gid", np.int64), col("nid", np.int64), col("chan", np.int64), col("ctype", np.int64)
    shape, smem, nbytes = col("shape", np.int64), col("smem", np.int64), col("nbytes", np.int64)
    # Node ids: full 64-bit, or low 32 bits completed by "graph id" (-1: no node id).
    full = nid > LOW32
    form = NodeIdForm.NONE
    if full.any():
        form = NodeIdForm.FULL
        hi = nid[full] >> 32
        clash = (gid[full] != 0) & (gid[full] != hi)
        if clash.any():
            i = int(np.flatnonzero(full)[np.flatnonzero(clash)[0]])
            raise _bad(src, f"traceEvents[{int(seq[i])}]: 'graph node id' {int(nid[i])} belongs to graph "
                       f"{int(nid[i]) >> 32} but 'graph id' says {int(gid[i])}.")
        gid[full] = hi
    low = (nid >= 0) & ~full
    orphan = low & (gid == 0) & (nid > 0)
    if orphan.any():
        i = int(np.flatnonzero(orphan)[0])
        raise _bad(src, f"traceEvents[{int(seq[i])}]: 'graph node id' {int(nid[i])} holds only the low 32 "
                   "bits and there is no 'graph id' to complete it.")
    low &= gid > 0
    if low.any() and form == "none":
        form = NodeIdForm.LOW32
    tools = np.where(full, nid, np.where(low, (gid << 32) | np.maximum(nid, 0), 0))
    tools[gid == 0] = 0  # CUPTI writes graph id 0 for work outside graphs
    _check_events(src, seq, names, name, kind, start, end, stream, device, corr, tools, gid, launches)
    return Trace(
        source=src, kind=kind, name=name, names=names, start=start, end=end, device=device,
        stream=stream, correlation=corr, graph_id=gid, tools_id=tools, channel=chan,
        channel_type=ctype, seq=seq, launches=launches, cgtool=meta, n_events=n_raw,
        node_id_form=form, channel_types=ct_names, shape=shape, shared_memory=smem, nbytes=nbytes,
    )


def launch_shape(grid: Any, block: Any) -> int:
    """One integer for a kernel's (grid, block) dimensions, 0 when either is unknown. The same
    function keys trace events and graph nodes (their export's ``grid``/``block``), so equal
    launches get equal keys; it is a plain mixed-radix code (deterministic across processes)."""
    if not grid or not block:
        return 0
    key = 1
    for v in (*grid, *block):
        key = (key * 1_000_003 + int(v)) % (1 << 62)
    return key or 1


def _shape_of(raw_event: msgspec.Raw) -> tuple[int, int, int]:
    """(launch_shape, shared memory, bytes) of one event; unknown values where absent or malformed."""
    try:
        a = _shape_event.decode(raw_event).args
    except msgspec.MsgspecError:
        return 0, -1, -1
    if a is None:
        return 0, -1, -1
    return launch_shape(a.grid, a.block), a.shared_memory, a.nbytes


def _check_meta(meta: dict[str, Any], src: str) -> None:
    """The known keys of a trace's ``cgtool`` block have the types cgtool writes."""
    gs = meta.get("graphs")
    if gs is not None and not (isinstance(gs, list) and all(isinstance(g, dict) for g in gs)):
        raise _bad(src, f"cgtool.graphs should be a list of graph exports (objects), not {_short(gs)}. "
                   "Record the trace again.")
    mc = meta.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if mc is not None and not ((isinstance(mc, int) and not isinstance(mc, bool) and 0 < mc < 1 << 16)
                               or (isinstance(mc, str) and mc.isdigit() and len(mc) < 6)):
        raise _bad(src, f"cgtool.CUDA_DEVICE_MAX_CONNECTIONS should be a number of connections (or null), not "
                   f"{_short(mc)}. Record the trace again.")
    for key in ("replays", "dropped_records"):
        v = meta.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 63):
            raise _bad(src, f"cgtool.{key} should be a non-negative integer, not {_short(v)}.")
    ov = meta.get("tracer_overhead")
    if ov is not None:
        bad = not isinstance(ov, dict) or any(
            not isinstance(ov.get(k), (int, float)) or isinstance(ov.get(k), bool) or not math.isfinite(ov[k])
            or (k != "per_item_us" and ov[k] < 0) for k in _OVERHEAD_KEYS)
        if bad:
            raise _bad(src, f"cgtool.tracer_overhead should be an object of finite numbers ({', '.join(_OVERHEAD_KEYS)}; "
                       f"only per_item_us may be negative), not {_short(ov)}. Record the trace again.")


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _check_events(src: str, seq: np.ndarray, names: list[str], name: np.ndarray, kind: np.ndarray,
                  start: np.ndarray, end: np.ndarray, stream: np.ndarray, device: np.ndarray, corr: np.ndarray,
                  tools: np.ndarray, gid: np.ndarray, launches: dict[int, float]) -> None:
    """Refuse GPU events that contradict each other; warn when graph ids are missing from part of them."""
    n = len(start)
    if n < 2:
        return
    # The same event listed twice (a file concatenated with itself, an edit): every column equal.
    order = np.lexsort((name, stream, device, corr, end, start))
    same = np.ones(n - 1, dtype=bool)
    for col in (start, end, stream, device, corr, name, kind, tools):
        sc = col[order]
        same &= sc[1:] == sc[:-1]
    if same.any():
        k = int(np.flatnonzero(same)[0])
        a, b = sorted((int(seq[order[k]]), int(seq[order[k + 1]])))
        raise _bad(src, f"traceEvents[{a}] and traceEvents[{b}] are the same GPU event ({names[int(name[order[k]])][:40]!r} "
                   f"at {float(start[order[k]])} µs), listed twice; a profiler lists each once, so the file was "
                   f"concatenated or edited ({int(same.sum())} such duplicates). Record the trace again.")
    # One graph node runs once per launch: a (launch, node) pair seen twice makes replays meaningless.
    on = tools > 0
    if on.any():
        key = np.stack([corr[on], tools[on]], axis=1)
        uniq, counts = np.unique(key, axis=0, return_counts=True)
        if (counts > 1).any():
            c, t = (int(x) for x in uniq[int(np.flatnonzero(counts > 1)[0])].tolist())
            raise _bad(src, f"graph node {t} (graph {t >> 32}, node {t & LOW32}) runs {int(counts.max())} times "
                       f"under one correlation id ({c}); a node runs once per launch, so launches share a "
                       "correlation id (the file was edited or merged). Record the trace again.")
    # Events of graph launches without graph ids, beside others that carry them: dropped from the graph view.
    if on.any() and launches:
        in_launch = np.isin(corr, np.fromiter(launches, np.int64, len(launches)))
        lost = in_launch & (gid == 0)
        if lost.any() and (in_launch & on).any():
            warnings.warn(InputWarning(
                f"{src}: {int(lost.sum())} of {int(in_launch.sum())} GPU events launched by cudaGraphLaunch carry "
                "no graph id while the others do; they are counted as work outside graphs (dropped from the "
                "graph analysis). The trace may have been edited or recorded with a partial profiler."),
                stacklevel=2)


def _ctype(v: int | str, names: list[str]) -> int:
    if isinstance(v, int):
        return v
    if v not in names:
        names.append(v)
    return 1000 + names.index(v)
