"""`cgtool bench` times the graph a user's ``torch.cuda.graph`` program replays (GPU machine:
`pytest -m gpu tests/gpu/test_bench_hf_gpu.py`).

The capture's state against ``torch.cuda.graph``'s (the cuBLAS workspace in the graph's pool), and
bench's figure against a plain loop on Hugging Face models, in fresh processes
(``benchmarks/bench_vs_plain.py``).
"""

import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))

GEMM = """
    import torch

    def setup():
        torch.manual_seed(0)
        lin = torch.nn.Linear(512, 2048, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(4, 512, device="cuda", dtype=torch.bfloat16)

        @torch.no_grad()
        def step():
            return torch.relu(lin(x))

        return step
"""


def _blocks_in_pool(pool_id) -> list[int]:
    """Sizes of the allocated blocks in one memory pool, from the allocator's own snapshot."""
    import torch

    out = []
    for seg in torch.cuda.memory_snapshot():
        if tuple(seg.get("segment_pool_id", ())) == tuple(pool_id):
            out += [b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    return sorted(out)


def test_the_capture_allocates_what_torch_cuda_graph_allocates(tmp_path):
    """A user's ``torch.cuda.graph`` captures on a stream of its own, so a GEMM's cuBLAS workspace
    (cuBLAS keeps one per stream) is allocated in the graph's pool; cgtool's capture of the same
    step holds the same blocks in its pool (capturing on the warm-up stream would reuse the
    warm-up's workspace, outside the pool)."""
    import torch

    from cgtool.capture.entrypoint import call_setup, parse_target, resolve
    from cgtool.capture.runner import capture_workload

    path = tmp_path / "gemm.py"
    path.write_text(textwrap.dedent(GEMM))
    t = parse_target(str(path))
    step = call_setup(t, resolve(t, []), [])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    users = _blocks_in_pool(g.pool())

    cap = capture_workload(t, [], check=False)
    mine = _blocks_in_pool(cap.graphs[0][1].pools()[0])
    assert mine == users, (mine, users)
    assert users[-1] >= 1 << 20, users  # the workspace (MiBs) beside the step's few KiB
    del out


@pytest.mark.parametrize("workloads", ["llama_bf16,gpt2_bf16"])
def test_bench_equals_the_plain_loop_on_hf_models(tmp_path, workloads):
    """Fresh processes, alternating, 3 rounds (``bench_vs_plain.py --launch fork``): the median over
    rounds of cgtool's first capture over the plain loop is within 1 % on each model."""
    pytest.importorskip("transformers")
    out = tmp_path / "vs_plain.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_vs_plain.py"), "--workloads", workloads,
                        "--rounds", "3", "--blocks", "10", "--recaptures", "1", "--launch", "fork", "--json", str(out)],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600, check=False)
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    for name in workloads.split(","):
        res = doc["results"][name]
        ratios = [statistics.median(c["samples_us"][:10]) / statistics.median(pl["samples_us"])
                  for pl, c in zip(res["plain"], res["cgtool"])]
        assert len(ratios) == 3
        assert abs(statistics.median(ratios) - 1) <= 0.01, (name, ratios)
