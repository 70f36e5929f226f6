"""Reading chrome traces (cgtool's own, and the PyTorch profiler's) into columns of GPU events.

Reading is streamed: the input (a plain file or a gzip stream) is read a window at a time; the
events in a window, up to the last separator between two of them, are read in one call. Where
`_columns.c` is built, its scan reads them from the JSON text straight into numpy columns of the
GPU events (``_columns.scan``: strict JSON of the expected types only; anything else it leaves to
msgspec, and ``CGTOOL_TRACE_SCAN=0`` turns it off); else they are decoded by msgspec into structs
holding only the fields cgtool uses, and the GPU events go into columns at once (one C pass where
`_columns.c` is built, else one C-level pass per field). The checks are vectorized either way.
Memory is the columns plus one window (and its events, where msgspec decodes them), whatever the
file's size. A cut between two events is proven by
the chunk decoding (see ``_stream_events``); the document around the events is checked as one.
A plain file of at least PARALLEL_MIN_BYTES is read by two processes (``_Worker``; the number is
``CGTOOL_TRACE_WORKERS``, default 2 where there are two cores and fork). Input the streaming
reader does not handle (malformed JSON, an error in an event, FIFOs and devices) goes through the
whole-document reader (``_load``), which gives the answer or the one error message.

Every form PyTorch writes is accepted:

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
from typing import Annotated, Any, Iterator, Literal, Union, get_args

import msgspec
import numpy as np

from cgtool.artifacts.graph import LOW32, MAX_EXEC_GRAPH_ID
from cgtool.errors import InputWarning, InvalidInputError
from cgtool.text import short_value
from cgtool.artifacts.jsonio import (DEFAULT_MAX_BYTES, Source, decode, describe_json_error, field_error, not_utf8,
                                    path_steps, read_bytes, read_whole, show_path, too_deep)

#: Event categories of GPU work, and the kind cgtool gives each.
GPU_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2}
KINDS = ("kernel", "memcpy", "memset")
_CHUNK = 1 << 16


#: Ids that go into int64 columns; graph ids leave room for the tools-id packing (id << 32) | local.
_Id = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_GraphId = Annotated[int, msgspec.Meta(ge=0, le=MAX_EXEC_GRAPH_ID)]
_Small = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]
_Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
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
    second pass, only for chunks with GPU events without a node id (they are matched by shape)."""

    grid: Union[tuple[int, ...], None] = None  # tuples: a (grid, block) pair keys a cache of launch_shape
    block: Union[tuple[int, ...], None] = None
    shared_memory: _Int64 = msgspec.field(name="shared memory", default=-1)
    nbytes: _Int64 = msgspec.field(name="bytes", default=-1)


class _ShapeEvent(msgspec.Struct, gc=False):
    args: Union[_ShapeArgs, None] = None


class _ShapedArgs(_Args, gc=False):
    """_Args and _ShapeArgs in one, for a chunk whose shapes are decoded in the first pass (see
    _decode_chunk): one decode of the chunk instead of two."""

    grid: Union[tuple[int, ...], None] = None
    block: Union[tuple[int, ...], None] = None
    shared_memory: _Int64 = msgspec.field(name="shared memory", default=-1)
    nbytes: _Int64 = msgspec.field(name="bytes", default=-1)


_shape_event = msgspec.json.Decoder(_ShapeEvent)
_shape_chunk = msgspec.json.Decoder(list[_ShapeEvent])
_raw_chunk = msgspec.json.Decoder(list[msgspec.Raw])


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


class _EventKS(_EventK, gc=False):
    """The fast path with launch shapes (see _decode_chunk)."""

    args: Union[_ShapedArgs, None] = None


class _Outer(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw]
    cgtool: msgspec.Raw = msgspec.Raw(b"null")


_outer = msgspec.json.Decoder(_Outer)
_chunk = msgspec.json.Decoder(list[_Event])
_chunk_typed = msgspec.json.Decoder(list[_EventT])
_chunk_known = msgspec.json.Decoder(list[_EventK])
_chunk_known_shaped = msgspec.json.Decoder(list[_EventKS])
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
    #: correlation id of each cudaGraphLaunch -> when its host call returned (µs; absent where the
    #: event has no duration): until then the launch was still submitting the graph's work
    launch_ends: dict[int, float] = field(default_factory=dict)
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

    def graph_ids(self) -> list[int]:
        """The exec graph ids the trace's events carry (empty without node ids), ascending."""
        return [int(x) for x in np.unique(self.graph_id[self.graph_id > 0])]

    @property
    def tracer_overhead(self) -> TracerOverhead | None:
        """What the tracer measured tracing to cost (traces written by ``cgtool trace``)."""
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
    """Parse a trace file (gzip detected by content). Errors are InvalidInputError (exit 4).

    The file is streamed (see the module's docstring): its events are decoded a window at a time
    and only their columns are kept. Anything the streaming reader does not handle (malformed
    JSON, a second ``traceEvents``, an error in an event) sends the file through the whole-document
    reader, which gives the answer or the error every reader of cgtool gives."""
    src = str(path)
    # A million new objects would trigger Python's cyclic GC over and over (none of them form
    # cycles), which makes loading superlinear: pause it for the load.
    was = gc.isenabled()
    gc.disable()
    try:
        with Source(path, max_bytes=max_bytes, piece=WINDOW) as source:
            if not source.regular:  # a FIFO or a device: it can be read only once
                data = read_whole(source)
                return _load(data, src)
            try:
                return _load_streaming(source, src)
            except _Fallback:
                pass
            except _SourceError as e:
                raise e.error from None
        return _load_whole(path, src, max_bytes)
    finally:
        if was:
            gc.enable()


