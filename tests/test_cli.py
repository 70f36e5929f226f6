"""The command line: exit codes, one-paragraph errors, no tracebacks, nothing overwritten."""

import gzip
import json
import sys

import pytest


def no_traceback(err):
    assert "Traceback" not in err and err.startswith("cgtool: ")


def test_help_and_version(run_cli):
    rc, out, _ = run_cli("--help")
    assert rc == 0 and "Exit codes" in out
    for cmd in ("capture", "export", "bench", "dot", "topo", "diff", "trace", "deps", "doctor"):
        assert cmd in out
    rc, out, _ = run_cli("--version")
    assert rc == 0 and out.startswith("cgtool ")


def test_usage_error_is_exit_2(run_cli):
    rc, _, err = run_cli("deps")
    assert rc == 2 and "Missing argument" in err


def test_deps_on_a_real_trace(run_cli, data_dir, tmp_path):
    out_json = tmp_path / "deps.json"
    rc, out, err = run_cli("deps", data_dir / "forkjoin_trace_mc1" / "trace.json.gz", "--json", out_json)
    assert rc == 0, err
    assert "fake dependencies" in out and "hardware channels" in out
    doc = json.loads(out_json.read_text())
    assert doc["summary"]["fake"] > 0
    rc, _, err = run_cli("deps", data_dir / "forkjoin_trace_mc1" / "trace.json.gz", "--json", out_json)
    assert rc == 2 and "will not overwrite without --force" in err
    rc, _, _ = run_cli("deps", data_dir / "forkjoin_trace_mc1" / "trace.json.gz", "--json", out_json, "--force")
    assert rc == 0


def test_fail_on_fake(run_cli, data_dir):
    t = data_dir / "forkjoin_trace_mc1" / "trace.json.gz"
    rc, _, err = run_cli("deps", t, "--fail-on-fake", "0")
    assert rc == 1 and "fake dependencies found" in err
    rc, _, _ = run_cli("deps", data_dir / "forkjoin_trace" / "trace.json.gz", "--fail-on-fake", "0")
    assert rc == 0


def test_annotate_writes_a_new_trace_and_keeps_the_original(run_cli, data_dir, tmp_path):
    src = data_dir / "forkjoin_trace_mc1" / "trace.json.gz"
    before = src.read_bytes()
    out = tmp_path / "annotated.json"
    rc, _, err = run_cli("deps", src, "--annotate", out)
    assert rc == 0, err
    assert src.read_bytes() == before
    doc = json.loads(out.read_text())
    flows = [e for e in doc["traceEvents"] if e.get("cat") in ("graph_edge", "fake_dependency")]
    assert {e["cat"] for e in flows} == {"graph_edge", "fake_dependency"}
    starts = [e for e in flows if e["ph"] == "s"]
    assert len(starts) * 2 == len(flows)
    marked = [e for e in doc["traceEvents"] if "cgtool_fake_after" in (e.get("args") or {})]
    assert marked


def test_deps_with_separate_graph_and_inferred_match(run_cli, data_dir):
    rc, out, err = run_cli("deps", data_dir / "chain_kineto" / "trace.json.gz", "--graph", data_dir / "chain_kineto" / "graph.json")
    assert rc == 0, err
    assert "INFERRED" in out


def test_deps_exec_id_mismatch_is_exit_4(run_cli, data_dir):
    rc, _, err = run_cli("deps", data_dir / "forkjoin_trace" / "trace.json.gz", "--graph", data_dir / "chain" / "graph.json")
    assert rc == 4
    no_traceback(err)


