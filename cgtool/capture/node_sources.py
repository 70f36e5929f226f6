"""Which line of the workload made each node of a graph ``cgtool capture`` captured.

The same machinery as ``cgtool record`` (``capture/record``): a CUPTI subscriber with the
``GRAPHNODE_CREATED`` resource callback only, switched on around the capture; the callback keeps
the raw frames of the creating code, and :meth:`NodeSources.annotate` writes a ``source`` block
(file, line, call, op, module, ...; see ``record/attribution.py``) into each node's extras of the
export, so ``dot``, ``deps``, ``topo`` and ``diff`` name lines for capture bundles too.

Optional by nature: without cupti-python, or with CUPTI held by another profiler (Nsight, a
``torch.profiler`` session), the capture goes on and the export says why it has no sources.
"""

from __future__ import annotations

import os
import sys
import threading
from types import TracebackType
from typing import Any

from cgtool.capture.record import _subscriber, attribution
from cgtool.capture.record.options import SUBSCRIBER_ENV

_OWN = (__file__, _subscriber.__file__)


class NodeSources:
    """``with NodeSources() as s: <capture>`` then ``s.annotate(raw_graph, export)``."""

    def __init__(self) -> None:
        self._nodes: dict[int, dict[int, attribution.NodeInfo]] = {}
        self._sub: Any = None
        self.note: str | None = None  # why there are no sources, when there are none
        self._lock = threading.Lock()

    def __enter__(self) -> "NodeSources":
        from cgtool.capture._deps import optional_cupti

        cupti = optional_cupti()
        if cupti is None:
            self.note = "no source lines: cupti-python is not installed (install cgtool[gpu])"
            return self
        self._L = _subscriber.Layout(cupti)
        # A Python callback (node creations only, around one capture); cupti-python's own subscribe
        # where CGTOOL_RECORD_SUBSCRIBER asks for it, as `cgtool record` does.
        how = "cupti-python" if os.environ.get(SUBSCRIBER_ENV) == "cupti-python" else "ctypes"
        try:
            try:
                self._sub = _subscriber.Subscriber(cupti, self._callback, how)
            except OSError:
                self._sub = _subscriber.Subscriber(cupti, self._callback, "cupti-python")
            self._node_cbid = int(cupti.CallbackIdResource.GRAPHNODE_CREATED)
            self._sub.enable(int(cupti.CallbackDomain.RESOURCE), self._node_cbid)
        except (_subscriber.SubscribeError, OSError) as e:
            self._sub = None
            self.note = (f"no source lines: CUPTI's callback API was not available ({e}); another profiler "
                         "(Nsight, torch.profiler) may hold it")
            return self
        attribution.track_ranges()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._sub is not None:
            try:
                self._sub.unsubscribe()
            except Exception:
                pass
            self._sub = None

    def _callback(self, domain: int, cbid: int, ptr: int) -> None:
        try:
            if cbid != self._node_cbid:
                return
            L = self._L
            desc = _subscriber.read_ptr(ptr + L.desc)
            graph, node = _subscriber.read_ptr(desc + L.graph), _subscriber.read_ptr(desc + L.node)
            f: Any = sys._getframe(1)
            while f is not None and f.f_code.co_filename in _OWN:
                f = f.f_back
            info = attribution.grab_node_info(f)
            with self._lock:
                self._nodes.setdefault(graph, {})[node] = info
        except Exception:  # source lines are a courtesy: never break the capture
            pass

    def annotate(self, raw_graph: int, data: dict[str, Any]) -> int:
        """Add ``source`` to the node extras of ``data`` (the export of ``raw_graph``); how many got one."""
        meta = data.get("cgtool")
        if meta is None:
            return 0
        infos = self._nodes.get(int(raw_graph), {})
        if not infos:
            meta["sources"] = {"from": None, "note": self.note or "no node of this graph was seen being created"}
            return 0
        handles = _node_handles(int(raw_graph))
        extras = meta.get("nodes") or []
        n = 0
        for i, h in enumerate(handles):
            info = infos.get(h)
            if info is None or i >= len(extras):
                continue
            extras[i]["source"] = attribution.resolve_node(info).to_json()
            n += 1
        meta["sources"] = {"from": "cupti node callbacks during capture", "nodes_with_source": n}
        return n


def _node_handles(raw_graph: int) -> list[int]:
    from cgtool.capture import _fastcuda

    fast = _fastcuda.load()
    if fast is not None:
        return fast.nodes(raw_graph)
    from cgtool.capture._deps import check, require_bindings

    rt, _ = require_bindings("Source lines")
    g = rt.cudaGraph_t(init_value=raw_graph)
    _, num = check(rt.cudaGraphGetNodes(g, numNodes=0), "cudaGraphGetNodes")
    if not num:
        return []
    nodes, num = check(rt.cudaGraphGetNodes(g, numNodes=num), "cudaGraphGetNodes")
    return [int(x) for x in nodes[:num]]
