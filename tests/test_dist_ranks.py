"""Commands under torchrun, on the CPU: where each rank's work runs, and that rank 0's report is
gathered over the process group the workload made in that same process.

`cgtool trace --nproc-per-node 2 --max-connections 1` once ran each rank's work in a child process
(to set CUDA_DEVICE_MAX_CONNECTIONS before CUDA starts); the workload's process group then lived in
the child, and the rank's own report to rank 0 failed with "the workload did not initialise
torch.distributed" after the traces were written. The fakes below keep that rule: the gather
succeeds only in the process where the workload ran.

The last test runs two real gloo ranks (skipped without torch; the CPU build is enough)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cgtool.capture import dist, tracing
from cgtool.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent


class FakeCaptured:
    def __init__(self, connections: str | None) -> None:
        self.connections = connections  # CUDA_DEVICE_MAX_CONNECTIONS when "CUDA started"

    def exports(self):
        return [("g0", {"exec_graph_id": 7, "nodes": [], "cgtool": {"rank": dist.rank()}})]


@pytest.fixture
def rank1(monkeypatch):
    """This process as rank 1 of 2, with a workload whose process group lives where it ran."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    state: dict[str, object] = {"workload_pid": None, "children": 0}

    def capture_workload(target, args, **kw):
        state["workload_pid"] = os.getpid()  # init_process_group ran here
        return FakeCaptured(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"))

    def trace_captured(cap, **kw):
        state["connections"] = cap.connections
        doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 0, "dur": 1, "args": {"graph id": 7}}],
               "cgtool": {"dropped_records": 0, "rank": dist.rank()}}
        return doc, [{"kind": "kernel", "graph_id": 7, "channel": 0}]

    def run_child(module, request, *, env=None, quiet=True):
        state["children"] = int(state["children"]) + 1  # the workload (and its process group) elsewhere
        return {"path": request["output"], "collector": "cupti", "gpu_events": 1, "graphs": 1,
                "exec_graph_ids": [7], "channels": [0], "dropped": 0, "has_node_ids": True, "rank": 1}

    def gather(obj):
        if state["workload_pid"] != os.getpid():
            raise UsageError("Running under torchrun (--nproc-per-node), but the workload did not initialise "
                             "torch.distributed")
        # rank 1: rank 0 reports

    monkeypatch.setattr(tracing, "capture_workload", capture_workload)
    monkeypatch.setattr(tracing, "trace_captured", trace_captured)
    monkeypatch.setattr(tracing, "require_cupti_python", lambda: None)
    monkeypatch.setattr(tracing, "parse_target", lambda t: t)
    monkeypatch.setattr(tracing, "run_child", run_child)
    monkeypatch.setattr(dist, "gather", gather)
    return state


@pytest.mark.parametrize("output", ["tpt", "tpt.json.gz"])
def test_trace_with_max_connections_gathers_in_the_rank_that_ran_the_workload(run_cli, rank1, tmp_path, output):
    rc, _text, err = run_cli("trace", "w.py", "--max-connections", "1", "-o", output)
    assert rc == 0, err
    assert rank1["children"] == 0 and rank1["workload_pid"] == os.getpid()
    assert rank1["connections"] == "1"  # set in the rank before its CUDA started
    written = [p.name for p in tmp_path.iterdir() if "rank1" in p.name]
    assert written == [dist.rank_path(Path(output)).name]


def test_max_connections_after_cuda_started_in_the_rank_is_refused(monkeypatch, rank1):
    class Cuda:
        @staticmethod
        def is_initialized() -> bool:
            return True

    monkeypatch.setitem(sys.modules, "torch", type(sys)("torch"))
    sys.modules["torch"].cuda = Cuda  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="CUDA has already started in this rank"):
        tracing.record_trace("w.py", [], "t.rank1.json.gz", max_connections=1)
    assert rank1["workload_pid"] is None


def test_max_connections_in_one_process_still_uses_a_child(monkeypatch, rank1):
    monkeypatch.delenv("WORLD_SIZE")
    tracing.record_trace("w.py", [], "t.json.gz", max_connections=1)
    assert rank1["children"] == 1 and rank1["workload_pid"] is None


def test_export_under_torchrun_writes_one_file_per_rank(run_cli, monkeypatch, tmp_path):
    from cgtool.capture import runner

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(runner, "capture_workload", lambda *a, **k: FakeCaptured(None))
    monkeypatch.setattr("cgtool.capture.entrypoint.parse_target", lambda t: t)
    rc, _text, err = run_cli("export", "w.py", "-o", "g.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "g.rank1.json").read_text())
    assert doc["cgtool"]["rank"] == 1 and not (tmp_path / "g.json").exists()


GATHER_PROG = textwrap.dedent('''\
    import json, os, sys
    import torch.distributed as d
    from cgtool.capture import dist
    d.init_process_group("gloo")
    every = dist.gather({"rank": dist.rank(), "pad": "x" * (100 * dist.rank())})
    with open(os.path.join(sys.argv[1], "rank%d" % dist.rank()), "w") as f:
        json.dump(every, f)
    d.destroy_process_group()
    ''')


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (gloo); the CPU build is enough")
def test_gather_over_a_real_gloo_group(tmp_path):
    (tmp_path / "prog.py").write_text(GATHER_PROG)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        str(tmp_path / "prog.py"), str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "rank0").read_text()) == [{"rank": 0, "pad": ""}, {"rank": 1, "pad": "x" * 100}]
    assert json.loads((tmp_path / "rank1").read_text()) is None
