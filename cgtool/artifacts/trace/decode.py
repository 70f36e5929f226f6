"""Chrome-trace events into columns: the msgspec structs that hold the fields cgtool uses, the
whole-document reader (``_load``: FIFOs, devices, and the streaming reader's fallback), a run of
events decoded into an accumulator of columns (by the compiled scan of ``_columns.c`` where it is
built, else by msgspec), and the finished ``Trace``."""

from __future__ import annotations

import gc
import math
import os
import warnings
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import msgspec
import numpy as np

from cgtool.artifacts.graph import LOW32, MAX_EXEC_GRAPH_ID
from cgtool.artifacts.jsonio import (DEFAULT_MAX_BYTES, decode, describe_json_error, field_error, not_utf8,
                                    path_steps, read_bytes, show_path, too_deep)
from cgtool.artifacts.trace.checks import _check_events, _check_meta, _ctype
from cgtool.artifacts.trace.model import (GPU_CATS, MAX_ABS_TS_US, MAX_DUR_US, NodeIdForm, Trace, _bad,
                                          launch_shape)
from cgtool.errors import InputWarning, InvalidInputError
from cgtool.text import short_value

_CHUNK = 1 << 16


#: Ids that go into int64 columns; graph ids leave room for the tools-id packing (id << 32) | local.
_Id = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_GraphId = Annotated[int, msgspec.Meta(ge=0, le=MAX_EXEC_GRAPH_ID)]
_Small = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]
_Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


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
    # When each launch's host call returned (a launch without a valid duration: unknown, left out);
    # the same float sums as per launch, in one numpy pass (a chunk holds ~1,000 launches).
    with np.errstate(invalid="ignore"):
        timed = (ldur >= 0) & (ldur < MAX_DUR_US)
    ends = lts + ldur
    if timed.all():
        acc.launch_ends.update(zip(lcorr, ends.tolist()))
    else:
        acc.launch_ends.update(zip(np.frombuffer(lcorr_b, np.int64)[timed].tolist(), ends[timed].tolist()))
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
