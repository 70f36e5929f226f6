"""The graph model: the JSON of ``torch.cuda.CUDAGraph.get_graph_data()`` plus cgtool's metadata.

A graph export is the hand-off between ``capture`` (which writes it on a GPU machine) and every
analysis command (which reads it anywhere). The top-level keys are exactly those of
``get_graph_data()`` (``exec_graph_id``, ``nodes``) plus one extra key, ``"cgtool"``, holding the
schema version, the environment, where the ids came from, timings and per-node extras.
Readers accept unknown keys: newer torch adds fields (``event_ptr``, launch dimensions, edge data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import msgspec

from cgtool.errors import InvalidInputError
from cgtool.artifacts.jsonio import decode, read_bytes, show_path, write_json
from cgtool.text import short_value

#: Version of the ``"cgtool"`` block this code writes. Older versions load with defaults.
SCHEMA_VERSION = 1
#: The key under which cgtool keeps its own metadata, beside get_graph_data()'s keys.
META_KEY = "cgtool"
#: The mask of the local node id inside a 64-bit tools id.
LOW32 = 0xFFFFFFFF
#: Exec graph ids must leave room for the tools-id packing ``(exec_id << 32) | local`` inside a
#: signed 64-bit integer (the columns of a trace): below 2^31.
MAX_EXEC_GRAPH_ID = (1 << 31) - 1
#: Types of the known keys of the ``"cgtool"`` block (others are kept as written).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": (int,), "id_source": (str,), "environment": (dict,), "timings": (dict,),
    "nodes": (list,), "workload": (str,), "label": (str,), "check": (dict, type(None)),
}


class NodeType(str, Enum):
    """CUDA graph node types, spelled as ``get_graph_data()`` spells them."""

    KERNEL = "kernel"  # a kernel launch (cudaGraphNodeTypeKernel)
    MEMCPY = "memcpy"  # a copy (cudaGraphNodeTypeMemcpy)
    MEMSET = "memset"  # a fill (cudaGraphNodeTypeMemset)
    HOST = "host"  # a host callback run by the driver (cudaGraphNodeTypeHost)
    CHILD_GRAPH = "child_graph"  # an embedded graph (cudaGraphNodeTypeGraph); not recursed into
    EMPTY = "empty"  # a no-op join point, e.g. where captured streams are joined
    WAIT_EVENT = "wait_event"  # waits on an external event
    EVENT_RECORD = "event_record"  # records an external event
    MEM_ALLOC = "mem_alloc"  # stream-ordered allocation inside the graph
    MEM_FREE = "mem_free"  # stream-ordered free inside the graph
    OTHER = "other"  # any type this version of cgtool does not know (conditional, batch memops...)

    @classmethod
    def parse(cls, value: str) -> "NodeType":
        try:
            return cls(value)
        except ValueError:
            return cls.OTHER

    @property
    def runs_on_gpu(self) -> bool:
        """Whether replays of this node show up as GPU activity in a trace."""
        return self in (NodeType.KERNEL, NodeType.MEMCPY, NodeType.MEMSET)


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a graph export. ``index`` is its position in ``GraphData.nodes``."""

    index: int
    node_type: NodeType
    tools_id: int  # (exec_graph_id << 32) | node_id: the id CUPTI reports as "graph node id"
    graph_id: int  # the exec graph id (remapped from the template graph's id, as torch does)
    node_id: int  # the node's local id inside its graph (low 32 bits of tools_id)
    kernel_name: str | None  # mangled kernel name for kernel nodes, else None
    dependencies: tuple[int, ...]  # indices of the nodes this one waits for
    dependents: tuple[int, ...]  # indices of the nodes that wait for this one
    type_name: str = ""  # the raw node_type string, kept when node_type is OTHER


