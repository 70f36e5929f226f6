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
