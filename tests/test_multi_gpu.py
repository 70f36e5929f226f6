"""Per-rank outputs of a 2-GPU torchrun run (tests/data/tp_mlp_2gpu, recorded on two H200s with
`--nproc-per-node 2`): grouping by rank, per-rank analysis, and the rank helpers."""

import gzip
import json
import shutil

import pytest

from cgtool.capture import dist
from cgtool.artifacts.ranks import rank_files
from cgtool.errors import InvalidInputError
from cgtool.artifacts.bench import BenchResults
from cgtool.inspect.deps import analyze, graphs_from_trace
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import load_trace


def test_traces_are_grouped_by_the_rank_they_record(data_dir, tmp_path):
    src = data_dir / "tp_mlp_2gpu" / "traces"
    # rename so that file names would suggest the opposite ranks: the recorded rank wins
    shutil.copy(src / "trace.rank0.json.gz", tmp_path / "b.rank1.json.gz")
    shutil.copy(src / "trace.rank1.json.gz", tmp_path / "a.rank0.json.gz")
    files = rank_files(tmp_path, "trace")
    assert sorted(files) == [0, 1]
    assert files[0].name == "b.rank1.json.gz" and files[1].name == "a.rank0.json.gz"
    for r, p in files.items():
        assert load_trace(p).cgtool["rank"] == r


def test_each_rank_analysed_against_its_own_graph(data_dir):
    spans = {}
    for r, p in rank_files(data_dir / "tp_mlp_2gpu" / "traces", "trace").items():
        t = load_trace(p)
        gs = graphs_from_trace(t)
        assert gs[0].meta["rank"] == r and gs[0].meta["world_size"] == 2
        res = analyze(t, gs)
        assert res.n_true > 0 and res.n_fake == 0  # one chain per rank
        assert any("nccl" in (n.kernel_name or "").lower() for n in gs[0].nodes)
        spans[r] = res.to_json()["summary"]["mean_span_us"]
    assert set(spans) == {0, 1}


def test_event_nodes_of_the_nccl_join_are_in_the_graph_and_traversed(data_dir):
    for r, p in rank_files(data_dir / "tp_mlp_2gpu" / "bundle", "graph").items():
        g = GraphData.load(p)
        types = {n.node_type.value for n in g.nodes}
        assert {"event_record", "wait_event", "kernel"} <= types
        from cgtool.inspect.reach import Reachability

        reach = Reachability(g)
        first = next(n.index for n in g.nodes if not n.dependencies)
        last = next(n.index for n in g.nodes if not n.dependents)
        assert reach.reachable(first, last)  # through the event nodes


def test_cli_deps_and_topo_over_rank_folders(run_cli, data_dir, tmp_path):
    out = tmp_path / "d.json"
    rc, text, err = run_cli("deps", data_dir / "tp_mlp_2gpu" / "traces", "--json", out)
    assert rc == 0, err
    assert "per rank (2 ranks)" in text
    doc = json.loads(out.read_text())
    assert sorted(doc["ranks"]) == ["0", "1"] and all(v["summary"]["true"] > 0 for v in doc["ranks"].values())
    rc, text, err = run_cli("topo", data_dir / "tp_mlp_2gpu" / "bundle")
    assert rc == 0 and "rank 0" in text and "rank 1" in text


def test_a_folder_without_ranks_is_refused(data_dir, tmp_path):
    shutil.copy(data_dir / "forkjoin_trace" / "trace.json.gz", tmp_path / "trace.json.gz")
    with pytest.raises(InvalidInputError, match="Cannot tell the rank"):
        rank_files(tmp_path, "trace")


def test_two_files_for_one_rank_are_refused(data_dir, tmp_path):
    src = data_dir / "tp_mlp_2gpu" / "traces" / "trace.rank0.json.gz"
    shutil.copy(src, tmp_path / "x.json.gz")
    shutil.copy(src, tmp_path / "y.json.gz")
    with pytest.raises(InvalidInputError, match="Two trace files for rank 0"):
        rank_files(tmp_path, "trace")


def test_two_rank_bench_results(data_dir):
    doc = BenchResults.from_json(json.loads((data_dir / "tp_mlp_2gpu" / "bench.json").read_text()), "b")
    assert sorted(w.key for w in doc.workloads) == ["sample_workloads/tp_mlp.py [rank 0]",
                                                    "sample_workloads/tp_mlp.py [rank 1]"]
    # the rank is a field (read from the key in files written before the field existed)
    assert sorted(w.ident for w in doc.workloads) == [("sample_workloads/tp_mlp.py", 0), ("sample_workloads/tp_mlp.py", 1)]


def test_rank_helpers(monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not dist.distributed() and dist.rank_path(Path("t.json.gz")) == Path("t.json.gz")
    assert dist.gather({"a": 1}) == [{"a": 1}]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert dist.rank_path(Path("out/trace.json.gz")) == Path("out/trace.rank1.json.gz")
    assert dist.strip_option(["capture", "w.py", "--nproc-per-node", "2", "-o", "x"], "--nproc-per-node") == \
        ["capture", "w.py", "-o", "x"]
    assert dist.strip_option(["--nproc-per-node=2", "a"], "--nproc-per-node") == ["a"]


def test_deps_over_rank_folders_shows_each_ranks_tracer_overhead(run_cli, data_dir, tmp_path):
    """A rank whose trace carries the tracer's measured overhead gets it in its report and JSON;
    the rank without one gets none (the figure is per trace, never borrowed from another rank)."""
    src = data_dir / "tp_mlp_2gpu" / "traces"
    folder = tmp_path / "traces"
    folder.mkdir()
    doc = json.loads(gzip.decompress((src / "trace.rank0.json.gz").read_bytes()))
    doc.setdefault("cgtool", {})["tracer_overhead"] = {
        "untraced_replay_us": 400.0, "traced_replay_us": 520.0, "items_per_replay": 400, "per_item_us": 0.3}
    (folder / "trace.rank0.json").write_text(json.dumps(doc))
    shutil.copy(src / "trace.rank1.json.gz", folder / "trace.rank1.json.gz")
    out = tmp_path / "d.json"
    rc, text, err = run_cli("deps", folder, "--json", out)
    assert rc == 0, err
    ranks = json.loads(out.read_text())["ranks"]
    assert ranks["0"]["tracer_overhead"]["traced_replay_us"] == 520.0
    assert "tracer_overhead" not in ranks["1"]
    assert text.count("tracer overhead") == 1 and "1.30x" in text  # 520 / 400, in rank 0's table only
