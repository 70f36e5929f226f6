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


def _index(out: Path, rank: int | None = None) -> tuple[Path, dict]:
    """The folder and index of the recorded process that made the graphs (or of the given rank)."""
    tree = json.loads((out / "index.json").read_text())
    for p in tree["processes"]:
        if p["followed"] and (p["rank"] == rank if rank is not None else p["graphs"]):
            return out / p["folder"], json.loads((out / p["folder"] / "index.json").read_text())
    raise AssertionError(f"no recorded process with graphs in {out}: {tree['processes']}")


def _result(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_crash_exit_code_and_graphs(tmp_path: Path) -> None:
    code, stdout, out = _record(tmp_path, "crash_after_two.py")
    assert code == 1
    _, idx = _index(out)
    assert [g["replays"] for g in idx["graphs"]] == _result(stdout)["replays"]


def test_server_replays_and_trace_join(tmp_path: Path) -> None:
    code, stdout, out = _record(tmp_path, "server_runner.py", "--trace-replays", "2")
    assert code == 0
    res = _result(stdout)
    folder, idx = _index(out)
    assert [g["replays"] for g in idx["graphs"]] == [res["replays"][str(b)] for b in res["batch_sizes"]]
    # the memory each capture took: the recorder's account (allocation calls seen by CUPTI) equals
    # torch's own reserved-memory growth, read by the program inside each capture
    assert [g["reserved_during_capture"] for g in idx["graphs"]] == res["reserved_in_capture"]
    assert any(res["reserved_in_capture"])
    ids = set()
    for g in idx["graphs"]:
        ids |= {n["tools_id"] for n in json.loads((folder / g["file"]).read_text())["nodes"]}
    trace = json.loads((folder / "trace.json").read_text())
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


def test_two_nodes_through_torchrun(tmp_path: Path) -> None:
    """`--nnodes/--node-rank/--rdzv-endpoint` reach torchrun: two `cgtool record` processes play the
    two machines of one job (static rendezvous on a local port); each records its own rank, with the
    job's world size, into its own folder, and the program's own account of its ranks agrees."""
    import socket

    pytest.importorskip("cupti")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = []
    for node in (0, 1):
        out = tmp_path / f"node{node}"
        procs.append((out, subprocess.Popen(
            [sys.executable, "-m", "cgtool", "record", "-o", str(out), "--nproc-per-node", "1", "--nnodes", "2",
             "--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}", "--", "python",
             str(PROGRAMS / "two_nodes.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=ROOT)))
    for node, (out, p) in enumerate(procs):
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        res = _result(stdout)
        assert res["rank"] == node and res["world"] == 2 and res["all_reduce"] == 3.0 and res["local_rank"] == 0
        folder, idx = _index(out, rank=node)
        assert (idx["rank"], idx["world_size"], idx["exit_code"]) == (node, 2, 0)
        assert [g["replays"] for g in idx["graphs"]] == [res["replays"]]
        doc = json.loads((folder / idx["graphs"][0]["file"]).read_text())
        lines = {n["source"]["line"] for n in doc["cgtool"]["nodes"] if n.get("source")}
        want = next(i + 1 for i, ln in enumerate((PROGRAMS / "two_nodes.py").read_text().splitlines())
                    if "LINE_GRAPH" in ln)
        assert lines == {want}
