"""CUPTI activity collection with cupti-python: kernels, memcpys, memsets and cudaGraphLaunch calls.

Records are copied into plain dicts inside CUPTI's buffer-completed callback (the buffer is reused
afterwards). Buffers are 8 MiB each and flushed with ``activity_flush_all(1)`` at the end, so
nothing is left behind; dropped records, if CUPTI reports any, are counted and reported.

CUPTI held by this process blocks a later ``torch.profiler`` session in the same process
(Kineto's CUPTI initialisation fails); :data:`cupti_was_used` records it so callers can refuse.
"""

from __future__ import annotations

from typing import Any

from cgtool.capture._deps import require_cupti

#: True once this process enabled CUPTI activity tracing (torch.profiler will not work afterwards).
cupti_was_used = False

_BUFFER_BYTES = 8 * 1024 * 1024


class CuptiCollector:
    """Context manager: ``with CuptiCollector() as c: ...`` then ``c.records``."""

    def __init__(self) -> None:
        self.cupti = require_cupti("`cgtool trace` with CUPTI")
        self.records: list[dict[str, Any]] = []
        self.dropped = 0
        self.buffers = 0
        K = self.cupti.ActivityKind
        self.kinds = [K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET, K.RUNTIME]
        self._launch_cbids = {
            int(v)
            for name, v in self.cupti.runtime_api_trace_cbid.__members__.items()
            if name.startswith("cudaGraphLaunch")
        }

    # -- callbacks: keep them small, they run on CUPTI's thread
    def _requested(self) -> tuple[int, int]:
        return _BUFFER_BYTES, 0

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

    def __enter__(self) -> "CuptiCollector":
        global cupti_was_used
        cupti_was_used = True
        self.cupti.activity_register_callbacks(self._requested, self._completed)
        for k in self.kinds:
            self.cupti.activity_enable(k)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cupti.activity_flush_all(1)
        for k in self.kinds:
            try:
                self.cupti.activity_disable(k)
            except Exception:
                pass
        self.cupti.activity_flush_all(1)
        self.dropped = _dropped(self.cupti)


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
