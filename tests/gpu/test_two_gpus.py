"""Two GPUs, NCCL (run on a 2-GPU machine: `pytest -m gpu2 tests/gpu/test_two_gpus.py`).

`cgtool trace --nproc-per-node 2 --max-connections 1` on the tensor-parallel sample (each rank sets
the connections before its CUDA starts and reports to rank 0 over the workload's process group), and
`cgtool record` of an NCCL all-reduce captured in a graph under torchrun, each checked against what the
ranks report about themselves. Passed on 2 H200s (scripts/gpu/two_gpus.sh, tests/data/two_gpus).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.gpu2]

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")


def _load(p: Path) -> dict:
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def test_trace_with_one_connection_on_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("cupti")
    p = subprocess.run([sys.executable, "-m", "cgtool", "trace", str(ROOT / "sample_workloads" / "tp_mlp.py"),
                        "--nproc-per-node", "2", "--max-connections", "1", "--replays", "4", "-o", "tpt"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    for r in (0, 1):
        doc = _load(tmp_path / f"tpt.rank{r}")
        meta = doc["cgtool"]
        assert meta["rank"] == r and meta["world_size"] == 2 and meta["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
        graph = meta["graphs"][0]
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        n_kernel_nodes = sum(1 for n in graph["nodes"] if n["node_type"] == "kernel")
        assert len(kernels) == 4 * n_kernel_nodes  # every kernel node, every traced replay
        assert {e["args"]["channel"] for e in kernels} == {0}
        assert sum("nccl" in e["name"].lower() for e in kernels) == 4  # one all-reduce a replay


def test_record_of_an_nccl_all_reduce_in_a_graph(tmp_path: Path) -> None:
    pytest.importorskip("cupti")
    out = tmp_path / "rec"
    p = subprocess.run([sys.executable, "-m", "cgtool", "record", "-o", str(out), "--", sys.executable, "-m",
                        "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29561",
                        str(ROOT / "tests" / "programs" / "nccl_in_graph.py")],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    results = {r["rank"]: r for r in (json.loads(ln[7:]) for ln in p.stdout.splitlines() if ln.startswith("RESULT "))}
    assert sorted(results) == [0, 1]
    assert results[0]["value"] == results[1]["value"]  # the all-reduce agreed
    tree = json.loads((out / "index.json").read_text())
    for proc in tree["processes"]:
        if proc["followed"] and proc.get("rank") is not None:
            idx = json.loads((out / proc["folder"] / "index.json").read_text())
            mine = results[proc["rank"]]
            assert [g["replays"] for g in idx["graphs"]] == mine["replays"]
            st = idx["stopping"]["destroy_process_group"]
            assert st["returned"] is True and st["live_nccl_graphs"] == []  # reset before the destroy
