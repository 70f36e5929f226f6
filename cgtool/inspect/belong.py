"""Whether a graph export and a trace's graph belong together: the one check every command makes
(``dot --trace``, ``topo --trace``, ``deps --graph``, the report's pairing of files).

Exec graph ids count up per process, so the first graph of every process has the same id: equal
ids do not prove that two files come from one instantiation. Two exports are of one graph when
their ids, node ids, node types, edges AND kernel names agree; the reason given names the first
thing that differs, and says "another run" only where the ids agree and the contents do not.
"""

from __future__ import annotations

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.names import demangle
from cgtool.errors import InvalidInputError

#: What a reason ends with when the ids agree and the graphs do not.
_OTHER_RUN = ("Exec graph ids are counters per process, so the same id in two runs names different graphs: pass "
              "the export written with this trace (or the trace alone: a cgtool trace embeds its graphs).")


def _name(g: GraphData, i: int) -> str:
    n = g.nodes[i]
    return demangle(n.kernel_name) if n.kernel_name else ""


def why_apart(graph: GraphData, traced: GraphData, *, names: bool = True) -> str | None:
    """Why ``graph`` (an export) is not the graph ``traced`` (one a trace holds), or None when it is.
    The reason names the first difference: the exec id, the node count, a node's id, type or edges,
    or (with ``names``) a kernel's name."""
    if graph is traced:
        return None
    if graph.exec_graph_id != traced.exec_graph_id:
        return (f"{graph.source} is exec graph {graph.exec_graph_id}, the trace's graph is exec graph "
                f"{traced.exec_graph_id}. A trace and an export join only when they come from the same "
                "instantiation (re-instantiating makes a new id): pass the export written with this trace.")
    if len(graph.nodes) != len(traced.nodes):
        return (f"{graph.source} has {len(graph.nodes)} nodes and the trace's exec graph {traced.exec_graph_id} "
                f"has {len(traced.nodes)}. " + _OTHER_RUN)
    for x, y in zip(graph.nodes, traced.nodes):
        what = ("node id" if x.tools_id != y.tools_id else "type" if x.node_type is not y.node_type
                else "dependencies" if x.dependencies != y.dependencies else None)
        if what is not None:
            a = {"node id": x.tools_id, "type": x.node_type.value, "dependencies": list(x.dependencies)}[what]
            b = {"node id": y.tools_id, "type": y.node_type.value, "dependencies": list(y.dependencies)}[what]
            return (f"node #{x.index} of exec graph {graph.exec_graph_id} has {what} {a} in {graph.source} and "
                    f"{b} in the trace. " + _OTHER_RUN)
    if names:
        for x in graph.nodes:
            a, b = _name(graph, x.index), _name(traced, x.index)
            if a != b:
                return (f"node #{x.index} of exec graph {graph.exec_graph_id} is kernel {a[:60]!r} in {graph.source} "
                        f"but {b[:60]!r} in the trace (ids, types and edges agree). " + _OTHER_RUN)
    return None


def check_belong(graph: GraphData, traced: GraphData, trace_path: object) -> None:
    """Raise the one reason ``graph`` and the graph ``traced`` of ``trace_path`` do not belong
    together. A graph with a cycle is refused as such first (no CUDA graph has one)."""
    from cgtool.inspect.reach import topological_order

    topological_order(graph)
    topological_order(traced)
    why = why_apart(graph, traced)
    if why is not None:
        raise InvalidInputError(f"{graph.source} does not belong with {trace_path}: {why}")


__all__ = ["check_belong", "why_apart"]