BAD_TRACES = {
    "truncated.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1',
    "empty.json": b"",
    "notjson.json": b"this is not json",
    "list.json": b"[1, 2, 3]",
    "noevents.json": b'{"traceEvents": []}',
    "cpuonly.json": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}',
    "wrongtype.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}',
    "missingfields.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"device": 0}}]}',
    "badargs.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": "s", "correlation": 1}}]}',
    "nographwork.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 1}}]}',
}


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_bad_traces_are_exit_4_with_one_paragraph(run_cli, data_dir, tmp_path, name):
    p = tmp_path / name
    p.write_bytes(BAD_TRACES[name])
    rc, out, err = run_cli("deps", p, "--graph", data_dir / "forkjoin" / "graph.json")
    assert rc == 4, (rc, err)
    no_traceback(err)
    assert str(p) in err or p.name in err


def test_truncated_gzip_and_gzip_bomb(run_cli, data_dir, tmp_path):
    full = (data_dir / "forkjoin_trace" / "trace.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(full[: len(full) // 2])
    rc, _, err = run_cli("deps", cut)
    assert rc == 4 and "truncated" in err
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (50 << 20) + b"]}"))
    rc, _, err = run_cli("deps", bomb, "--max-bytes", str(10 << 20))
    assert rc == 4 and "gzip bomb" in err


def test_missing_file_is_exit_2(run_cli, tmp_path):
    rc, _, err = run_cli("topo", tmp_path / "nope.json")
    assert rc == 2 and "No such file" in err


def test_topo_json(run_cli, data_dir, tmp_path):
    out = tmp_path / "t.json"
    rc, text, err = run_cli("topo", data_dir / "forkjoin" / "graph.json", "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert doc["depth"] == 4 and doc["max_level_width"] == 8 and len(doc["critical_path"]) == 4


def test_topo_with_trace_weights_the_critical_path(run_cli, data_dir, tmp_path):
    t = data_dir / "forkjoin_trace" / "trace.json.gz"
    graph = tmp_path / "g.json"
    doc = json.loads(gzip.decompress(t.read_bytes()))
    graph.write_text(json.dumps(doc["cgtool"]["graphs"][0]))
    out = tmp_path / "t.json"
    rc, text, err = run_cli("topo", graph, "--trace", t, "--json", out)
    assert rc == 0, err
    assert json.loads(out.read_text())["critical_path_us"] > 0


def test_dot_writes_and_explains_missing_graphviz(run_cli, data_dir, tmp_path):
    out = tmp_path / "g.dot"
    rc, _, err = run_cli("dot", data_dir / "transformer_block" / "graph.json", "-o", out, "--render", "svg")
    assert rc == 0, err
    assert out.read_text().startswith("digraph")
    assert (tmp_path / "g.svg").exists() or "not installed" in err


def test_diff_fail_on(run_cli, data_dir):
    a, b = data_dir / "forkjoin" / "graph.json", data_dir / "transformer_block" / "graph.json"
    rc, out, _ = run_cli("diff", a, b)
    assert rc == 0 and "added" in out
    rc, _, err = run_cli("diff", a, b, "--fail-on", "depth-increased")
    assert rc == 1 and "depth-increased" in err
    rc, _, _ = run_cli("diff", a, a, "--fail-on", "any")
    assert rc == 0


def test_bench_compare_recorded_results(run_cli, data_dir, tmp_path):
    base = data_dir / "bench" / "h200_samples.json"
    rc, out, err = run_cli("bench", "--compare", base, base)
    assert rc == 0, err
    assert "performance gate passed" in out
    slow = json.loads(base.read_text())
    for w in slow["workloads"].values():
        if "gpu_us" in w:
            w["gpu_us"] = [x * 1.08 for x in w["gpu_us"]]
    sp = tmp_path / "slow.json"
    sp.write_text(json.dumps(slow))
    summary = tmp_path / "summary.md"
    import os

    rc, out, err = run_cli("bench", "--compare", base, sp, env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})
    assert rc == 1 and "regressed" in err
    assert "| workload |" in summary.read_text()
    other = json.loads(base.read_text())
    other["environment"]["device"] = "NVIDIA H100"
    op = tmp_path / "other.json"
    op.write_text(json.dumps(other))
    rc, _, err = run_cli("bench", "--compare", base, op)
    assert rc == 2 and "--allow-env-mismatch" in err
    rc, _, _ = run_cli("bench", "--compare", base, op, "--allow-env-mismatch")
    assert rc == 0


