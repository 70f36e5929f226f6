"""`cgtool bench` on a real GPU (run on the GPU machine: `pytest -m gpu tests/gpu/test_bench_gpu.py`).

Bench's figure against a plain event-timed loop over the same graph, in the same process and the
same device memory state; replays counted by a counter kernel; ``--cold-cache`` against warm
replays; ``--recaptures`` end to end; the replay check after capture; and the memory pool
``cgtool record`` attributes to each graph (``recorder._pool_on_stack``), checked through
``cgtool record``'s index against what the program's own ``g.pool()`` says.
"""

import functools
import inspect
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


@pytest.fixture
def captured(monkeypatch):
    """Every ``Captured`` that ``capture_workload`` returns, kept for the test (bench_workload
    imports the function from its module when it runs)."""
    from cgtool.capture import runner

    got = []
    real = runner.capture_workload

    @functools.wraps(real)  # its signature stays readable: inspect.signature follows __wrapped__
    def spy(*a, **kw):
        cap = real(*a, **kw)
        got.append(cap)
        return cap

    monkeypatch.setattr(runner, "capture_workload", spy)
    return got


def _workload(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def _plain_loop_us(replay, replays: int = 100, rounds: int = 20) -> float:
    """Median µs per replay: one CUDA event pair around ``replays`` back-to-back replays, ``rounds`` times."""
    import torch

    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(replays):
            replay()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1000 / replays)
    return statistics.median(out)


@pytest.mark.parametrize("workload,args", [("sample_workloads/chain.py", []),
                                           ("sample_workloads/transformer_block.py", [])])
def test_bench_matches_a_plain_event_timed_loop_of_the_same_graph(monkeypatch, workload, args):
    """The plain loop replays the graph bench timed, right after bench's timing and before the
    replay check (which runs the step eagerly and allocates): the same graph in the same device
    memory state, so only the two timing loops differ. It is timed again after the check, and both
    figures are printed (the check's eager run can move the replay time of a graph already
    captured; that is measured here, not asserted)."""
    from cgtool.artifacts.bench import BenchSpec
    from cgtool.capture import runner
    from cgtool.capture.bench import bench_workload

    real_check, plain = runner.check_replay, {}

    def plain_around_check(cap, *a, **kw):
        g = cap.graphs[0][1]
        replay = getattr(g, "_g", g).replay  # torch's CUDAGraph under the engine's Graph, as a program calls it
        plain["before"] = _plain_loop_us(replay)
        real_check(cap, *a, **kw)
        plain["after"] = _plain_loop_us(replay)

    monkeypatch.setattr(runner, "check_replay", plain_around_check)  # bench_workload imports it when it runs
    r = bench_workload(str(ROOT / workload), args, BenchSpec(replays=2000, blocks=20, warmup=50, eager=False))
    med = r.stats().median
    print(f"{workload}: cgtool bench {med:.2f} µs per replay; plain loop of the same graph {plain['before']:.2f} µs "
          f"before the check, {plain['after']:.2f} µs after it ({plain['after'] / plain['before']:.3f}x)")
    assert med == pytest.approx(plain["before"], rel=0.02), (med, plain)
    assert r.check_ok is True and len(r.gpu_us) == 20


COUNTER = """
    import torch

    def setup():
        x = torch.ones(1024, device="cuda")
        counter = torch.zeros(1, dtype=torch.int64, device="cuda")

        def step():
            counter.add_(1)  # one more per run of the step, eager or replayed
            return x * 2

        step.counter = counter
        return step
"""


@pytest.mark.parametrize("recaptures", [1, 3])
def test_every_replay_is_really_run(captured, tmp_path, recaptures):
    import torch

    from cgtool.artifacts.bench import BenchSpec
    from cgtool.capture.bench import bench_workload
    from cgtool.capture.runner import capture_workload

    spec = BenchSpec(replays=1234, blocks=10, warmup=17, eager=False, recaptures=recaptures)
    r = bench_workload(_workload(tmp_path, "counter.py", COUNTER), [], spec)
    torch.cuda.synchronize()
    counter = int(captured[0].eager.counter.item())
    capture_warmup = inspect.signature(capture_workload).parameters["warmup"].default
    first = capture_warmup + 1 + spec.warmup + spec.replays + len(r.host_us)  # warm-up, the replay after capture
    later = (recaptures - 1) * (1 + 1 + spec.warmup + spec.replays)  # a kept eager run, the replay after capture
    check = 2  # the eager step and one replay
    assert counter == first + later + check
    assert len(r.gpu_us) == spec.blocks * recaptures and len(r.capture_medians_us) == recaptures
    assert r.spec == spec


L2_READ = """
    import torch

    def setup():
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        buf = torch.rand(l2 // 4 // 4, device="cuda")  # a quarter of L2: warm replays read it from L2

        def step():
            return buf.sum()

        return step
"""


