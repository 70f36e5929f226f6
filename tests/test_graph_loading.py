"""Malformed graph exports through both loaders: ``GraphData.load`` (the typed fast decode behind
every command that reads a file, which must hand anything doubtful to the validator) and
``GraphData.from_json`` (the validator). Each malformed export is refused by both with the same
message, naming the field; each well-formed one loads to the same graph by both, and through the
fast decode."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from cgtool.artifacts import graph as graphmod
from cgtool.artifacts.graph import LOW32, MAX_EXEC_GRAPH_ID, SCHEMA_VERSION, GraphData
from cgtool.errors import InvalidInputError

EID = 5


def diamond() -> dict[str, Any]:
    """0 -> {1, 2} -> 3 (a join of 2), with the optional fields present and a cgtool block."""
    deps = {0: [], 1: [0], 2: [0], 3: [1, 2]}
    dents = {0: [1, 2], 1: [3], 2: [3], 3: []}
    return {"exec_graph_id": EID, "nodes": [
        {"index": i, "node_type": "kernel" if i != 3 else "memset", "tools_id": (EID << 32) | (10 + i),
         "graph_id": EID, "node_id": 10 + i, "kernel_name": f"k{i}" if i != 3 else None,
         "dependencies": deps[i], "dependents": dents[i]} for i in range(4)],
        "cgtool": {"schema_version": SCHEMA_VERSION, "id_source": "driver", "environment": {"device": "x"},
                   "timings": {"export_s": 0.5}, "nodes": [{}, {}, {}, {}]}}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``doc[a][b]...`` (a path like ``nodes.1.dependencies``)."""
    def f(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        d: Any = doc
        for k in head:
            d = d[int(k)] if isinstance(d, list) else d[k]
        if isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value
    return f


def _both(*fs: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def f(doc: dict[str, Any]) -> None:
        for g in fs:
            g(doc)
    return f


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def f(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        d: Any = doc
        for k in head:
            d = d[int(k)] if isinstance(d, list) else d[k]
        del d[last]
    return f


def _same_tools_id(doc: dict[str, Any]) -> None:  # node 2 takes node 1's ids
    doc["nodes"][2].update(tools_id=doc["nodes"][1]["tools_id"], node_id=doc["nodes"][1]["node_id"])


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("negative dependency", _set("nodes.1.dependencies", [-1]), "nodes[1].dependencies[0] should not be negative"),
    ("negative dependent", _set("nodes.0.dependents", [1, -2]), "nodes[0].dependents[1] should not be negative"),
    ("dependency out of range", _set("nodes.3.dependencies", [1, 4]), "is 4, not a node index (the graph has 4"),
    ("dependent out of range", _set("nodes.2.dependents", [7]), "is 7, not a node index"),
    ("dependency listed twice", _both(_set("nodes.3.dependencies", [1, 1]), _set("nodes.2.dependents", [])),
     "lists node 1 a second time"),
    ("dependent listed twice", _both(_set("nodes.0.dependents", [1, 1]), _set("nodes.2.dependencies", [])),
     "lists node 1 a second time"),
    ("edge ends disagree", _set("nodes.0.dependents", [1, 3]), "nodes[0].dependents lists 3, but nodes[3]"),
    ("edge counts disagree", _set("nodes.3.dependencies", [0, 1, 2]), "disagree: 5 dependencies vs 4 dependents"),
    ("graph id of another export", _both(_set("nodes.2.graph_id", EID + 1), _set("nodes.2.tools_id", ((EID + 1) << 32) | 12)),
     "nodes[2].graph_id is 6 but the export's exec_graph_id is 5"),
    ("repeated tools id", _same_tools_id, "nodes[2].tools_id 21474836491 repeats nodes[1]"),
    ("newer schema", _set("cgtool.schema_version", SCHEMA_VERSION + 1), "newer than this cgtool reads"),
    ("schema as a string", _set("cgtool.schema_version", "1"), "cgtool.schema_version should be an integer"),
    ("schema as a bool", _set("cgtool.schema_version", True), "cgtool.schema_version should be an integer"),
    ("index out of place", _set("nodes.1.index", 2), "nodes[1].index is 2 but the node is at position 1"),
    ("negative tools id", _set("nodes.0.tools_id", -1), "nodes[0].tools_id should not be negative"),
    ("tools id past 63 bits", _set("nodes.0.tools_id", 1 << 63), "nodes[0].tools_id should be an integer < 2^63"),
    ("index past 63 bits", _set("nodes.0.index", (1 << 63) + 5), "nodes[0].index should be an integer < 2^63"),
    ("tools id unpacked wrong", _set("nodes.0.tools_id", (EID << 32) | 99), "has tools_id"),
    ("node id past 32 bits", _both(_set("nodes.0.node_id", LOW32 + 1), _drop("nodes.0.graph_id")),
     "nodes[0].node_id should be an integer < 2^32"),
    ("negative node id", _set("nodes.0.node_id", -3), "nodes[0].node_id should not be negative"),
    ("empty node type", _set("nodes.2.node_type", ""), "nodes[2].node_type is empty"),
    ("node type a number", _set("nodes.2.node_type", 4), "nodes[2].node_type should be a string"),
    ("kernel name a number", _set("nodes.0.kernel_name", 3), "nodes[0].kernel_name should be a string or null"),
    ("negative exec graph id", _set("exec_graph_id", -5), "exec_graph_id should not be negative"),
    ("exec graph id past 31 bits", _set("exec_graph_id", MAX_EXEC_GRAPH_ID + 1), "exec_graph_id should be an integer < 2^31"),
    ("exec graph id a bool", _set("exec_graph_id", True), "exec_graph_id should be an integer"),
    ("float tools id", _set("nodes.1.tools_id", float((EID << 32) | 11)), "nodes[1].tools_id should be an integer"),
    ("no nodes", _drop("nodes"), "has no 'nodes' key"),
    ("nodes not a list", _set("nodes", {}), "'nodes' should be a list"),
    ("a node not an object", _set("nodes.1", [1]), "nodes[1] should be an object"),
    ("a node without dependents", _drop("nodes.1.dependents"), "nodes[1] has no 'dependents' field"),
    ("dependencies not a list", _set("nodes.1.dependencies", 0), "should be a list of node indices"),
    ("cgtool block a list", _set("cgtool", [1]), "'cgtool' should be an object"),
    ("environment a string", _set("cgtool.environment", "x"), "cgtool.environment should be an object"),
    ("nodes extra an object", _set("cgtool.nodes", {}), "cgtool.nodes should be a list"),
    ("id source a number", _set("cgtool.id_source", 1), "cgtool.id_source should be a string"),
    ("check a list", _set("cgtool.check", []), "cgtool.check should be an object or null"),
    ("timing a string", _set("cgtool.timings", {"export_s": "1"}), "cgtool.timings.export_s should be a duration"),
    ("timing negative", _set("cgtool.timings", {"export_s": -1.0}), "cgtool.timings.export_s should be a duration"),
    ("timing a bool", _set("cgtool.timings", {"export_s": True}), "should be a duration"),
    ("timing too large", _set("cgtool.timings", {"export_s": 1e12}), "should be a duration"),
    ("timing a huge integer", _set("cgtool.timings", {"export_s": 10**30}), "should be a duration"),
    ("check ok a string", _set("cgtool.check", {"ok": "yes"}), "cgtool.check.ok should be true, false or null"),
    ("check diff negative", _set("cgtool.check", {"max_abs_diff": -1}), "cgtool.check.max_abs_diff should be"),
    ("check output a number", _set("cgtool.check", {"worst_output": 2}), "cgtool.check.worst_output should be"),
    ("a trace", lambda d: (d.clear(), d.update(traceEvents=[])), "is a trace, not a graph export"),
    ("a list", lambda d: [d], "the document should be a JSON object but is list"),
]


@pytest.mark.parametrize("name, change, words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_export_is_refused_by_both_loaders_alike(tmp_path: Path, name: str, change: Any,
                                                            words: str) -> None:
    doc: Any = diamond()
    replaced = change(doc)  # changes the document in place, or returns another one (a list)
    doc = replaced if isinstance(replaced, list) else doc
    path = tmp_path / "graph.json"
    text = json.dumps(doc)
    path.write_text(text)
    with pytest.raises(InvalidInputError) as validator:
        GraphData.from_json(json.loads(text), source=str(path))
    assert words in str(validator.value)
    assert graphmod._fast_parse(text.encode(), str(path)) is None  # the fast decode hands it over
    with pytest.raises(InvalidInputError) as loaded:
        GraphData.load(path)
    assert str(loaded.value) == str(validator.value)


def _variants() -> list[tuple[str, dict[str, Any]]]:
    base = diamond()
    out = [("full", base)]
    d = copy.deepcopy(base)
    for n in d["nodes"]:  # graph_id and node_id are optional: taken from the tools id
        del n["graph_id"], n["node_id"]
    out.append(("ids from the tools id", d))
    d = copy.deepcopy(base)
    del d["cgtool"]
    out.append(("no cgtool block", d))
    d = copy.deepcopy(base)
    d["cgtool"] = None
    out.append(("a null cgtool block", d))
    d = copy.deepcopy(base)
    d["cgtool"]["schema_version"] = 0
    d["cgtool"]["check"] = {"ok": True, "max_abs_diff": 0, "worst_output": "y"}
    out.append(("an older schema, a check", d))
    d = copy.deepcopy(base)
    d["nodes"][3]["node_type"] = "conditional_while"  # a type this cgtool does not know
    d["nodes"][0]["event_ptr"] = 7  # a field newer torch adds
    out.append(("unknown type and field", d))
    d = copy.deepcopy(base)
    d["exec_graph_id"] = 0
    for n in d["nodes"]:
        n["tools_id"] = n["node_id"] = n["index"]
        n["graph_id"] = 0
    out.append(("exec graph 0", d))
    d = copy.deepcopy(base)
    d["exec_graph_id"] = MAX_EXEC_GRAPH_ID
    for n in d["nodes"]:
        n["graph_id"], n["node_id"] = MAX_EXEC_GRAPH_ID, LOW32 - n["index"]
        n["tools_id"] = (MAX_EXEC_GRAPH_ID << 32) | n["node_id"]
    out.append(("the largest ids", d))
    out.append(("no nodes", {"exec_graph_id": 3, "nodes": []}))
    return out


@pytest.mark.parametrize("name, doc", _variants(), ids=[v[0] for v in _variants()])
def test_a_well_formed_export_loads_alike_through_both(tmp_path: Path, name: str, doc: dict[str, Any]) -> None:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(doc))
    slow = GraphData.from_json(doc, source=str(path))
    fast = graphmod._fast_parse(path.read_bytes(), str(path))
    assert fast is not None, "a well-formed export takes the fast decode"
    loaded = GraphData.load(path)
    for g in (fast, loaded):
        assert g.nodes == slow.nodes and g.exec_graph_id == slow.exec_graph_id and g.meta == slow.meta
    # and what the loaders built is the document: every edge from both ends, the ids as written
    for n, raw in zip(slow.nodes, doc["nodes"]):
        assert list(n.dependencies) == raw["dependencies"] and list(n.dependents) == raw["dependents"]
        assert n.tools_id == raw["tools_id"] and n.graph_id == raw["tools_id"] >> 32
        assert n.node_id == raw["tools_id"] & LOW32 and n.kernel_name == raw.get("kernel_name")
        assert n.node_type.value == (raw["node_type"] if raw["node_type"] != "conditional_while" else "other")
        assert n.type_name == ("conditional_while" if raw["node_type"] == "conditional_while" else "")