@dataclass(frozen=True)
class GraphData:
    """A loaded graph export: nodes by index, plus cgtool's metadata block (may be empty)."""

    exec_graph_id: int
    nodes: tuple[Node, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    # ----------------------------------------------------------------- derived views
    @property
    def id_source(self) -> str:
        """Where the tools ids came from: "driver", "cupti", or "unknown" for foreign exports."""
        return str(self.meta.get("id_source", "unknown"))

    def edges(self) -> list[tuple[int, int]]:
        """All edges as (from index, to index), in node order."""
        return [(n.index, d) for n in self.nodes for d in n.dependents]

    def by_tools_id(self) -> dict[int, Node]:
        return {n.tools_id: n for n in self.nodes}

    def node_extra(self, index: int) -> Mapping[str, Any]:
        """cgtool's per-node extras (grid, block, demangled name, ...) or an empty mapping."""
        extras = self.meta.get("nodes")
        if isinstance(extras, list) and 0 <= index < len(extras) and isinstance(extras[index], dict):
            extra: Mapping[str, Any] = extras[index]
            return extra
        return {}

    def source_label(self, index: int) -> str | None:
        """Where the node came from in the user's code (``model.py:88 attn.softmax``), when the
        export records it (``cgtool record`` attributes every node); None otherwise."""
        src = self.node_extra(index).get("source")
        if isinstance(src, dict):
            label = src.get("label")
            if isinstance(label, str) and label:
                return label
            if isinstance(src.get("file"), str) and isinstance(src.get("line"), int):
                return f"{src['file'].rsplit('/', 1)[-1]}:{src['line']}"
        return None

    def source_labels(self) -> dict[int, str]:
        """Tools id -> source label, for the nodes that have one."""
        out = {}
        for n in self.nodes:
            label = self.source_label(n.index)
            if label is not None:
                out[n.tools_id] = label
        return out

    def display_name(self, index: int) -> str:
        """A readable label: the demangled kernel name, or the node type and id."""
        n = self.nodes[index]
        if n.kernel_name:
            return str(self.node_extra(index).get("demangled") or n.kernel_name)
        return f"{n.node_type.value}#{n.node_id}"

    # ----------------------------------------------------------------- I/O
    def to_json(self) -> dict[str, Any]:
        """The export as a JSON-ready dict in get_graph_data()'s schema (plus the meta block)."""
        out: dict[str, Any] = {
            "exec_graph_id": self.exec_graph_id,
            "nodes": [
                {
                    "index": n.index,
                    "node_type": n.type_name or n.node_type.value,
                    "tools_id": n.tools_id,
                    "graph_id": n.graph_id,
                    "node_id": n.node_id,
                    "kernel_name": n.kernel_name,
                    "dependencies": list(n.dependencies),
                    "dependents": list(n.dependents),
                }
                for n in self.nodes
            ],
        }
        if self.meta:
            out[META_KEY] = dict(self.meta)
        return out

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        return write_json(path, self.to_json(), force=force)

    @classmethod
    def load(cls, path: str | Path, **kw: Any) -> "GraphData":
        """Load an export. A typed decode handles well-formed files fast; anything else goes
        through the field-by-field validator, whose messages name the field and the value."""
        data = read_bytes(path, **kw)
        fast = _fast_parse(data, str(path))
        if fast is not None:
            return fast
        return cls.from_json(decode(data, path), source=str(path))

    @classmethod
    def from_json(cls, doc: Any, *, source: str = "<memory>") -> "GraphData":
        """Validate and build. Every problem is an InvalidInputError naming the field and value."""
        return _parse(doc, source)


class _FastNode(msgspec.Struct, gc=False):
    index: int
    node_type: str
    tools_id: int
    dependencies: list[int]
    dependents: list[int]
    graph_id: Union[int, None] = None
    node_id: Union[int, None] = None
    kernel_name: Union[str, None] = None


class _FastDoc(msgspec.Struct):
    exec_graph_id: int
    nodes: list[_FastNode]
    cgtool: Union[dict[str, Any], None] = None


_fast_decoder = msgspec.json.Decoder(_FastDoc)


def _fast_parse(data: bytes, source: str) -> "GraphData | None":
    """GraphData from a well-formed export, or None (then the slow path explains what is wrong)."""
    try:
        doc = decode(data, source, _fast_decoder)
    except InvalidInputError:
        return None
    n = len(doc.nodes)
    if not 0 <= doc.exec_graph_id <= MAX_EXEC_GRAPH_ID or not _meta_ok(doc.cgtool):
        return None
    nodes: list[Node] = []
    edges_out: set[tuple[int, int]] = set()
    n_in = 0
    ids: set[int] = set()
    for i, r in enumerate(doc.nodes):
        gid = r.graph_id if r.graph_id is not None else r.tools_id >> 32
        nid = r.node_id if r.node_id is not None else r.tools_id & LOW32
        if (r.index != i or r.tools_id < 0 or gid != doc.exec_graph_id or not 0 <= nid <= LOW32
                or r.tools_id != (gid << 32) | nid or r.tools_id in ids or not r.node_type):
            return None
        ids.add(r.tools_id)
        deps, dents = r.dependencies, r.dependents
        if (deps and (min(deps) < 0 or max(deps) >= n)) or (dents and (min(dents) < 0 or max(dents) >= n)):
            return None
        k = len(edges_out)
        edges_out.update((i, d) for d in dents)
        if len(edges_out) - k != len(dents) or len(set(deps)) != len(deps):
            return None  # an edge listed twice
        n_in += len(deps)
        nt = NodeType.parse(r.node_type)
        nodes.append(Node(i, nt, r.tools_id, gid, nid, r.kernel_name, tuple(deps), tuple(dents),
                          r.node_type if nt is NodeType.OTHER else ""))
    if doc.exec_graph_id < 0 or n_in != len(edges_out):
        return None
    for nd in nodes:  # every listed dependency must be the other end of a listed dependent
        for u in nd.dependencies:
            if (u, nd.index) not in edges_out:
                return None
    meta = doc.cgtool or {}
    version = meta.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return None
    return GraphData(exec_graph_id=doc.exec_graph_id, nodes=tuple(nodes), meta=meta, source=source)


def _bad(source: str, where: str, problem: str, fix: str = "") -> InvalidInputError:
    fix = fix or (
        "Export the graph again with `cgtool export` (or torch's CUDAGraph.get_graph_data())."
    )
    return InvalidInputError(f"{source}: {where} {problem}. {fix}")


def _meta_ok(meta: Any) -> bool:
    if meta is None:
        return True
    if not isinstance(meta, dict):
        return False
    return all(k not in meta or isinstance(meta[k], t) and not isinstance(meta[k], bool)
               for k, t in _META_TYPES.items()) and _meta_values_problem(meta) is None


def _key(k: str) -> str:
    """A key as part of a field path: ``.capture_s``, or ``["capture s"]`` when it is no identifier."""
    return show_path([k], "x")[1:]


#: Durations and differences in the ``cgtool`` block are below this (seconds: 30,000 years).
MAX_META_NUMBER = 1e12


def _number(v: Any) -> bool:
    """A non-negative JSON number below MAX_META_NUMBER (compared without converting a long integer)."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < MAX_META_NUMBER
            and (isinstance(v, int) or math.isfinite(v)))


def _meta_values_problem(meta: dict[str, Any]) -> tuple[str, str] | None:
    """(field, problem) for a value of the ``cgtool`` block that tables would otherwise leave out
    without a word: a timing or the replay check's difference that is not a number."""
    tim = meta.get("timings")
    if isinstance(tim, dict):
        for k, v in tim.items():
            if v is not None and not _number(v):
                return (f"{META_KEY}.timings{_key(str(k))}", f"should be a duration in seconds (a non-negative "
                        f"number below {MAX_META_NUMBER:g}) or null but is {_short(v)}")
    chk = meta.get("check")
    if isinstance(chk, dict):
        checks: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
            ("ok", lambda v: isinstance(v, bool), "true, false or null"),
            ("max_abs_diff", _number, f"a non-negative number below {MAX_META_NUMBER:g} or null"),
            ("worst_output", lambda v: isinstance(v, str), "a string or null"))
        for k, ok, want in checks:
            v = chk.get(k)
            if v is not None and not ok(v):
                return f"{META_KEY}.check.{k}", f"should be {want} but is {_short(v)}"
    return None


