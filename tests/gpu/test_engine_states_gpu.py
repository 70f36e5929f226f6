"""The engine never takes the process down: failed captures and calls out of order, on a real GPU.

Each test that can kill a process runs its sequence in a child (scripts/gpu/engine_pair.py,
scripts/gpu/engine_states.py); the in-process tests are sequences the engine now survives.
"""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def test_failed_capture_then_nested_use_mem_pool_in_one_process(torch):
    # The pair of PyTorch tests that ended the interpreter in Graph.reset (issue #36).
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/engine_pair.py"), "--backend", "cgtool"],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    recs = {x["test"]: x for x in map(json.loads, r.stdout.strip().splitlines())}
    assert recs["failed"]["reserved_after"] == recs["failed"]["reserved_before"], recs["failed"]
    assert recs["nested"]["replay_ok"] and recs["nested"]["pool_use_count_after_reset"] == 1


def test_state_machine_slice_has_no_death_hang_or_leak(torch, tmp_path):
    out = tmp_path / "states.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gpu/engine_states.py"), "--backends", "cgtool", "--sequences", "60",
         "--seed", "1000", "--workers", "4", "--timeout", "30", "--shrink", "1", "--shrink-seconds", "60",
         "--json", str(out), "--logs", str(tmp_path / "logs")],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )
    data = json.loads(out.read_text())
    t = data["tallies"]["cgtool"]
    res = data["results"]["cgtool"]
    assert len(res) == t["sequences"] == 60 and data["not_run"]["cgtool"] == 0
    # recounted from the raw records: every sequence ok and reserved bytes exactly as before it
    bad = [x for x in res if x["status"] != "ok" or x["leaked_bytes"] != 0]
    assert not bad, _explain(bad, r, data)
    assert (t["deaths"], t["hangs"], t["broken"], t["leaks"]) == (0, 0, 0, 0), (r.stdout, data["shrunk"])
    assert r.returncode == 0, r.stdout[-3000:]


def _explain(bad, r, data):
    """Which sequences failed and how, their calls, the shrunk killers and the workers' last words."""
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    import engine_states

    lines = [f"{len(bad)} of 60 sequences not ok:"]
    for x in bad[:5]:
        lines.append(f"  seed {x['id']}: status {x['status']} ({x.get('detail') or ''}), reserved "
                     f"{x.get('reserved_before')} -> {x.get('reserved_after')} (leaked {x.get('leaked_bytes')})")
        lines.append("    calls: " + json.dumps(engine_states.generate(x["id"]), separators=(",", ":")))
        lines.append("    errors: " + "; ".join(f"#{e['i']} {e['op']}: {e['type']}: {e['msg']}" for e in x["errors"]))
    for k in data["killers"].get("cgtool", [])[:2]:
        lines.append(f"  killer seed {k['id']} ({k['status']}): log tail\n{k['log'][-1200:]}")
    lines.append("shrunk: " + json.dumps(data["shrunk"].get("cgtool", []))[:2000])
    lines.append("stdout tail: " + r.stdout[-1500:])
    return "\n".join(lines)


def test_eager_rng_works_after_a_failed_capture(torch):
    from cgtool.capture.graph import Graph

    s = torch.cuda.Stream()
    g = Graph()
    with torch.cuda.stream(s):
        g.capture_begin()
        with pytest.raises(RuntimeError):
            torch.cuda.synchronize()
        with pytest.raises(RuntimeError):
            g.capture_end()
    a, b = torch.rand(16, device="cuda"), torch.rand(16, device="cuda")  # torch 2.11 alone raises here
    assert not torch.equal(a, b)
    g.reset()
    with torch.cuda.stream(s):
        g.capture_begin()
        y = torch.ones(4, device="cuda") * 2
        g.capture_end()
    g.replay()
    torch.cuda.synchronize()
    assert y.tolist() == [2.0] * 4


def test_reset_during_a_capture_ends_it_and_the_graph_captures_again(torch):
    from cgtool.capture.graph import Graph

    s = torch.cuda.Stream()
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    g = Graph()
    with torch.cuda.stream(s):
        g.capture_begin()
        _ = x + 1
    g.reset()  # outside the capture stream: torch 2.11 leaves the stream capturing here
    with torch.cuda.stream(s):
        assert not torch.cuda.is_current_stream_capturing()
        g.capture_begin()
        y = x * 3
        g.capture_end()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x * 3)


def test_capture_end_on_another_stream_is_a_clear_error_and_the_capture_goes_on(torch):
    from cgtool.capture.graph import Graph

    s, other = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    g = Graph()
    with torch.cuda.stream(s):
        g.capture_begin()
        y = x + 2
    with torch.cuda.stream(other), pytest.raises(RuntimeError, match="same stream it began on"):
        g.capture_end()
    with torch.cuda.stream(s):
        g.capture_end()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x + 2)


def test_a_graph_dropped_mid_capture_leaves_the_stream_usable(torch):
    from cgtool.capture.graph import Graph

    s = torch.cuda.Stream()
    g = Graph()
    with torch.cuda.stream(s):
        g.capture_begin()
        _ = torch.ones(4, device="cuda")
    del g, _
    gc.collect()
    with torch.cuda.stream(s):
        assert not torch.cuda.is_current_stream_capturing()
    torch.cuda.synchronize()


def test_pools_is_a_list_and_pool_of_a_failed_capture_says_reset(torch):
    from cgtool.capture.graph import Graph, graph

    g = Graph()
    with graph(g):
        _ = torch.ones(4, device="cuda") + 1
    assert isinstance(g.pools(), list) and g.pools()[0] == g.pool()
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.pools()
