"""The pytest fixture ``cgtool_bench`` on a real GPU (GPU machine:
`pytest -m gpu tests/gpu/test_pytest_plugin_gpu.py`). The figures against ``cgtool bench`` and the
gate's A/A rate: benchmarks/bench_pytest_plugin.py."""

import json
import statistics
from importlib.metadata import entry_points

import pytest

from cgtool.artifacts.bench import BenchResults, BenchSpec

pytestmark = pytest.mark.gpu
pytest_plugins = ["pytester"]

PLUGIN = [] if any(ep.value == "cgtool.pytest_plugin" for ep in entry_points(group="pytest11")) \
    else ["-p", "cgtool.pytest_plugin"]

TESTS = '''
import json
import torch


def test_small(cgtool_bench):
    x = torch.ones(1024, device="cuda")

    def step():
        y = x
        for _ in range(20):
            y = y.mul(1.0001).add(0.0001)
        return y

    r = cgtool_bench(step, recaptures=2)
    open("small.json", "w").write(json.dumps({"median": r.median_us, "host": r.host_us, "eager": r.eager_us,
                                               "speedup": r.speedup, "captures": r.result.capture_medians_us}))


def test_inputs(cgtool_bench):
    a = torch.randn(256, 256, device="cuda")
    cgtool_bench(lambda m: m @ m, a, name="matmul")


def test_sync_in_the_step(cgtool_bench):
    x = torch.ones(8, device="cuda")
    cgtool_bench(lambda: x.sum().item())
'''


def test_the_fixture_times_captures_and_fails_a_step_that_cannot_be_captured(pytester):
    """Each session in a fresh process: a failed capture may leave its process's CUDA state behind."""
    pytester.makepyfile(test_steps=TESTS)
    r = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--cgtool-save", "out.json", "--cgtool-replays", "200")
    r.assert_outcomes(passed=2, failed=1)
    assert "test_sync_in_the_step" in r.stdout.str()
    res = BenchResults.load(pytester.path / "out.json")
    by = {w.workload: w for w in res.workloads}
    assert set(by) == {"test_steps.py::test_small", "matmul", "test_steps.py::test_sync_in_the_step"}
    small = by["test_steps.py::test_small"]
    assert small.spec == BenchSpec(replays=200, recaptures=2) and len(small.gpu_us) == 40
    assert small.check_ok is True and small.nodes == 40 and small.environment.get("device")
    got = json.loads((pytester.path / "small.json").read_text())
    assert got["median"] == pytest.approx(statistics.median(small.gpu_us))
    assert got["host"] == pytest.approx(statistics.median(small.host_us))
    assert got["speedup"] == pytest.approx(statistics.median(small.eager_us) / statistics.median(small.gpu_us))
    assert len(got["captures"]) == 2
    assert by["test_steps.py::test_sync_in_the_step"].failed
    print("small step:", got)
    # the same run, judged against itself: no test is judged regressed by its own baseline's samples
    r = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--cgtool-baseline", "out.json", "--cgtool-replays",
                           "200", "-k", "not sync")
    assert "performance gate:" in r.stdout.str()
