"""The trace model: a chrome trace's GPU events as numpy columns (``Trace``), one event for messages
(``GpuEvent``), what tracing cost (``TracerOverhead``), and the launch-shape key shared with graph
nodes. Importing it loads no reader (``decode``, ``stream``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from cgtool.errors import InvalidInputError

#: Event categories of GPU work, and the kind cgtool gives each.
GPU_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2}
KINDS = ("kernel", "memcpy", "memset")
#: Plausible times (µs): a timestamp within ±30 years, a duration under 11 days.
MAX_ABS_TS_US = 1e15
MAX_DUR_US = 1e12


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
        ids = self.graph_id[self.graph_id > 0]
        if len(ids) and int(ids.max()) <= 4 * len(ids) + 4096:  # a table, not np.unique (numpy.ma's import)
            return np.flatnonzero(np.bincount(ids)).tolist()
        s = np.sort(ids)
        return s[np.concatenate(([True], s[1:] != s[:-1]))].tolist() if len(s) else []

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