def test_cold_cache_is_slower_than_warm_on_a_working_set_that_fits_l2(tmp_path):
    """Both sampled per replay (each replay queued behind a GPU hold, so a sample is GPU time, not
    the host's launch latency): the flush before each cold replay is the only difference."""
    from cgtool.artifacts.bench import BenchSpec
    from cgtool.capture.bench import bench_workload

    w = _workload(tmp_path, "l2_read.py", L2_READ)
    warm = bench_workload(w, [], BenchSpec(replays=300, blocks=20, warmup=20, per_replay=True, eager=False))
    cold = bench_workload(w, [], BenchSpec(replays=300, blocks=20, warmup=20, cold_cache=True, eager=False))
    assert cold.sampling == warm.sampling == "per-replay"
    cm, wm = cold.stats().median, warm.stats().median
    print(f"a quarter of L2 read once per replay: cold {cm:.2f} µs, warm {wm:.2f} µs per replay (median of 300)")
    assert cm > 1.1 * wm, (cm, wm)


def test_recaptures_end_to_end(tmp_path):
    out = tmp_path / "b.json"
    # one process (the pooling of several is tested on the CPU: test_capture_orchestration)
    p = subprocess.run([sys.executable, "-m", "cgtool", "bench", str(ROOT / "sample_workloads" / "chain.py"), "--runs",
                        "1", "--replays", "400", "--blocks", "10", "--recaptures", "3", "--no-eager", "--json", str(out),
                        "--args", "--kernels 40"], capture_output=True, text=True, env={**ENV, "COLUMNS": "250"},
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    w = next(iter(json.loads(out.read_text())["workloads"].values()))
    assert w["spec"]["recaptures"] == 3 and len(w["capture_medians_us"]) == 3 and len(w["gpu_us"]) == 30
    assert "captures spread" in p.stdout


POOLS = """
    import json

    import torch

    from cgtool.capture.graph import Graph, graph

    x = torch.ones(1 << 16, device="cuda")
    s = torch.cuda.Stream()


    def work():
        return (x * 2).sum()


    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    keep, pools = [], []

    g1 = torch.cuda.CUDAGraph()  # torch.cuda.graph: its own pool
    with torch.cuda.graph(g1):
        keep.append(work())
    pools.append(g1.pool())

    g2 = torch.cuda.CUDAGraph()  # sharing g1's pool
    with torch.cuda.graph(g2, pool=g1.pool()):
        keep.append(work())
    pools.append(g2.pool())


    def direct():  # capture_begin / capture_end called by hand
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin()
            keep.append(work())
            g.capture_end()
        return g


    g3 = direct()
    pools.append(g3.pool())

    g4 = torch.cuda.CUDAGraph(keep_graph=True)  # instantiated later, with other graphs in the frame
    with torch.cuda.graph(g4):
        keep.append(work())
    g4.instantiate()
    pools.append(g4.pool())

    g5 = Graph()  # cgtool's engine
    with graph(g5):
        keep.append(work())
    pools.append(g5.pool())

    for g in (g1, g2, g3, g4, g5):
        g.replay()
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"pools": [f"{int(p[0])},{int(p[1])}" for p in pools]}))
"""


def test_record_attributes_each_graph_to_its_own_pool(tmp_path):
    """``recorder._pool_on_stack`` through its public effect: the ``pool`` of each graph in the
    recording (its process's ``p<PID>/index.json``) is the pool the program's own ``g.pool()`` names."""
    pytest.importorskip("cupti")
    prog = _workload(tmp_path, "pools.py", POOLS)
    out = tmp_path / "rec"
    p = subprocess.run([sys.executable, "-m", "cgtool", "record", "-o", str(out), "--", "python", prog],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    want = json.loads(line[len("RESULT "):])["pools"]
    assert want[0] == want[1] and len(set(want)) == 4  # g2 shares g1's pool; the others have their own
    assert recorded_pools(out) == want


def recorded_pools(folder: Path) -> list[str | None]:
    """The ``pool`` of every graph a recording holds, process by process in the tree's order and
    each process's graphs in capture order, read through ``cgtool.artifacts.recording`` (the
    top-level index.json of the process-tree layout counts graphs; each process's are in its
    ``p<PID>/index.json``)."""
    from cgtool.artifacts.recording import load_recordings

    return [g.pool for rec in load_recordings(folder) for g in rec.graphs]


def _cgtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cgtool", *args], capture_output=True, text=True,
                          env={**ENV, "COLUMNS": "250"}, cwd=cwd, timeout=300)


def test_the_check_after_capture_passes_a_good_step_and_catches_a_stale_one():
    """The replay-vs-eager check runs after the capture (and, in bench, after the timing): it
    still passes a correct workload and fails one whose graph froze a Python number; ``cgtool
    bench`` on the stale one exits 3 naming the mismatch. (The captures run in this process: one
    subprocess for the exit code keeps the test short.)"""
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import CaptureFailed, capture_checked

    good = capture_checked(parse_target(str(ROOT / "sample_workloads" / "forkjoin.py")), [])
    assert good.check_ok is True and good.max_abs_diff is not None
    stale = str(ROOT / "sample_workloads" / "broken" / "stale_scalar.py")
    with pytest.raises(CaptureFailed) as e:
        capture_checked(parse_target(stale), [])
    assert e.value.diagnosis.code.value == "replay-mismatch"
    p = _cgtool("bench", stale, "--runs", "1", "--replays", "100", "--blocks", "10")
    assert p.returncode == 3 and "replay-mismatch" in p.stderr, p.stderr
