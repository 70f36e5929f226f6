"""Reading chrome traces (cgtool's own, and the PyTorch profiler's) into GPU events.

Decoding is typed (msgspec): only the fields cgtool needs are materialised, each event's ``args``
is kept as raw bytes and decoded only for GPU events. Every form PyTorch writes is accepted:

* ``"graph node id"`` holding the full 64-bit tools id, or only its low 32 bits beside
  ``"graph id"`` (PyTorch's newer CUPTI monitor);
* with or without ``"channel"`` / ``"channel_type"``;
* no graph ids at all (Kineto in torch ≤ 2.12): kernels of one replay share the correlation id of
  their ``cudaGraphLaunch``; ``graph_id`` is then None and the match to graph nodes is inferred
  (see ``cgtool.inspect.deps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from cgtool.errors import InvalidInputError
from cgtool.jsonio import DEFAULT_MAX_BYTES, describe_json_error, read_bytes

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "Kernel": "kernel",
            "Memcpy": "memcpy", "Memset": "memset"}
LOW32 = 0xFFFFFFFF


class _Args(msgspec.Struct):
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    graph_id: int | None = msgspec.field(name="graph id", default=None)
    graph_node_id: int | None = msgspec.field(name="graph node id", default=None)
    channel: int | None = None
    channel_type: int | str | None = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]
    cgtool: msgspec.Raw = msgspec.Raw(b"null")


_trace_decoder = msgspec.json.Decoder(_Trace)
_args_decoder = msgspec.json.Decoder(_Args)


@dataclass(slots=True)
class GpuEvent:
    """One GPU activity: a kernel, memcpy or memset. Times in µs."""

    kind: str
    name: str
    start: float
    end: float
    device: int
    stream: int
    correlation: int
    graph_id: int | None  # exec graph id, None when the trace carries no graph ids
    tools_id: int | None  # full 64-bit graph node id, None when unknown
    channel: int | None
    channel_type: int | str | None
    seq: int  # position in the file (for messages)


@dataclass
class Trace:
    """GPU events and graph launches of a chrome trace, plus cgtool's embedded block if any."""

    source: str
    events: list[GpuEvent]
    launches: dict[int, float]  # correlation id of each cudaGraphLaunch -> host start (µs)
    cgtool: dict[str, Any] | None = None
    n_events: int = 0
    has_channels: bool = False
    has_graph_ids: bool = False
    node_id_form: str = "none"  # "full", "low32+graph id", "none"
    notes: list[str] = field(default_factory=list)


def _bad(source: str, msg: str) -> InvalidInputError:
    return InvalidInputError(f"{source}: {msg}")


def load_trace(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """Parse a trace file (gzip detected by content). Errors are InvalidInputError (exit 4)."""
    src = str(path)
    data = read_bytes(path, max_bytes=max_bytes)
    try:
        doc = _trace_decoder.decode(data)
    except msgspec.ValidationError as e:
        raise _bad(src, f"is not a chrome trace cgtool can read: {e}. Expected an object with a "
                   "'traceEvents' list, as torch.profiler and `cgtool trace` write.") from None
    except msgspec.DecodeError as e:
        raise InvalidInputError(describe_json_error(src, data, e)) from None
    del data
    return _from_events(doc, src)


def _from_events(doc: _Trace, src: str) -> Trace:
    events: list[GpuEvent] = []
    launches: dict[int, float] = {}
    node_forms: set[str] = set()
    chans = False
    decode = _args_decoder.decode
    for seq, e in enumerate(doc.traceEvents):
        kind = GPU_CATS.get(e.cat)
        if kind is None:
            if e.name.startswith("cudaGraphLaunch") and e.ph == "X":
                try:
                    a = decode(e.args)
                except msgspec.MsgspecError as err:
                    raise _bad(src, f"traceEvents[{seq}] (cudaGraphLaunch) has bad args: {err}.") from None
                if a.correlation is not None:
                    launches[a.correlation] = e.ts
            continue
        if e.ph != "X":
            continue
        try:
            a = decode(e.args)
        except msgspec.MsgspecError as err:
            raise _bad(src, f"traceEvents[{seq}] ({e.cat} {e.name[:40]!r}) has bad args: {err}. "
                       "Record the trace again.") from None
        if a.stream is None or a.correlation is None:
            raise _bad(src, f"traceEvents[{seq}] ({e.cat} {e.name[:40]!r}) lacks args.stream or "
                       "args.correlation, which every profiler writes for GPU events.")
        if e.dur < 0:
            raise _bad(src, f"traceEvents[{seq}] has a negative duration ({e.dur}).")
        gid, tid = a.graph_id, None
        if a.graph_node_id is not None:
            v = a.graph_node_id
            if v > LOW32:
                tid = v
                node_forms.add("full")
                if gid is not None and gid != v >> 32:
                    raise _bad(src, f"traceEvents[{seq}]: 'graph node id' {v} belongs to graph "
                               f"{v >> 32} but 'graph id' says {gid}.")
                gid = v >> 32
            elif gid:
                tid = (gid << 32) | v
                node_forms.add("low32+graph id")
            elif gid is None and v:
                raise _bad(src, f"traceEvents[{seq}]: 'graph node id' {v} holds only the low 32 "
                           "bits and there is no 'graph id' to complete it.")
        if gid == 0:
            gid = None  # CUPTI writes 0 for work outside graphs
        if a.channel is not None:
            chans = True
        events.append(
            # ends rounded to the nanosecond, so equal ends compare equal after float addition
            GpuEvent(kind, e.name, e.ts, round(e.ts + e.dur, 3), a.device if a.device is not None else 0,
                     a.stream, a.correlation, gid, tid, a.channel, a.channel_type, seq)
        )
    meta = None
    if bytes(doc.cgtool) not in (b"null", b""):
        try:
            meta = msgspec.json.decode(doc.cgtool)
        except msgspec.DecodeError as err:  # pragma: no cover - the outer decode validated it
            raise _bad(src, f"its 'cgtool' block is not valid JSON: {err}") from None
        if not isinstance(meta, dict):
            raise _bad(src, "its 'cgtool' block should be an object.")
    t = Trace(src, events, launches, meta, len(doc.traceEvents))
    t.has_channels = chans
    t.has_graph_ids = any(ev.graph_id is not None for ev in events)
    t.node_id_form = "full" if "full" in node_forms else ("low32+graph id" if node_forms else "none")
    return t