def _load_whole(path: str | Path, src: str, max_bytes: int | None) -> Trace:
    data = read_bytes(path, max_bytes=max_bytes, mutable=True)
    try:
        return _load(data, src)
    finally:
        close = getattr(data, "close", None)
        if close is not None:
            try:
                close()
            except BufferError:  # pragma: no cover - a view is still alive; the GC will close it
                pass


def load_trace_bytes(data: bytes | bytearray, source: str) -> Trace:
    """A trace from bytes already read (a FIFO or a device, which can be read only once)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _load(bytearray(data), source)
    finally:
        if was:
            gc.enable()


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


# --------------------------------------------------------------------------- the whole-document reader
def _load(data: Any, src: str) -> Trace:
    """The whole document in memory: the outer object decoded with each event kept as a raw slice,
    then the events 64k at a time (the reader for FIFOs and devices, and the fallback of the
    streaming one: it gives every error message of cgtool's trace reader)."""
    try:
        outer = _outer.decode(data)
    except RecursionError:
        raise too_deep(src) from None
    except UnicodeDecodeError as e:
        raise not_utf8(src, e) from None
    except msgspec.ValidationError as e:
        raise _not_a_trace(src, e) from None
    except msgspec.DecodeError as e:
        raise InvalidInputError(describe_json_error(src, data, e)) from None
    try:
        meta = _meta(outer.cgtool, src)
        raw = outer.traceEvents
        acc = _Acc(src)
        base = _addr(data) if len(data) else 0
        part: list[msgspec.Raw] = []
        for lo in range(0, len(raw), _CHUNK):
            part = raw[lo:lo + _CHUNK]
            first = _addr(part[0]) - base
            _decode_span(data, first, _addr(part[-1]) - base + len(part[-1]), acc)
        n_raw = len(raw)
        del raw, outer, part  # the raw slices point into data: release them before it is closed
        return _finish(acc, meta, n_raw, src)
    except RecursionError:
        raise too_deep(src) from None
    except UnicodeDecodeError as e:
        raise not_utf8(src, e) from None


def _not_a_trace(src: str, e: Exception) -> InvalidInputError:
    return _bad(src, f"is not a chrome trace cgtool can read ({field_error(e)}). Expected an object with a "
                "'traceEvents' list, as torch.profiler and `cgtool trace` write.")


def _meta(raw: msgspec.Raw, src: str) -> dict[str, Any] | None:
    if bytes(raw) in (b"null", b""):
        return None
    meta = decode(raw, f"{src} (its 'cgtool' block)")
    if not isinstance(meta, dict):
        raise _bad(src, "its 'cgtool' block should be an object.")
    _check_meta(meta, src)
    return meta


def _addr(b: Any) -> int:
    return int(np.frombuffer(b, np.uint8).__array_interface__["data"][0])


def _decode_span(buf: Any, s: int, e: int, acc: "_Acc") -> None:
    """Decode the events in ``buf[s:e]`` (a run of whole events and the separators between them)
    into ``acc``'s columns: read from the text by the compiled scan where it is built and takes
    the run (see ``_columns.c``), else decoded by msgspec. msgspec decodes the span in place: the
    byte before it becomes ``[`` and the one after it ``]`` for the duration of the decode (no copy
    of the events' bytes)."""
    fast = _fast_scan()
    if fast is not None:
        got = fast.scan(buf, s, e, _CODE, acc.names, acc.ct_names, MAX_EXEC_GRAPH_ID)
        if got is not None and _add_scanned(got, acc):
            return
    saved = buf[s - 1], buf[e]
    buf[s - 1], buf[e] = 0x5B, 0x5D  # "[" and "]"
    mv = memoryview(buf)
    blob = mv[s - 1:e + 1]
    try:
        evs, shaped = _decode_chunk(blob, acc.n, acc.src, acc.shaped)
        _columnize(evs, blob, acc, shaped)
    finally:
        buf[s - 1], buf[e] = saved
        try:  # released so that the buffer can grow again (an error's traceback may still hold views)
            blob.release()
            mv.release()
        except BufferError:  # pragma: no cover - only while an error propagates
            pass


def _decode_chunk(blob: Any, lo: int, src: str, shaped: bool = False) -> tuple[list[Any], bool]:
    """Typed events of one chunk; args decoded in the same pass when every event's args fit, and
    with ``shaped`` (the previous chunk had GPU events without node ids) their launch shapes too.
    Returns the events and whether their args hold the shapes."""
    if shaped:
        try:
            return _chunk_known_shaped.decode(blob), True
        except msgspec.ValidationError:
            pass  # as below, or a malformed shape (read event by event by _shape_args)
    try:
        return _chunk_known.decode(blob), False
    except msgspec.ValidationError:
        pass  # an unknown category, or args of other types
    try:
        return _chunk_typed.decode(blob), False
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
    return out, False


def _event_error(e: Exception, blob: Any, base: int, prefix: str = "") -> str:
    """``traceEvents[1234].args.stream: expected `int` <= ..., got 18446744073709551616``: the path
    of a validation error inside a chunk (``$[k]...``) or one event's args (``$...``), and the value."""
    text = str(e)
    msg, sep, where = text.rpartition(" - at `")
    if not sep:
        return f"traceEvents[{base}]{'.' + prefix if prefix else ''}: {text}"
    steps = path_steps(where.rstrip("`")[1:])
    value: Any = None
    try:
        value = msgspec.json.decode(bytes(blob))
        for st in steps:
            value = value[st]
        got = short_value(value)
        got = f": {got}" if ", got `" in msg else f", got {got}"
    except Exception:  # the path did not lead to a value (a missing field): nothing to quote
        got = ""
    if not prefix and steps and isinstance(steps[0], int):
        head, steps = f"traceEvents[{base + steps[0]}]", steps[1:]
    else:
        head = f"traceEvents[{base}]" + (f".{prefix}" if prefix else "")
    return f"{show_path(steps, head)}: {msg[0].lower() + msg[1:]}{got}"


# --------------------------------------------------------------------------- events -> columns
class _Codes(dict[str, int]):
    """Category -> 0, 1, 2 (the GPU kinds), 3 (runtime: graph launches), 4 (anything else)."""

    def __missing__(self, key: str) -> int:
        return 4


_CODE = _Codes({**{c: 4 for c in get_args(_KnownCat)}, **GPU_CATS, **{c: 3 for c in _RUNTIME_CATS}})


class _ShapeKeys(dict[tuple[Any, Any], int]):
    """(grid, block) -> launch_shape, computed once per distinct pair."""

    def __missing__(self, key: tuple[Any, Any]) -> int:
        v = self[key] = launch_shape(*key)
        return v


_COLS = ("kind", "name", "start", "dur", "seq", "stream", "corr", "device", "gid", "nid", "chan", "ctype",
         "shape", "smem", "nbytes")
_DTYPES = {"kind": np.int8, "name": np.int32, "start": np.float64, "dur": np.float64}
_ARGS, _NAME, _CAT, _TS, _DUR, _PH = (attrgetter(k) for k in ("args", "name", "cat", "ts", "dur", "ph"))
_CTYPE = attrgetter("channel_type")
_ARG_COLS = [(c, attrgetter(f)) for c, f in (("stream", "stream"), ("corr", "correlation"), ("device", "device"),
                                             ("gid", "graph_id"), ("nid", "graph_node_id"), ("chan", "channel"))]
_GRID, _BLOCK, _SMEM, _NBYTES = (attrgetter(k) for k in ("grid", "block", "shared_memory", "nbytes"))
_NO_ARGS = _Args()
_NO_SHAPE = _ShapeArgs()


class _Acc:
    """The columns of the GPU events decoded so far (one list of arrays per column), the names
    they index, the graph launches, and the number of events (of any kind) seen."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.names: dict[str, int] = {}
        self.launches: dict[int, float] = {}
        self.launch_ends: dict[int, float] = {}
        self.ct_names: list[str] = []
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLS}
        self.shapes = _ShapeKeys()
        self.shaped = False  # the last chunk had GPU events without node ids: decode shapes with the args
        self.n = 0  # events seen: the traceEvents index of the next one
        #: Events of GPU categories that are not complete events ("ph" "B", "E", "i", ...): not GPU
        #: work, left out and counted (a warning says so). An event without "ph" is refused instead.
        self.other_ph = 0
        self.other_ph_first = -1  # the traceEvents index of the first one

    def columns(self) -> dict[str, np.ndarray]:
        """The columns, each concatenated once (its parts released as it goes)."""
        out = {}
        for k in _COLS:
            v = self.parts.pop(k)
            out[k] = np.concatenate(v) if v else np.zeros(0, _DTYPES.get(k, np.int64))
            del v
        self.parts = {k: [] for k in _COLS}
        return out


def _not_complete(acc: _Acc, lo: int, evs: list[Any], at: list[int]) -> None:
    """Events ``evs[at]`` have a GPU category but are not complete events (phase "X"): one without
    a phase is refused (a chrome trace event always has one, so the file was edited or written by a
    tool that leaves it out, and its GPU work would be lost); others are counted in ``acc``."""
    for i in at:
        e = evs[i]
        if not e.ph:
            raise _bad(acc.src, f"traceEvents[{lo + i}] ({e.cat} {e.name[:40]!r}) has no \"ph\" (phase). Every "
                       "chrome trace event has one, and GPU work is a complete event (\"ph\": \"X\"): without it "
                       "the event cannot be told from an instant or a begin/end mark, so it is not dropped silently. "
                       "Record the trace again, or add \"ph\": \"X\" to its GPU events.")
        if acc.other_ph_first < 0:
            acc.other_ph_first = lo + i
        acc.other_ph += 1


_FAST: Any = None


def _fast_columns() -> Any:
    """The compiled columns (``cgtool/artifacts/_columns.c``), or None where it is not built."""
    global _FAST
    if _FAST is None:
        _FAST = False
        if os.environ.get("CGTOOL_TRACE_COMPILED", "1") != "0":  # 0: the Python passes (to compare)
            try:
                from cgtool.artifacts import _columns  # type: ignore[attr-defined]

                _FAST = _columns
            except ImportError:
                pass
    return _FAST or None


#: The slots the compiled columns read: the event struct's and the args struct's member descriptors
#: (subclasses share their base's slots), and the args of an event without any.
_EV_FIELDS = tuple(_EventT.__dict__[k] for k in ("ph", "cat", "name", "ts", "dur", "args"))
_ARG_FIELDS = tuple(_Args.__dict__[k] for k in ("stream", "correlation", "device", "graph_id", "graph_node_id",
                                                "channel", "channel_type"))
_ARG_DEFAULTS = tuple(getattr(_NO_ARGS, k) for k in ("stream", "correlation", "device", "graph_id", "graph_node_id",
                                                     "channel", "channel_type"))


def _fast_scan() -> Any:
    """The compiled scan of the JSON text, or None where it is not built or ``CGTOOL_TRACE_SCAN=0``
    (the msgspec path, to compare)."""
    fast = _fast_columns()
    if fast is None or os.environ.get("CGTOOL_TRACE_SCAN", "1") == "0":
        return None
    return fast if hasattr(fast, "scan") else None


def _add_scanned(got: tuple[Any, ...], acc: _Acc) -> bool:
    """Add the columns of a scanned run (``_columns.scan``) to ``acc`` after the checks
    ``_columnize`` makes; False (``acc`` untouched) where a check fails: the caller then decodes
    the run with msgspec, whose path names the bad event."""
    n_all, gi_b, kind_b, ts_b, dur_b, *arg_b, name_b, shape_b, smem_b, nbytes_b, lpos_b, lcorr_b, lts_b = got[:19]
    if len(got) < 22:  # a module built before the scan returned launch durations: msgspec reads the run
        return False
    n_other, first_other = got[19:21]
    lcorr = np.frombuffer(lcorr_b, np.int64).tolist()
    lts = np.frombuffer(lts_b, np.float64)
    launches = acc.launches
    if lcorr and (not np.isfinite(lts).all() or len(set(lcorr)) != len(lcorr) or not launches.keys().isdisjoint(lcorr)):
        return False
    ts, dur = np.frombuffer(ts_b, np.float64), np.frombuffer(dur_b, np.float64)
    cols = {c: np.frombuffer(b, np.int64) for (c, _), b in zip(_ARG_COLS, arg_b)}
    n = len(ts)
    if n:
        with np.errstate(invalid="ignore"):
            bad = ((cols["stream"] < 0) | (cols["corr"] < 0) |
                   ~((np.abs(ts) < MAX_ABS_TS_US) & (dur >= 0) & (dur < MAX_DUR_US)))
        if bad.any():
            return False
    launches.update(zip(lcorr, lts.tolist()))
    ldur = np.frombuffer(got[21], np.float64)
    acc.launch_ends.update((c, t + d) for c, t, d in zip(lcorr, lts.tolist(), ldur.tolist()) if 0 <= d < MAX_DUR_US)
    lo = acc.n
    if n_other:
        acc.other_ph += n_other
        if acc.other_ph_first < 0:
            acc.other_ph_first = lo + first_other
    acc.n += n_all
    if not n:
        acc.shaped = False
        return True
    p = acc.parts
    p["kind"].append(np.frombuffer(kind_b, np.int8))
    p["name"].append(np.frombuffer(name_b, np.int32))
    p["start"].append(ts)
    p["dur"].append(dur)
    p["seq"].append(np.frombuffer(gi_b, np.int64) + lo)
    for c in cols:
        p[c].append(cols[c])
    p["ctype"].append(np.frombuffer(arg_b[-1], np.int64))
    p["shape"].append(np.frombuffer(shape_b, np.int64))
    p["smem"].append(np.frombuffer(smem_b, np.int64))
    p["nbytes"].append(np.frombuffer(nbytes_b, np.int64))
    acc.shaped = bool((cols["nid"] < 0).any())
    return True


def _columnize(evs: list[Any], blob: Any, acc: _Acc, shaped: bool = False) -> None:
    """The GPU events of one decoded chunk into ``acc``'s columns, and its graph launches.

    Hand-written for speed, measured by benchmarks/bench_deps.py: where the compiled columns are
    built, one C pass reads every field of every event (``_columns.gpu_columns``); else every
    per-event step is one C-level pass (``map`` of an attrgetter into ``np.fromiter``). Every check
    is vectorized over the chunk; the Python loops run only over graph launches and over a chunk
    with an error, to name its first bad event exactly as the per-event checks did."""
    src, lo, n_all = acc.src, acc.n, len(evs)
    fast = _fast_columns()
    got = fast.gpu_columns(evs, _EV_FIELDS, _ARG_FIELDS, _ARG_DEFAULTS, _CODE, acc.names) if fast and n_all else None
    launches = acc.launches
    if got is not None:
        code_b, launch_at, gi_b, ts_b, dur_b, *arg_cols, ctype_b, name_b = got
        code = np.frombuffer(code_b, np.int8)
        gi = np.frombuffer(gi_b, np.int64)
        launch_evs = list(map(evs.__getitem__, launch_at))
        gpu_cat = code <= 2
        if int(np.count_nonzero(gpu_cat)) != len(gi):  # GPU categories of phases other than "X"
            gpu_cat[gi] = False
            _not_complete(acc, lo, evs, np.flatnonzero(gpu_cat).tolist())
    else:
        code = np.fromiter(map(_CODE.__getitem__, map(_CAT, evs)), np.int8, n_all)
        launch_at = np.flatnonzero(code == 3).tolist()
        launch_evs = [e for e in map(evs.__getitem__, launch_at)
                      if e.ph == "X" and e.name.startswith("cudaGraphLaunch")]
        gi = np.flatnonzero(code < 3)
    for e in launch_evs:
        if e.args is not None and e.args.correlation >= 0:
            if e.args.correlation in launches:
                k = lo + next(i for i in launch_at if evs[i] is e)
                raise _bad(src, f"traceEvents[{k}]: a second cudaGraphLaunch with correlation id "
                           f"{e.args.correlation}; every launch has its own, so the replays cannot be told "
                           "apart (the file was edited or merged). Record the trace again.")
            if not math.isfinite(e.ts):
                k = lo + next(i for i in launch_at if evs[i] is e)
                raise _bad(src, f"traceEvents[{k}] (cudaGraphLaunch) has no valid ts ({e.ts}).")
            launches[e.args.correlation] = e.ts
            if 0 <= e.dur < MAX_DUR_US:  # a launch without a duration: when it returned is unknown
                acc.launch_ends[e.args.correlation] = e.ts + e.dur
    args: list[Any] | None = None
    if got is None:
        gpu = list(map(evs.__getitem__, gi.tolist()))
        x = np.fromiter(map("X".__eq__, map(_PH, gpu)), bool, len(gpu))
        if not x.all():  # instant or begin/end events of GPU categories: not GPU work
            _not_complete(acc, lo, evs, gi[~x].tolist())
            gi = gi[x]
            gpu = list(map(evs.__getitem__, gi.tolist()))
        n = len(gpu)
        if n:
            args = list(map(_ARGS, gpu))
            if None in args:
                args = [_NO_ARGS if a is None else a for a in args]
            ts = np.fromiter(map(_TS, gpu), np.float64, n)
            dur = np.fromiter(map(_DUR, gpu), np.float64, n)
            cols = {c: np.fromiter(map(get, args), np.int64, n) for c, get in _ARG_COLS}
    else:
        n = len(gi)
        if n:
            ts, dur = np.frombuffer(ts_b, np.float64), np.frombuffer(dur_b, np.float64)
            cols = {c: np.frombuffer(b, np.int64) for (c, _), b in zip(_ARG_COLS, arg_cols)}
    acc.n += n_all
    if not n:
        return
    bad_ids = (cols["stream"] < 0) | (cols["corr"] < 0)
    with np.errstate(invalid="ignore"):
        bad_time = ~((np.abs(ts) < MAX_ABS_TS_US) & (dur >= 0) & (dur < MAX_DUR_US))
    if bad_ids.any() or bad_time.any():
        k = int(np.flatnonzero(bad_ids | bad_time)[0])
        e = evs[int(gi[k])]
        if bad_ids[k]:
            raise _bad(src, f"traceEvents[{lo + int(gi[k])}] ({e.cat} {e.name[:40]!r}) lacks args.stream or "
                       "args.correlation, which every profiler writes for GPU events.")
        what = ("no 'ts'" if math.isnan(e.ts) else "no 'dur'" if math.isnan(e.dur) else
                f"a negative duration ({e.dur})" if e.dur < 0 else f"an implausible time (ts {e.ts}, dur {e.dur} µs)")
        raise _bad(src, f"traceEvents[{lo + int(gi[k])}] ({e.cat} {e.name[:40]!r}) has {what}; every GPU event "
                   "needs a start and a duration. Record the trace again.")

    def gpu_args() -> list[Any]:  # the args structs of the GPU events (for the rarer columns)
        return args if args is not None else [_NO_ARGS if a is None else a
                                              for a in map(_ARGS, map(evs.__getitem__, gi.tolist()))]

    p = acc.parts
    p["kind"].append(code[gi])
    if got is None:
        names = acc.names
        nm = list(map(_NAME, gpu))
        for s in dict.fromkeys(nm):
            if s not in names:
                names[s] = len(names)
        p["name"].append(np.fromiter(map(names.__getitem__, nm), np.int32, n))
    else:
        p["name"].append(np.frombuffer(name_b, np.int32))
    p["start"].append(ts)
    p["dur"].append(dur)
    p["seq"].append(gi.astype(np.int64) + lo)
    for c in cols:
        p[c].append(cols[c])
    if got is not None and ctype_b is not None:
        p["ctype"].append(np.frombuffer(ctype_b, np.int64))
    else:
        a_all = gpu_args()
        try:
            p["ctype"].append(np.fromiter(map(_CTYPE, a_all), np.int64, n))
        except (TypeError, ValueError):  # channel types written as names
            p["ctype"].append(np.fromiter((_ctype(a.channel_type, acc.ct_names) for a in a_all), np.int64, n))
    shape, smem, nbytes = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    need = np.flatnonzero(cols["nid"] < 0)  # no node id: matched by shape
    acc.shaped = bool(len(need))
    if len(need):
        # args of GPU events are all given here (an event without any failed the stream check)
        if shaped:
            a_all = gpu_args()
            sargs = list(map(a_all.__getitem__, need.tolist()))
        else:
            sargs = _shape_args(blob, gi[need].tolist())
        shape[need] = np.fromiter(map(acc.shapes.__getitem__, zip(map(_GRID, sargs), map(_BLOCK, sargs))),
                                  np.int64, len(need))
        smem[need] = np.fromiter(map(_SMEM, sargs), np.int64, len(need))
        nbytes[need] = np.fromiter(map(_NBYTES, sargs), np.int64, len(need))
    p["shape"].append(shape)
    p["smem"].append(smem)
    p["nbytes"].append(nbytes)


def _shape_args(blob: Any, at: list[int]) -> list[_ShapeArgs]:
    """Launch shape and size args of the chunk's events at positions ``at`` (unknown values where
    absent or malformed): a second decode of the chunk that reads only them."""
    try:
        evs = _shape_chunk.decode(blob)
        args = list(map(_ARGS, map(evs.__getitem__, at)))
        return args if None not in args else [_NO_SHAPE if a is None else a for a in args]
    except msgspec.MsgspecError:  # some event's shape args are malformed: event by event
        raws = _raw_chunk.decode(blob)
        try:
            return [_shape_of(raws[k]) for k in at]
        finally:
            del raws  # they point into the buffer


def _shape_of(raw_event: msgspec.Raw) -> _ShapeArgs:
    """The shape args of one event; unknown values where absent or malformed."""
    try:
        a = _shape_event.decode(raw_event).args
    except msgspec.MsgspecError:
        return _NO_SHAPE
    return _NO_SHAPE if a is None else a


# --------------------------------------------------------------------------- the streaming reader
#: Bytes of events decoded at a time: a chunk is the whole events inside a window of this size.
#: The reader holds about this much input, one chunk's decoded events and the columns.
WINDOW = 8 << 20
#: Plain files at least this big are read by two processes (where fork exists): see _Worker.
PARALLEL_MIN_BYTES = 64 << 20
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_END = re.compile(rb"\}\s*\]")


class _Fallback(Exception):
    """Something the streaming reader does not handle (malformed JSON, an unusual layout, an
    error to report): read the whole document instead."""


class _SourceError(Exception):
    """An error of the input itself, met while streaming: raised as it is, with no second reading."""

    def __init__(self, error: InvalidInputError) -> None:
        super().__init__(error.message)
        self.error = error


class _Probe(msgspec.Struct):
    """Any JSON object (its keys are skipped)."""


_probe = msgspec.json.Decoder(_Probe)


class _Buf:
    """A growing window on a stream of pieces: ``b`` holds the stream from offset ``off`` on."""

    def __init__(self, pieces: Iterator[bytes | memoryview], off: int = 0) -> None:
        self.b = bytearray()
        self.it = pieces
        self.eof = False
        self.off = off

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            piece = next(self.it)
        except StopIteration:
            self.eof = True
            return False
        except InvalidInputError as e:  # the input itself (the cap, a damaged gzip stream): reported as is
            raise _SourceError(e) from None
        self.b += piece
        return True

    def fill(self, n: int) -> None:
        while len(self.b) < n and self.more():
            pass

    def rest(self) -> bytes:
        while self.more():
            pass
        return bytes(self.b)

    def drop(self, k: int) -> None:
        """Forget ``b[:k]`` (bytearray deletes from the front without moving the rest)."""
        if k > 0:
            del self.b[:k]
            self.off += k


def _find_events(buf: _Buf) -> int:
    """Index in ``buf.b`` just after the ``[`` of the top-level ``traceEvents`` array. A match of
    ``"traceEvents": [`` counts only when the bytes before it end a valid prefix of the top-level
    object (checked by decoding them closed with an empty array): not inside a string or a nested
    value."""
    tried: set[int] = set()
    start = 0
    while True:
        for m in _KEY.finditer(buf.b, start):
            if m.start() in tried:
                continue
            tried.add(m.start())
            try:
                _probe.decode(bytes(buf.b[:m.start()]) + b'"traceEvents":[]}')
                return m.end()
            except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
                continue
        start = max(0, len(buf.b) - 4096)
        if not buf.more():
            raise _Fallback


def _last_sep(b: bytearray, lo: int, hi: int) -> tuple[int, int]:
    """The last event separator ``}`` , ``{`` with its ``{`` in ``b[lo:hi]``: (index of the ``}``,
    index of the ``{``), or (-1, -1). Looked for in the window's last 64 KiB first."""
    for start in (max(lo, hi - 65536), lo):
        last = None
        for last in _SEP.finditer(b, start, hi):
            pass
        if last is not None:
            return last.start(), last.end() - 1
        if start == lo:
            break
    return -1, -1


def _stream_events(buf: _Buf, pos: int, acc: _Acc, stop: int | None = None) -> int:
    """Decode the events from ``buf.b[pos]`` (the first byte of an event, a boundary known to be
    right) to the end of the array: returns the index in ``buf.b`` just after its ``]``. With
    ``stop`` (a stream offset): end instead with the event whose ``}`` is there and return -1
    (``buf.b`` then starts just after it), unless no chunk decodes ending there: then read on to
    the end of the array as without it.

    A chunk is cut after the last separator ``}``, ``{`` in the window. A cut is right when the
    chunk decodes: the chunk starts at a known boundary, so the decoder is in the state the whole
    document's decoder would be in, and a cut inside a string or a nested value leaves it
    unfinished ("truncated"). Then an earlier separator is tried; a chunk that runs past the
    array's end (a separator in what follows it) fails with "trailing characters", and the end
    is looked for among the ``]`` after a ``}``."""
    b = buf.b
    if b[pos] == 0x5D:  # "]": an empty array
        return pos + 1
    window = WINDOW
    while True:
        buf.fill(pos + window + 1)
        b = buf.b
        hi = min(len(b), pos + window)
        if stop is not None and stop - buf.off < hi:  # the bound is in this window: cut there
            c = stop - buf.off
            try:
                if b[c] != 0x7D:
                    raise _Fallback
                _decode_span(b, pos, c + 1, acc)
            except (_Fallback, msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
                stop = None  # not a boundary between events: read on (the worker's part is dropped)
                continue
            buf.drop(c + 1)
            return -1
        if buf.eof and len(b) - pos <= window:
            return _last_chunk(buf, pos, acc)
        c, j = _last_sep(b, pos, hi)
        for _ in range(8):
            if c < 0:
                break
            try:
                _decode_span(b, pos, c + 1, acc)
                break
            except msgspec.DecodeError as e:
                if "truncated" in str(e):  # the cut fell inside an event: an earlier one
                    c, j = _last_sep(b, pos, c)
                    continue
                if "trailing" in str(e):  # the array ended inside the chunk
                    return _last_chunk(buf, pos, acc)
                raise _Fallback from None
            except (UnicodeDecodeError, RecursionError):
                raise _Fallback from None
        else:
            c = -1
        if c < 0:  # an event longer than the window, or separators only inside events: a wider one
            if buf.eof and len(b) - pos <= window:
                return _last_chunk(buf, pos, acc)
            window *= 2
            if window > 64 * WINDOW:
                raise _Fallback
            continue
        window = WINDOW
        buf.drop(j - 1)
        b = buf.b
        pos = 1


_NON_WS = re.compile(rb"[^ \t\r\n]")


def _skip_ws(b: bytearray, i: int) -> int:
    m = _NON_WS.search(b, i)
    return len(b) if m is None else m.start()


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_probe_list = msgspec.json.Decoder(list[_Probe])


def _last_chunk(buf: _Buf, pos: int, acc: _Acc) -> int:
    """The events up to the array's end, which lies after ``pos``. The rest of the input is
    parsed as one array (each event skipped): the decoder stops at the array's ``]`` and says
    where the bytes after it start. Failing that, the first ``]`` after a ``}`` where the chunk
    decodes (a ``]`` inside the last events leaves the chunk truncated)."""
    buf.fill(len(buf.b) + 1)
    b = buf.b
    end = -1
    saved = b[pos - 1]
    b[pos - 1] = 0x5B  # "["
    try:
        with memoryview(b) as mv, mv[pos - 1:] as rest:
            _probe_list.decode(rest)
    except msgspec.DecodeError as err:
        m = _TRAILING.search(str(err))
        if m is not None:  # "byte N": one past the first byte after the array
            end = pos - 1 + len(bytes(b[pos - 1:pos - 2 + int(m.group(1))]).rstrip()) - 1
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        pass
    finally:
        b[pos - 1] = saved
    if end > pos and b[end] == 0x5D:
        try:
            _decode_span(b, pos, end, acc)
            return end + 1
        except msgspec.DecodeError:
            pass
        except (UnicodeDecodeError, RecursionError):
            raise _Fallback from None
    i = pos
    for _ in range(64):
        m2 = _END.search(b, i)
        if m2 is None:
            raise _Fallback
        e = m2.end() - 1
        try:
            _decode_span(b, pos, e, acc)  # the span's own "]" is the array's
            return e + 1
        except msgspec.DecodeError as err:
            if "truncated" not in str(err):
                raise _Fallback from None
        except (UnicodeDecodeError, RecursionError):
            raise _Fallback from None
        i = e + 1
    raise _Fallback


def _load_streaming(source: Source, src: str) -> Trace:
    buf = _Buf(source.pieces())
    start = _find_events(buf)
    prefix = bytes(buf.b[:start - 1])
    buf.drop(start - 1)  # keep the "[": a chunk's first byte is overwritten during its decode
    acc = _Acc(src)
    while True:  # whitespace before the first event (dropped as it is read: it may be long)
        first = _skip_ws(buf.b, 1)
        if first < len(buf.b):
            break
        buf.drop(len(buf.b) - 1)
        if not buf.more():
            raise _Fallback  # the document ends inside the array
    worker = _Worker.start(source, buf.off + first, src)
    try:
        try:
            if worker is not None:
                end = _stream_events(buf, first, acc, stop=worker.stop)
                if end == -1:
                    suffix = worker.join(acc)
                    if suffix is not None:
                        return _finish_streamed(acc, prefix, suffix, src)
                    # The worker's part is read here instead: from the event after the bound.
                    buf.fill(len(buf.b) + 1)
                    k = _skip_ws(buf.b, 0)
                    if buf.b[k:k + 1] != b",":
                        raise _Fallback
                    k = _skip_ws(buf.b, k + 1)
                    buf.drop(k - 1)
                    end = _stream_events(buf, 1, acc)
            else:
                end = _stream_events(buf, first, acc)
        except InvalidInputError:
            raise _Fallback from None
        if end < 0:
            raise _Fallback
        buf.rest()
        return _finish_streamed(acc, prefix, bytes(buf.b[end:]), src)
    finally:
        if worker is not None:
            worker.close()


def _finish_streamed(acc: _Acc, prefix: bytes, suffix: bytes, src: str) -> Trace:
    """Check the document around the events (prefix, an empty array, suffix) as the whole-document
    reader would, then finish the columns."""
    try:
        outer = _outer.decode(prefix + b"[]" + suffix)
    except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
        raise _Fallback from None
    if outer.traceEvents:  # a second "traceEvents" key: the whole-document reader takes the last
        raise _Fallback
    try:
        meta = _meta(outer.cgtool, src)
    except InvalidInputError:
        raise _Fallback from None
    return _finish(acc, meta, acc.n, src)


def _workers() -> int:
    env = os.environ.get("CGTOOL_TRACE_WORKERS")
    if env is not None:
        return max(1, int(env)) if env.isdigit() else 1
    return 2 if (os.cpu_count() or 1) >= 2 and hasattr(os, "fork") else 1


class _Worker:
    """The second half of a big plain file, read by a forked process.

    The split is the first event separator after the middle byte; the worker starts after it and
    reads to the array's end, the parent reads up to it. Whether the separator is really one
    between two events (and not inside a string) is proven by the parent's chunk that ends there
    decoding; until then the worker's result is a guess. A result that cannot be used (a wrong
    guess, any error in the worker, a launch id found in both halves) is dropped and the parent
    reads that half itself, so errors are reported as the one-process reader reports them. The
    worker's columns come back as raw bytes over a pipe (nothing is pickled)."""

    def __init__(self, pid: int, fd: int, stop: int) -> None:
        self.pid, self.fd, self.stop = pid, fd, stop

    @classmethod
    def start(cls, source: Source, first: int, src: str) -> "_Worker | None":
        size = source.size
        if size is None or size < PARALLEL_MIN_BYTES or _workers() < 2:
            return None
        mid = max(size // 2, first + 1)
        fd = source.f.fileno()
        window = os.pread(fd, 1 << 20, mid)
        m = _SEP.search(window)
        if m is None:
            return None
        stop, begin = mid + m.start(), mid + m.end() - 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: read the second half, report, exit without cleanup
            code = 0
            try:
                os.close(r)
                _Worker._run(fd, begin, src, w)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r, stop)

    @staticmethod
    def _run(fd: int, begin: int, src: str, w: int) -> None:
        def pieces() -> Iterator[bytes | memoryview]:
            off = begin - 1
            buf = bytearray(WINDOW)  # read into again and again (see jsonio._read_pieces)
            view = memoryview(buf)
            while True:
                k = os.preadv(fd, [buf], off)
                if not k:
                    return
                off += k
                yield view[:k]

        acc = _Acc(src)
        blobs: list[Any] = []
        try:
            buf = _Buf(pieces(), begin - 1)
            buf.fill(2)
            end = _stream_events(buf, 1, acc)
            buf.rest()
            suffix = bytes(buf.b[end:])
            cols = acc.columns()
            # A column of one value (the device, shapes in a trace with node ids...) goes as that value.
            const = {k: int(v[0]) for k, v in cols.items() if len(v) and k != "start" and k != "dur"
                     and bool((v == v[0]).all())}
            report: dict[str, Any] = {
                "names": list(acc.names), "ct_names": acc.ct_names, "launches": list(acc.launches.items()),
                "launch_ends": list(acc.launch_ends.items()),
                "n": acc.n, "suffix": len(suffix), "const": const,
                "other_ph": [acc.other_ph, acc.other_ph_first],
                "cols": [(k, str(v.dtype), len(v)) for k, v in cols.items()]}
            blobs = [v.data.cast("B") for k, v in cols.items() if k not in const] + [suffix]
        except BaseException as e:  # the parent reads this half itself (and reports any error)
            report = {"error": f"{type(e).__name__}: {e}"}
        hb = msgspec.json.encode(report)
        with os.fdopen(w, "wb") as f:
            f.write(len(hb).to_bytes(8, "little"))
            f.write(hb)
            for blob in blobs:
                f.write(blob)

    def join(self, acc: _Acc) -> bytes | None:
        """Add the worker's columns to ``acc`` (the parent's, complete up to the bound); returns
        the document's bytes after the events, or None where the parent must read on itself."""
        with os.fdopen(os.dup(self.fd), "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            head: dict[str, Any] = msgspec.json.decode(f.read(size)) if size else {"error": "died"}
            if "error" in head:
                return None
            theirs = {}
            for k, dt, m in head["cols"]:
                if k in head["const"]:
                    theirs[k] = np.full(m, head["const"][k], dtype=dt)
                    continue
                arr = np.empty(m, dtype=dt)
                if m and f.readinto(arr.data.cast("B")) != arr.nbytes:
                    return None
                theirs[k] = arr
            suffix = f.read(head["suffix"])
        if any(int(c) in acc.launches for c, _ in head["launches"]):
            return None  # reported by the parent's own reading of that half
        # The worker's name (and channel type name) indices are remapped to the parent's.
        remap = np.array([acc.names.setdefault(x, len(acc.names)) for x in head["names"]], dtype=np.int32)
        if len(theirs["name"]):
            theirs["name"] = remap[theirs["name"]]
        if head["ct_names"]:
            ct_map = {}
            for i, x in enumerate(head["ct_names"]):
                if x not in acc.ct_names:
                    acc.ct_names.append(x)
                ct_map[1000 + i] = 1000 + acc.ct_names.index(x)
            theirs["ctype"] = np.array([ct_map.get(int(v), int(v)) for v in theirs["ctype"]], dtype=np.int64)
        theirs["seq"] += acc.n
        for k in _COLS:
            acc.parts[k].append(theirs.pop(k))
        for c, t in head["launches"]:
            acc.launches[int(c)] = float(t)
        for c, t in head["launch_ends"]:
            acc.launch_ends[int(c)] = float(t)
        n_other, first_other = head["other_ph"]
        if n_other:
            if acc.other_ph_first < 0:
                acc.other_ph_first = acc.n + int(first_other)
            acc.other_ph += int(n_other)
        acc.n += int(head["n"])
        return suffix

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:  # pragma: no cover
            pass
        try:
            os.kill(self.pid, 9)  # done or not needed: its result was read or dropped
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # pragma: no cover
            pass


def _finish(acc: _Acc, meta: dict[str, Any] | None, n_raw: int, src: str) -> Trace:
    names, launches, ct_names = list(acc.names), acc.launches, acc.ct_names
    if acc.other_ph:
        many = acc.other_ph > 1
        warnings.warn(InputWarning(
            f"{src}: {acc.other_ph} event{'s' if many else ''} of GPU categories (the first at "
            f"traceEvents[{acc.other_ph_first}]) {'have' if many else 'has'} another phase than a complete event "
            f"(\"ph\": \"X\"): {'they are' if many else 'it is'} not GPU work (an instant, a begin or end mark) "
            "and left out of the analysis."), stacklevel=2)
    cols = acc.columns()

    def col(k: str, dtype: Any) -> np.ndarray:
        return cols.pop(k).astype(dtype, copy=False)

    kind, name, seq = col("kind", np.int8), col("name", np.int32), col("seq", np.int64)
    start = col("start", np.float64)
    end = col("dur", np.float64)
    end += start
    np.round(end, 3, out=end)
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
    del nid, full, low
    tools[gid == 0] = 0  # CUPTI writes graph id 0 for work outside graphs
    _check_events(src, seq, names, name, kind, start, end, stream, device, corr, tools, gid, launches)
    return Trace(
        source=src, kind=kind, name=name, names=names, start=start, end=end, device=device,
        stream=stream, correlation=corr, graph_id=gid, tools_id=tools, channel=chan,
        channel_type=ctype, seq=seq, launches=launches, launch_ends=acc.launch_ends, cgtool=meta, n_events=n_raw,
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
    return short_value(v)


def _check_events(src: str, seq: np.ndarray, names: list[str], name: np.ndarray, kind: np.ndarray,
                  start: np.ndarray, end: np.ndarray, stream: np.ndarray, device: np.ndarray, corr: np.ndarray,
                  tools: np.ndarray, gid: np.ndarray, launches: dict[int, float]) -> None:
    """Refuse GPU events that contradict each other; warn when graph ids are missing from part of them."""
    n = len(start)
    if n < 2:
        return
    # The same event listed twice (a file concatenated with itself, an edit): every column equal.
    # Only events sharing a start with another can be one, so the full sort runs on those alone
    # (in file order: the sort is stable, so they keep the order a sort of every event gives).
    by_start = np.sort(start)
    tie = by_start[1:] == by_start[:-1]
    if tie.any():
        tied = np.zeros(n, dtype=bool)
        tied[1:] |= tie
        tied[:-1] |= tie
        cand = np.flatnonzero(np.isin(start, by_start[tied]))
    else:
        cand = np.zeros(0, np.int64)
    order = cand[np.lexsort((name[cand], stream[cand], device[cand], corr[cand], end[cand], start[cand]))]
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
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
        c_on, t_on = corr[on], tools[on]
        o = np.lexsort((t_on, c_on))
        c_on, t_on = c_on[o], t_on[o]
        dup = (c_on[1:] == c_on[:-1]) & (t_on[1:] == t_on[:-1])
        if dup.any():
            runs = np.flatnonzero(np.r_[True, ~dup, True])
            counts = np.diff(runs)  # multiplicity of each distinct (correlation, node) pair, in sorted order
            i = int(runs[int(np.flatnonzero(counts > 1)[0])])
            c, t = int(c_on[i]), int(t_on[i])
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
