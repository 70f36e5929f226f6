"""`cgtool record` end to end on a real GPU (run on the GPU machine: `pytest -m gpu`).

Records tests/programs/crash_after_two.py and server_runner.py in fresh processes and checks the
recordings against what the programs print about themselves.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"


def _record(tmp_path: Path, program: str, *extra: str) -> tuple[int, str, Path]:
    pytest.importorskip("cupti")
    out = tmp_path / "rec"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "cgtool", "record", "-o", str(out), *extra, "--", "python",
                        str(PROGRAMS / program)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    return p.returncode, p.stdout, out


def _result(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_crash_exit_code_and_graphs(tmp_path: Path) -> None:
    code, stdout, out = _record(tmp_path, "crash_after_two.py")
    assert code == 1
    idx = json.loads((out / "index.json").read_text())
    assert [g["replays"] for g in idx["graphs"]] == _result(stdout)["replays"]


def test_server_replays_and_trace_join(tmp_path: Path) -> None:
    code, stdout, out = _record(tmp_path, "server_runner.py", "--trace-replays", "2")
    assert code == 0
    res = _result(stdout)
    idx = json.loads((out / "index.json").read_text())
    assert [g["replays"] for g in idx["graphs"]] == [res["replays"][str(b)] for b in res["batch_sizes"]]
    ids = set()
    for g in idx["graphs"]:
        ids |= {n["tools_id"] for n in json.loads((out / g["file"]).read_text())["nodes"]}
    trace = json.loads((out / "trace.json").read_text())
    got = [e["args"]["graph node id"] for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert got and all(i in ids for i in got)


def test_capture_bundle_names_the_workload_lines(tmp_path: Path) -> None:
    """`cgtool capture` bundles carry record's per-node source block: every kernel of the chain
    sample comes from its `y.mul` or `y.add` line, and `cgtool dot` shows those lines."""
    pytest.importorskip("cupti")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sample = ROOT / "sample_workloads" / "chain.py"
    out = tmp_path / "bundle"
    p = subprocess.run([sys.executable, "-m", "cgtool", "capture", str(sample), "-o", str(out), "--", "--kernels",
                        "20"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "graph.json").read_text())
    text = sample.read_text().splitlines()
    want = {i + 1: ln.strip() for i, ln in enumerate(text) if ln.strip() in ("y = y.mul(1.0001)", "y = y.add(0.0001)")}
    kernels = [e for n, e in zip(doc["nodes"], doc["cgtool"]["nodes"]) if n["node_type"] == "kernel"]
    assert len(kernels) == 20
    for e in kernels:
        s = e["source"]
        assert Path(s["file"]) == sample and s["line"] in want and s["code"] == want[s["line"]]
        assert s["call"] in ("y.mul", "y.add")
    dot = subprocess.run([sys.executable, "-m", "cgtool", "dot", str(out / "graph.json")], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=120)
    assert dot.returncode == 0 and f"chain.py:{min(want)}" in dot.stdout
