"""CUPTI activity collection with cupti-python: kernels, memcpys, memsets and cudaGraphLaunch calls.

Records are copied into plain dicts inside CUPTI's buffer-completed callback (the buffer is reused
afterwards). Buffers are 8 MiB each and flushed with ``activity_flush_all(1)`` at the end, so
nothing is left behind; dropped records, if CUPTI reports any, are counted and reported.
:class:`CuptiOptions` picks the record kinds and settings; ``benchmarks/bench_trace_overhead.py``
measures what each costs a replay.

CUPTI held by this process blocks a later ``torch.profiler`` session in the same process
(Kineto's CUPTI initialisation fails); :data:`cupti_was_used` records it so callers can refuse.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from cgtool.capture._deps import require_cupti

#: True once this process enabled CUPTI activity tracing (torch.profiler will not work afterwards).
cupti_was_used = False

_BUFFER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class CuptiOptions:
    """How the activity API is set up (``benchmarks/bench_trace_overhead.py`` compares them).

    Whatever the options, every GPU record keeps what ``deps`` needs: ids, channel, graph and
    graph node ids, correlation id. The defaults are what ``bench_trace_overhead.py`` kept:
    KERNEL records serialise concurrent kernels (the tracer would create the fake dependencies
    ``deps`` looks for), ``launches="graph"`` produced no launch records there, and neither buffer
    size nor ``hw_trace`` (refused on Hopper) changed the overhead measurably.
    """

    kernel_kind: str = "concurrent"  # "concurrent": CONCURRENT_KERNEL; "kernel": KERNEL (serialises kernels)
    launches: str = "runtime"  # "runtime": the whole RUNTIME kind; "graph": cudaGraphLaunch* records only
    hw_trace: bool = False  # kernel timestamps from the hardware event system (newer GPUs only)
    latency_timestamps: bool = False  # queued/submitted timestamps (not used by cgtool)
    buffer_bytes: int = _BUFFER_BYTES  # host buffer per request: fewer, larger buffers flush less often
    device_buffer_bytes: int | None = None  # CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE (None: CUPTI's default)

    def label(self) -> str:
        parts = [self.kernel_kind, f"launches={self.launches}"]
        if self.hw_trace:
            parts.append("hw_trace")
        if self.latency_timestamps:
            parts.append("latency_ts")
        if self.buffer_bytes != _BUFFER_BYTES:
            parts.append(f"buf={self.buffer_bytes >> 20}MiB")
        if self.device_buffer_bytes is not None:
            parts.append(f"devbuf={self.device_buffer_bytes >> 20}MiB")
        return ",".join(parts)


class CuptiCollector:
    """Context manager: ``with CuptiCollector() as c: ...`` then ``c.records``."""

    def __init__(self, options: CuptiOptions | None = None) -> None:
        self.cupti = require_cupti("`cgtool trace` with CUPTI")
        self.options = options or CuptiOptions()
        self.records: list[dict[str, Any]] = []
        self.dropped = 0
        self.buffers = 0
        self.notes: list[str] = []  # settings CUPTI refused (e.g. hw_trace on a GPU without it)
        K = self.cupti.ActivityKind
        kernel = K.KERNEL if self.options.kernel_kind == "kernel" else K.CONCURRENT_KERNEL
        self.kinds = [kernel, K.MEMCPY, K.MEMSET]
        if self.options.launches == "runtime":
            self.kinds.append(K.RUNTIME)
        self._launch_cbids = {
            int(v)
            for name, v in self.cupti.runtime_api_trace_cbid.__members__.items()
            if name.startswith("cudaGraphLaunch")
        }

    # -- callbacks: keep them small, they run on CUPTI's thread
    def _requested(self) -> tuple[int, int]:
        return self.options.buffer_bytes, 0

    def _completed(self, activities: list[Any]) -> None:
        self.buffers += 1
        K = self.cupti.ActivityKind
        for a in activities:
            kind = int(a.kind)
            if kind == K.CONCURRENT_KERNEL or kind == K.KERNEL:
                rec = _gpu_record(a, "kernel", a.name)
                rec["grid"] = [a.grid_x, a.grid_y, a.grid_z]
                rec["block"] = [a.block_x, a.block_y, a.block_z]
                self.records.append(rec)
            elif kind == K.MEMCPY or kind == K.MEMSET:
                is_copy = kind == K.MEMCPY
                rec = _gpu_record(a, "memcpy" if is_copy else "memset", "Memcpy" if is_copy else "Memset")
                rec["bytes"] = a.bytes
                self.records.append(rec)
            elif kind == K.RUNTIME and int(a.cbid) in self._launch_cbids:
                self.records.append(
                    {
                        "kind": "launch",
                        "name": "cudaGraphLaunch",
                        "start": a.start,
                        "end": a.end,
                        "correlation": a.correlation_id,
                        "process": a.process_id,
                        "thread": a.thread_id,
                    }
                )

    def _try(self, what: str, fn: Any, *args: Any) -> bool:
        try:
            fn(*args)
            return True
        except Exception as e:  # cupti.cuptiError: the setting is not supported here
            self.notes.append(f"{what}: {e}")
            return False

    def __enter__(self) -> "CuptiCollector":
        global cupti_was_used
        cupti_was_used = True
        cp, o = self.cupti, self.options
        cp.activity_register_callbacks(self._requested, self._completed)
        self._try("latency timestamps", cp.activity_enable_latency_timestamps, int(o.latency_timestamps))
        if o.hw_trace:
            self._try("hw_trace", cp.activity_enable_hw_trace, 1)
        if o.device_buffer_bytes is not None:
            size = ctypes.c_size_t(o.device_buffer_bytes)
            nbytes = ctypes.c_size_t(ctypes.sizeof(size))  # cuptiActivitySetAttribute takes size_t* valueSize
            self._try("device buffer size", cp.activity_set_attribute, cp.ActivityAttribute.ATTR_DEVICE_BUFFER_SIZE,
                      ctypes.addressof(nbytes), ctypes.addressof(size))
        for k in self.kinds:
            cp.activity_enable(k)
        if o.launches == "graph":
            for cbid in sorted(self._launch_cbids):
                self._try("graph launch records", cp.activity_enable_runtime_api, cbid, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        cp = self.cupti
        cp.activity_flush_all(1)
        for k in self.kinds:
            try:
                cp.activity_disable(k)
            except Exception:
                pass
        if self.options.launches == "graph":
            for cbid in sorted(self._launch_cbids):
                self._try("graph launch records off", cp.activity_enable_runtime_api, cbid, 0)
        if self.options.hw_trace:
            self._try("hw_trace off", cp.activity_enable_hw_trace, 0)
        cp.activity_flush_all(1)
        self.dropped = _dropped(cp)


def _gpu_record(a: Any, kind: str, name: str) -> dict[str, Any]:
    """The fields every GPU activity record shares (kernel, memcpy, memset)."""
    return {
        "kind": kind,
        "name": name,
        "start": a.start,
        "end": a.end,
        "device": a.device_id,
        "context": a.context_id,
        "stream": a.stream_id,
        "correlation": a.correlation_id,
        "graph_id": a.graph_id,
        "graph_node_id": a.graph_node_id,
        "channel": a.channel_id,
        "channel_type": int(a.channel_type),
    }


def _dropped(cupti: Any) -> int:
    """Records CUPTI dropped for lack of buffer space (0 when it cannot tell)."""
    try:
        return int(cupti.activity_get_num_dropped_records(0, 0))
    except TypeError:
        try:
            return int(cupti.activity_get_num_dropped_records(0, 0, 0))
        except Exception:
            return 0
    except Exception:
        return 0
