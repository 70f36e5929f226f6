"""A recorded process's memory ledger and its index's graph entries.

:func:`ledger` reads torch's allocator segments at exit; :func:`graph_entry` is one graph of the
process's ``index.json`` (replays, pool, capture times, traced launches). The index itself and the
trace are written by ``recorder.py``, which holds the state they are made from. No CUDA call is
made here except :func:`ledger`'s reads of torch's allocator (at the end of the run, on the exiting
thread).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import msgspec

from cgtool.artifacts.recording import (GraphEntry, GraphInputs, GraphMemory, InputChecks, MemoryLedger, PoolBytes,
                                        RecorderSeconds, TracedLaunch as LaunchEntry)
from cgtool.capture.record import attribution
from cgtool.capture.snapshot import allocator_snapshot

if TYPE_CHECKING:
    from cgtool.capture.record.tracker import GraphRecord, TracedLaunch

def ledger(graphs: list[GraphRecord]) -> MemoryLedger | None:
    """Bytes reserved per pool (torch's allocator segments) and per graph, against the peak (None in a
    process without CUDA through torch)."""
    torch = sys.modules.get("torch")  # a program that never imported torch has no pools to report
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        # not torch.cuda.memory_snapshot(): with the allocator history on (--check-inputs), its frames
        # are symbolized, and torch's symbolizer imports torch._inductor (seconds) in a program that
        # never compiled; allocator_snapshot() keeps it out
        segs = allocator_snapshot(torch)["segments"]
        peak = int(torch.cuda.max_memory_reserved())
        reserved = int(torch.cuda.memory_reserved())
    except Exception as e:
        return MemoryLedger(error=f"{type(e).__name__}: {e}")
    pools: dict[str, int] = {}
    for s in segs:
        pid = s.get("segment_pool_id")
        if pid is None or tuple(pid) == (0, 0):
            continue
        key = f"{pid[0]},{pid[1]}"
        pools[key] = pools.get(key, 0) + int(s.get("total_size", 0))
    graphs_of: dict[str, list[int]] = {}
    for r in graphs:
        if r.pool is not None:
            graphs_of.setdefault(f"{r.pool[0]},{r.pool[1]}", []).append(r.seq)
    return MemoryLedger(
        pools=[PoolBytes(pool=k, bytes_reserved=v, graphs=graphs_of.get(k, [])) for k, v in sorted(pools.items())],
        graphs=[GraphMemory(seq=r.seq, pool=None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
                            reserved_during_capture=r.reserved_during_capture) for r in graphs],
        bytes_held_by_graph_pools=sum(pools.values()),
        bytes_reserved_at_exit=reserved,
        peak_bytes_reserved=peak,
        note="pool bytes are torch's allocator segments tagged with the pool at exit; "
        "reserved_during_capture is the memory the process took from CUDA while the graph was captured "
        "(cudaMalloc and cuMemCreate, less what was freed; for torch's allocator, the growth of its "
        "reserved memory)",
    )


def _launch_site(t: TracedLaunch) -> str | None:
    site = getattr(t, "_site", False)
    if site is False:
        s = attribution.resolve(t.frames)
        site = f"{s.file}:{s.line}" if s.file else None
        t._site = site  # type: ignore[attr-defined]  # resolved once, kept with the launch
    return site  # type: ignore[return-value]


def graph_entry(r: GraphRecord, replays: int, coverage: Any = None, inputs: Any = None) -> GraphEntry:
    """``inputs``: the process's ``inputs.InputWatch`` (``--check-inputs``), or None."""
    return GraphEntry(
        label=r.label, file=r.file, exec_graph_id=r.exec_graph_id,
        template_graph_id=r.template_graph_id, nodes=r.nodes, captured_at=r.captured_at,
        capture_s=r.capture_s, instantiate_s=r.instantiate_s, export_s=r.export_s,
        write_s=r.write_s, recorder_s=msgspec.convert(r.recorder_s, RecorderSeconds),
        reserved_during_capture=r.reserved_during_capture,
        pool=None if r.pool is None else f"{r.pool[0]},{r.pool[1]}",
        replays=replays, replays_complete=not r.suspended_replays,
        traced_replays=len(r.traced), compiled_code=r.compiled,
        capture_inputs=r.shapes,
        time_since_start_s=r.since_start_s,
        traced_launches=[LaunchEntry(correlation=t.correlation, launch_seq=t.launch_seq, site=_launch_site(t))
                         for t in r.traced],
        kernel_ns=coverage.graph_ns.get(r.exec_graph_id, 0) if coverage is not None else None,
        kernels=coverage.graph_kernels.get(r.exec_graph_id, 0) if coverage is not None else None,
        inputs=_graph_inputs(inputs, r.seq, replays) if inputs is not None else None,
    )


def _graph_inputs(inputs: Any, seq: int, replays: int) -> GraphInputs:
    try:
        return msgspec.convert(inputs.entry(seq, replays), GraphInputs)
    except Exception as e:  # never lose the index over the checks
        return GraphInputs(checked=False, why_not=f"recorder error: {type(e).__name__}: {e}")


def input_checks(inputs: Any) -> InputChecks | None:
    """The process's ``input_checks`` (None without ``--check-inputs``)."""
    if inputs is None:
        return None
    try:
        return msgspec.convert(inputs.process_entry(), InputChecks)
    except Exception as e:
        return InputChecks(errors=[f"recorder error: {type(e).__name__}: {e}"])