def _int(source: str, where: str, v: Any, limit: int = (1 << 63) - 1, why: str = "") -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(source, where, f"should be an integer but is {_short(v)}")
    if v < 0:
        raise _bad(source, where, f"should not be negative but is {_short(v)}")
    if v > limit:
        bound = f"2^{limit.bit_length()}" if (limit + 1) & limit == 0 else f"{limit + 1}"
        raise _bad(source, where, f"should be an integer < {bound}{why} but is {_short(v)}")
    return v


def _short(v: Any) -> str:
    return short_value(v)


def _int_list(source: str, where: str, v: Any, n_nodes: int) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise _bad(source, where, f"should be a list of node indices but is {type(v).__name__}")
    out = []
    seen: set[int] = set()
    for k, x in enumerate(v):
        i = _int(source, f"{where}[{k}]", x)
        if i >= n_nodes:
            raise _bad(source, f"{where}[{k}]", f"is {i}, not a node index (the graph has {n_nodes} nodes)")
        if i in seen:
            raise _bad(source, f"{where}[{k}]", f"lists node {i} a second time (an edge is listed once)")
        seen.add(i)
        out.append(i)
    return tuple(out)


def _parse(doc: Any, source: str) -> GraphData:
    if not isinstance(doc, dict):
        raise _bad(source, "the document", f"should be a JSON object but is {type(doc).__name__}")
    if "traceEvents" in doc and "nodes" not in doc:
        raise _bad(
            source, "the file", "is a trace, not a graph export",
            "Pass the graph export (graph.json), or a cgtool trace, which embeds its graph.",
        )
    for key in ("exec_graph_id", "nodes"):
        if key not in doc:
            raise _bad(source, "the document", f"has no {key!r} key (keys: {sorted(doc)[:8]})")
    exec_id = _int(source, "exec_graph_id", doc["exec_graph_id"], MAX_EXEC_GRAPH_ID,
                   " (room for the tools-id packing (exec_id << 32) | local)")
    raw_nodes = doc["nodes"]
    if not isinstance(raw_nodes, list):
        raise _bad(source, "'nodes'", "should be a list")
    n_nodes = len(raw_nodes)
    nodes: list[Node] = []
    for i, rn in enumerate(raw_nodes):
        w = f"nodes[{i}]"
        if not isinstance(rn, dict):
            raise _bad(source, w, "should be an object")
        for key in ("index", "node_type", "tools_id", "dependencies", "dependents"):
            if key not in rn:
                raise _bad(source, w, f"has no {key!r} field")
        index = _int(source, f"{w}.index", rn["index"])
        if index != i:
            raise _bad(source, f"{w}.index", f"is {index} but the node is at position {i}")
        tname = rn["node_type"]
        if not isinstance(tname, str):
            raise _bad(source, f"{w}.node_type", f"should be a string but is {_short(tname)}")
        if not tname:
            raise _bad(source, f"{w}.node_type", "is empty; every CUDA graph node has a type")
        ntype = NodeType.parse(tname)
        tools_id = _int(source, f"{w}.tools_id", rn["tools_id"])
        graph_id = _int(source, f"{w}.graph_id", rn.get("graph_id", tools_id >> 32), MAX_EXEC_GRAPH_ID,
                        " (room for the tools-id packing (exec_id << 32) | local)")
        node_id = _int(source, f"{w}.node_id", rn.get("node_id", tools_id & LOW32), LOW32)
        if tools_id != (graph_id << 32) | node_id:
            raise _bad(
                source, w,
                f"has tools_id {tools_id} but (graph_id {graph_id} << 32) | node_id {node_id} = "
                f"{(graph_id << 32) | node_id}",
            )
        if graph_id != exec_id:
            raise _bad(
                source, f"{w}.graph_id",
                f"is {graph_id} but the export's exec_graph_id is {exec_id}; every node of an export carries "
                "its instantiation's id (get_graph_data() remaps graph_id to exec_graph_id), so this file was "
                "edited or merged from two exports",
            )
        kname = rn.get("kernel_name")
        if kname is not None and not isinstance(kname, str):
            raise _bad(source, f"{w}.kernel_name", f"should be a string or null but is {_short(kname)}")
        nodes.append(
            Node(
                index=i,
                node_type=ntype,
                tools_id=tools_id,
                graph_id=graph_id,
                node_id=node_id,
                kernel_name=kname,
                dependencies=_int_list(source, f"{w}.dependencies", rn["dependencies"], n_nodes),
                dependents=_int_list(source, f"{w}.dependents", rn["dependents"], n_nodes),
                type_name=tname if ntype is NodeType.OTHER else "",
            )
        )
    # Edges are listed from both ends; they must agree, or the file was edited by hand.
    dep_edges = {(u, n.index) for n in nodes for u in n.dependencies}
    for n in nodes:
        for d in n.dependents:
            if (n.index, d) not in dep_edges:
                raise _bad(
                    source, f"nodes[{n.index}].dependents",
                    f"lists {d}, but nodes[{d}].dependencies does not list {n.index}",
                )
    n_deps = sum(len(n.dependencies) for n in nodes)
    n_dents = sum(len(n.dependents) for n in nodes)
    if n_deps != n_dents:
        raise _bad(source, "the edges", f"disagree: {n_deps} dependencies vs {n_dents} dependents")
    seen: dict[int, int] = {}
    for n in nodes:
        if n.tools_id in seen:
            raise _bad(source, f"nodes[{n.index}].tools_id", f"{n.tools_id} repeats nodes[{seen[n.tools_id]}]")
        seen[n.tools_id] = n.index
    meta = doc.get(META_KEY) or {}
    if not isinstance(meta, dict):
        raise _bad(source, f"{META_KEY!r}", "should be an object")
    for key, types in _META_TYPES.items():
        if key in meta and (not isinstance(meta[key], types) or isinstance(meta[key], bool)):
            want = " or ".join("null" if t is type(None) else {"dict": "an object", "list": "a list", "str": "a string",
                                                                 "int": "an integer"}[t.__name__] for t in types)
            raise _bad(source, f"{META_KEY}.{key}", f"should be {want} but is {_short(meta[key])}")
    problem = _meta_values_problem(meta)
    if problem is not None:
        raise _bad(source, *problem)
    version = meta.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise _bad(
            source, f"{META_KEY}.schema_version", f"is {version}, newer than this cgtool reads ({SCHEMA_VERSION})",
            "Upgrade cgtool (`pip install -U cgtool`).",
        )
    return GraphData(exec_graph_id=exec_id, nodes=tuple(nodes), meta=meta, source=source)


def from_edges(
    n: int,
    edges: Sequence[tuple[int, int]],
    *,
    exec_graph_id: int = 1,
    types: Sequence[NodeType] | None = None,
    names: Sequence[str | None] | None = None,
) -> GraphData:
    """Build a GraphData from an edge list (for generated graphs in tests and benchmarks)."""
    deps: list[list[int]] = [[] for _ in range(n)]
    dents: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        dents[a].append(b)
        deps[b].append(a)
    nodes = tuple(
        Node(
            index=i,
            node_type=types[i] if types else NodeType.KERNEL,
            tools_id=(exec_graph_id << 32) | (i + 1),
            graph_id=exec_graph_id,
            node_id=i + 1,
            kernel_name=(names[i] if names else f"kernel_{i}")
            if (types is None or types[i] is NodeType.KERNEL)
            else None,
            dependencies=tuple(deps[i]),
            dependents=tuple(dents[i]),
        )
        for i in range(n)
    )
    return GraphData(exec_graph_id=exec_graph_id, nodes=nodes)
