import json

import pytest

from cgtool.errors import InvalidInputError
from cgtool.artifacts.graph import GraphData, NodeType, from_edges

CASES = ["chain", "forkjoin", "transformer_block", "resnet50", "gpt2_decode"]
KEYS = {"index", "node_type", "tools_id", "graph_id", "node_id", "kernel_name", "dependencies", "dependents"}


@pytest.mark.parametrize("case", CASES)
def test_real_exports_have_the_exact_schema(data_dir, case):
    doc = json.loads((data_dir / case / "graph.json").read_text())
    assert set(doc) == {"exec_graph_id", "nodes", "cgtool"}
    for n in doc["nodes"]:
        assert set(n) == KEYS
        assert n["graph_id"] == doc["exec_graph_id"]
        assert n["tools_id"] == (doc["exec_graph_id"] << 32) | n["node_id"]
        assert (n["kernel_name"] is not None) == (n["node_type"] == "kernel")
    meta = doc["cgtool"]
    assert meta["id_source"] in ("driver", "cupti")
    assert len(meta["nodes"]) == len(doc["nodes"])
    assert {"torch", "cuda_driver", "device"} <= set(meta["environment"])


@pytest.mark.parametrize("case", CASES + ["train_step"])
def test_load_and_round_trip(data_dir, case, tmp_path):
    paths = sorted((data_dir / case).glob("graph*.json"))
    assert paths
    for p in paths:
        g = GraphData.load(p)
        assert len(g.nodes) > 0 and g.exec_graph_id > 0
        out = tmp_path / p.name
        g.save(out)
        again = GraphData.load(out)
        assert again.nodes == g.nodes and again.exec_graph_id == g.exec_graph_id
        assert sum(len(n.dependents) for n in g.nodes) == len(g.edges())


def test_unknown_node_types_and_keys_are_accepted(data_dir):
    doc = json.loads((data_dir / "forkjoin" / "graph.json").read_text())
    doc["nodes"][0]["node_type"] = "conditional_while"
    doc["nodes"][0]["event_ptr"] = 1234  # newer torch adds fields
    doc["edge_data"] = []
    g = GraphData.from_json(doc)
    assert g.nodes[0].node_type is NodeType.OTHER
    assert g.to_json()["nodes"][0]["node_type"] == "conditional_while"


def _base(data_dir):
    return json.loads((data_dir / "transformer_block" / "graph.json").read_text())


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d.pop("nodes"), "no 'nodes' key"),
        (lambda d: d.__setitem__("exec_graph_id", "2"), "exec_graph_id should be an integer"),
        (lambda d: d["nodes"][1].__setitem__("index", 5), "is at position 1"),
        (lambda d: d["nodes"][1].__setitem__("tools_id", 7), "tools_id 7"),
        (lambda d: d["nodes"][0]["dependents"].append(99), "not a node index"),
        (lambda d: d["nodes"][0]["dependents"].append(8), "does not list 0"),
        (lambda d: d["nodes"][2].pop("dependencies"), "no 'dependencies' field"),
        (lambda d: d["nodes"][2].__setitem__("kernel_name", 3), "kernel_name should be a string"),
        (lambda d: d["cgtool"].__setitem__("schema_version", 99), "Upgrade cgtool"),
        (lambda d: d.__setitem__("nodes", {}), "should be a list"),
    ],
)
def test_malformed_exports_are_named_precisely(data_dir, mutate, words):
    doc = _base(data_dir)
    mutate(doc)
    with pytest.raises(InvalidInputError) as e:
        GraphData.from_json(doc, source="g.json")
    assert words in e.value.message and e.value.message.startswith("g.json")


def test_duplicate_tools_ids_are_refused(data_dir):
    doc = _base(data_dir)
    doc["nodes"][1].update({k: doc["nodes"][0][k] for k in ("tools_id", "node_id")})
    with pytest.raises(InvalidInputError, match="repeats"):
        GraphData.from_json(doc)


def test_a_trace_passed_as_a_graph_says_so(data_dir):
    with pytest.raises(InvalidInputError, match="is a trace"):
        GraphData.from_json({"traceEvents": []}, source="t.json")


def test_from_edges_builds_consistent_graphs():
    g = from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert GraphData.from_json(g.to_json()).nodes == g.nodes
    assert g.nodes[3].dependencies == (1, 2)


@pytest.mark.parametrize("case", CASES)
def test_fast_load_equals_validating_parse(data_dir, case):
    from cgtool.artifacts.graph import _fast_parse

    p = data_dir / case / "graph.json"
    fast = _fast_parse(p.read_bytes(), str(p))
    assert fast is not None
    slow = GraphData.from_json(json.loads(p.read_text()), source=str(p))
    assert fast.nodes == slow.nodes and fast.exec_graph_id == slow.exec_graph_id and fast.meta == slow.meta


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d["nodes"][0]["dependents"].append(8), "does not list 0"),
        (lambda d: d["nodes"][1].__setitem__("index", 5), "is at position 1"),
        (lambda d: d["nodes"][2].pop("dependencies"), "no 'dependencies' field"),
        (lambda d: d["nodes"][3].__setitem__("tools_id", -1), "should not be negative"),
    ],
)
def test_malformed_files_on_disk_get_the_precise_message(data_dir, tmp_path, mutate, words):
    doc = _base(data_dir)
    mutate(doc)
    p = tmp_path / "g.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InvalidInputError) as e:
        GraphData.load(p)
    assert words in e.value.message and str(p) in e.value.message


def test_truncated_export_on_disk(data_dir, tmp_path):
    p = tmp_path / "g.json"
    p.write_text((data_dir / "forkjoin" / "graph.json").read_text()[:500])
    with pytest.raises(InvalidInputError, match="truncated"):
        GraphData.load(p)
