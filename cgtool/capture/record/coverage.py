"""CUPTI's kernel activity for a whole recorded run: the share of kernel time inside graph replays,
and the records of the traced replays (``--coverage``, ``--trace-replays``).

Kernel records of graph replays carry the exec graph id: kernel time is summed per graph and
outside graphs, over the run and from the first graph's instantiation on (warm-up and the first
compilation run before it). Only the records of the replays picked for tracing are kept (their
correlation ids, ``GraphTracker.traced``): a whole run's kernels would not fit.
"""

from __future__ import annotations

from typing import Any, Callable

from cgtool.artifacts.recording import KernelCoverage

#: The activity buffer CUPTI asks for (bytes): large enough that a serving loop flushes rarely.
BUFFER_BYTES = 8 * 1024 * 1024


class Coverage:
    """Sums of CUPTI kernel records, fed by CUPTI's buffer callback."""

    def __init__(self, *, tracing: bool, traced: set[int], first_graph: Callable[[], int | None]) -> None:
        self.tracing = tracing
        self.traced = traced  # correlation ids of the replays to trace (the tracker's set)
        self.first_graph = first_graph  # CUPTI timestamp of the first instantiation, once known
        self.graph_ns: dict[int, int] = {}
        self.graph_kernels: dict[int, int] = {}
        self.eager_ns = self.eager_kernels = 0
        self.eager_after_ns = self.eager_after_kernels = 0  # outside graphs, after the first graph
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._cupti: Any = None
        self._kinds: list[Any] = []
        self._K: Any = None

    def start(self, cupti: Any) -> None:
        from cgtool.capture import cupti_trace

        self._cupti = cupti
        cupti_trace.cupti_was_used = True
        K = self._K = cupti.ActivityKind
        self._kinds = [K.CONCURRENT_KERNEL]
        if self.tracing:
            self._kinds += [K.MEMCPY, K.MEMSET, K.RUNTIME]
        cupti.activity_register_callbacks(lambda: (BUFFER_BYTES, 0), self.buffer_completed)
        for k in self._kinds:
            cupti.activity_enable(k)

    def stop(self) -> None:
        """Flush what CUPTI holds and turn the activity off (the end of the run, or a suspension)."""
        cupti = self._cupti
        if cupti is None:
            return
        try:
            cupti.activity_flush_all(1)
            for k in self._kinds:
                cupti.activity_disable(k)
            cupti.activity_flush_all(1)
        except Exception as e:
            self.errors.append(f"activity flush: {e}")
        self._cupti = None

    def buffer_completed(self, activities: list[Any]) -> None:
        """Sum kernel time in and out of graphs; keep the records of the traced replays only."""
        from cgtool.capture.cupti_trace import _gpu_record

        K = self._K
        traced = self.traced
        tracing = self.tracing
        kern, kern2 = int(K.CONCURRENT_KERNEL), int(K.KERNEL)
        in_graph, in_graph_n = self.graph_ns, self.graph_kernels
        eager_ns = eager_n = after_ns = after_n = 0
        t_first = self.first_graph()
        for a in activities:
            kind = int(a.kind)
            if kind == kern or kind == kern2:
                gid = a.graph_id
                d = a.end - a.start
                if gid:
                    in_graph[gid] = in_graph.get(gid, 0) + d
                    in_graph_n[gid] = in_graph_n.get(gid, 0) + 1
                else:
                    eager_ns += d
                    eager_n += 1
                    if t_first is not None and a.start >= t_first:
                        after_ns += d
                        after_n += 1
                if tracing and a.correlation_id in traced:
                    rec = _gpu_record(a, "kernel", a.name)
                    rec["grid"] = [a.grid_x, a.grid_y, a.grid_z]
                    rec["block"] = [a.block_x, a.block_y, a.block_z]
                    self.records.append(rec)
            elif not tracing:
                continue
            elif kind == K.MEMCPY or kind == K.MEMSET:
                if a.correlation_id not in traced:
                    continue
                is_copy = kind == K.MEMCPY
                rec = _gpu_record(a, "memcpy" if is_copy else "memset", "Memcpy" if is_copy else "Memset")
                rec["bytes"] = a.bytes
                self.records.append(rec)
            elif kind == K.RUNTIME and a.correlation_id in traced:
                self.records.append({"kind": "launch", "name": "cudaGraphLaunch", "start": a.start, "end": a.end,
                                     "correlation": a.correlation_id, "process": a.process_id,
                                     "thread": a.thread_id})
        self.eager_ns += eager_ns
        self.eager_kernels += eager_n
        self.eager_after_ns += after_ns
        self.eager_after_kernels += after_n

    def summary(self, known_exec_ids: set[int]) -> KernelCoverage:
        """Kernel time inside graph replays against all kernel time (summed durations, ns)."""
        graph_ns = sum(self.graph_ns.values())
        total = graph_ns + self.eager_ns
        since = graph_ns + self.eager_after_ns
        return KernelCoverage(
            kernel_ns_in_graphs=graph_ns,
            kernel_ns_outside_graphs=self.eager_ns,
            kernels_in_graphs=sum(self.graph_kernels.values()),
            kernels_outside_graphs=self.eager_kernels,
            share_in_graphs=graph_ns / total if total else None,
            # warm-up, compilation and autotuning run before the first graph: the steady state after it
            kernel_ns_outside_graphs_since_first_graph=self.eager_after_ns,
            kernels_outside_graphs_since_first_graph=self.eager_after_kernels,
            share_in_graphs_since_first_graph=graph_ns / since if since and self.first_graph() is not None
            else None,
            kernel_ns_of_unrecorded_graphs=sum(v for k, v in self.graph_ns.items() if k not in known_exec_ids),
            note="summed durations of CUPTI kernel records over the whole run (kernels on concurrent streams "
                 "are counted in full each); memcpy and memset work is not included",
        )