def test_capture_without_gpu_is_exit_3_with_advice(run_cli, tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    p = tmp_path / "w.py"
    p.write_text("import torch\ndef setup():\n    return lambda: torch.ones(1)\n")
    rc, _, err = run_cli("capture", p)
    assert rc == 3 and "CUDA" in err
    no_traceback(err)
    rc, _, err = run_cli("capture", f"{p}:missing")
    assert rc == 2 and "no function 'missing'" in err


def test_capture_refuses_to_overwrite_a_bundle(run_cli, tmp_path):
    (tmp_path / "cgtool-out" / "w").mkdir(parents=True)
    p = tmp_path / "w.py"
    p.write_text("def setup():\n    return lambda: None\n")
    rc, _, err = run_cli("capture", p)
    assert rc == 2 and "--force" in err


def test_doctor_runs_anywhere(run_cli):
    rc, out, err = run_cli("doctor")
    assert rc == 0, err
    assert "cupti-python" in out and "Graphviz dot" in out and "None" not in out


def _leaves(d, path=""):
    for k, v in d.items():
        if isinstance(v, dict) and k != "unknown":
            yield from _leaves(v, f"{path}{k}.")
        elif k != "unknown":
            yield f"{path}{k}", v


def _doctor_json(run_cli, tmp_path):
    rc, _, err = run_cli("doctor", "--json", tmp_path / "d.json")
    assert rc == 0, err
    return json.loads((tmp_path / "d.json").read_text())


def test_doctor_json_gives_values_and_says_why_one_is_unknown(run_cli, tmp_path):
    import importlib.util

    doc = _doctor_json(run_cli, tmp_path)
    leaves = dict(_leaves(doc))
    assert all(v is None or isinstance(v, (bool, int, str)) for v in leaves.values()), leaves
    nulls = {k for k, v in leaves.items() if v is None}
    assert nulls == set(doc["unknown"]) and all(doc["unknown"].values()), (nulls, doc["unknown"])
    # the compiled parts, against whether Python finds them
    assert doc["compiled"]["trace_columns"] is (importlib.util.find_spec("cgtool.artifacts._columns") is not None)
    if sys.version_info >= (3, 11):
        assert doc["compiled"]["record_callback"] is (
            importlib.util.find_spec("cgtool.capture.record._nodecb") is not None)
    torch_here = importlib.util.find_spec("torch") is not None
    assert doc["torch"]["installed"] is torch_here
    if not torch_here:
        assert doc["torch"]["version"] is None and "not installed" in doc["unknown"]["torch.version"]


def test_doctor_without_torch_suggests_no_torch_profiler(run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as if it were absent
    rc, out, err = run_cli("doctor")
    assert rc == 0, err
    assert "--profiler torch" not in out and "not installed" in out and "None" not in out


def test_doctor_with_a_cpu_only_torch(run_cli, monkeypatch, tmp_path):
    import types

    t = types.ModuleType("torch")
    t.__version__ = "2.13.0+cpu"
    t.version = types.SimpleNamespace(cuda=None)
    t.cuda = types.SimpleNamespace(is_available=lambda: False, get_device_name=lambda: "?")
    monkeypatch.setitem(sys.modules, "torch", t)
    rc, out, err = run_cli("doctor")
    assert rc == 0 and "CPU-only build" in out and "None" not in out, out
    doc = _doctor_json(run_cli, tmp_path)
    assert doc["torch"] == {"installed": True, "version": "2.13.0+cpu", "cuda_build": None, "cpu_only": True}
    assert doc["cuda"]["available"] is False and "CPU-only" in doc["unknown"]["torch.cuda_build"]
