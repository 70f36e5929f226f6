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

The package: ``model`` (the ``Trace`` columns and the types beside them), ``decode`` (events into
columns, the whole-document reader), ``stream`` (the streaming reader and its worker process),
``checks`` (what is refused once every event is read). Importing a model type loads only
``model``: the readers are imported on first use of ``load_trace`` and its siblings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cgtool.artifacts.trace.model import (GPU_CATS, KINDS, MAX_ABS_TS_US, MAX_DUR_US, GpuEvent, NodeIdForm, Trace,
                                          TracerOverhead, launch_shape)

if TYPE_CHECKING:
    from cgtool.artifacts.trace.decode import load_trace_and_doc, load_trace_bytes
    from cgtool.artifacts.trace.stream import PARALLEL_MIN_BYTES, WINDOW, load_trace

__all__ = ["GPU_CATS", "KINDS", "MAX_ABS_TS_US", "MAX_DUR_US", "GpuEvent", "NodeIdForm", "PARALLEL_MIN_BYTES",
           "Trace", "TracerOverhead", "WINDOW", "launch_shape", "load_trace", "load_trace_and_doc",
           "load_trace_bytes"]

#: The readers' names, and the module each lives in (imported on first use).
_LAZY = {"load_trace": "stream", "WINDOW": "stream", "PARALLEL_MIN_BYTES": "stream",
         "load_trace_bytes": "decode", "load_trace_and_doc": "decode"}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{where}"), name)
